"""Which learned bias each head of each layer adds, as configured (``model.biases``).

A :class:`BiasSpec` names a bias type, the heads it serves and the layers it
is in; every (spec, layer) gets its own parameters (GTLM learns the SPD table
per layer and head). :class:`BiasStack` sums, for one layer, the terms of all
specs into a ``[B, H, N, N]`` / ``[E, H]`` bias, zero on heads a spec does not
serve. The parameter-free X-LogSMask term is added beside it by the network.

Example: heads 1-4 read ``Â^1..Â^4`` (``head_powers``), and SPD on every head::

    ModelConfig(..., heads=4, biases=(BiasSpec("spd"),))
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import BiasSection, RrwpSection, section_fields
from xmask_cli.model.biases import BiasInputs, bias_entry

__all__ = ["BiasSpec", "BiasStack"]


@dataclass(frozen=True)
class BiasSpec(BiasSection):
    """One learned bias in the model: a ``model.biases`` entry (:class:`~xmask_cli.config.BiasSection`,
    whose defaults it keeps), with ``heads`` and ``layers`` as tuples.

    Attributes:
        type: a name in :data:`xmask_cli.model.biases.BIASES` (``spd``, ``rrwp``, ``magnetic``, ``eigen``, ``edge``).
        heads: 1-based heads it serves; None: all.
        layers: 1-based layers it is in; None: all.
        max_distance: SPD buckets (distances ``1..max_distance`` own one).
        width: hidden width of the RRWP MLP and the magnetic DeepSet/MLP.
    """

    @classmethod
    def of(cls, entry: Any) -> BiasSpec:
        """A spec from a spec, a config section or a mapping (a saved run's ``model.biases`` entry)."""
        if isinstance(entry, BiasSpec):
            return entry
        return cls(**(section_fields(entry) if isinstance(entry, BiasSection) else dict(entry)))

    def __post_init__(self) -> None:
        bias_entry(self.type)  # raises on an unregistered type
        for name in ("heads", "layers"):
            value = getattr(self, name)
            if value is not None:
                value = tuple(int(v) for v in value)
                if not value or min(value) < 1 or len(set(value)) != len(value):
                    raise ValueError(f"bias {self.type}: {name} must be distinct 1-based indices, got {list(value)}")
                object.__setattr__(self, name, value)

    def placement(self, num_heads: int, num_layers: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(heads, layers)`` it serves, 1-based, with None resolved to all of them."""
        return tuple(self.heads or range(1, num_heads + 1)), tuple(self.layers or range(1, num_layers + 1))

    @property
    def needs(self) -> str:
        """The cache section it reads (``spd``, ``rrwp``, ``magnetic``, ``spectrum``; its registry entry's)."""
        return bias_entry(self.type).needs


class BiasStack(torch.nn.Module):
    """The learned biases of every layer, placed on their heads.

    Args:
        specs: the configured biases.
        num_heads: attention heads ``H``.
        num_layers: transformer blocks ``L``.
        rrwp_dim: walk channels of the cache (``structure.rrwp.steps + 1``).
        edge_encoding, edge_dims: the cache's coding of its edge attributes (the ``edge`` bias).

    Raises:
        ValueError: a spec names a head above ``H`` or a layer above ``L``.
    """

    def __init__(self, specs: Sequence[BiasSpec], num_heads: int, num_layers: int,
                 rrwp_dim: int = RrwpSection.steps + 1, edge_encoding: str = "index",
                 edge_dims: Sequence[int] = ()):
        super().__init__()
        inputs = BiasInputs(int(rrwp_dim), edge_encoding, tuple(int(d) for d in edge_dims))
        self.num_heads, self.num_layers = int(num_heads), int(num_layers)
        per_layer = [torch.nn.ModuleList() for _ in range(num_layers)]
        self.layers = torch.nn.ModuleList(per_layer)
        self._heads: list[list[tuple[int, ...]]] = [[] for _ in range(num_layers)]
        self._types: list[list[str]] = [[] for _ in range(num_layers)]
        for spec in specs:
            heads, layers = spec.placement(num_heads, num_layers)
            if max(heads) > num_heads:
                raise ValueError(f"bias {spec.type}: head {max(heads)} but the model has {num_heads} heads")
            if max(layers) > num_layers:
                raise ValueError(f"bias {spec.type}: layer {max(layers)} but the model has {num_layers} layers")
            for layer in layers:
                per_layer[layer - 1].append(bias_entry(spec.type).cls.from_spec(spec, len(heads), inputs))
                self._heads[layer - 1].append(tuple(h - 1 for h in heads))
                self._types[layer - 1].append(spec.type)

    def has(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has any learned bias."""
        return len(self._biases(layer)) > 0

    def _biases(self, layer: int) -> torch.nn.ModuleList:
        """Layer ``layer``'s bias modules (each item of :attr:`layers` is a ModuleList, built so above)."""
        biases = self.layers[layer]
        if not isinstance(biases, torch.nn.ModuleList):
            raise TypeError(f"BiasStack.layers[{layer}] is a {type(biases).__name__}, not a ModuleList")
        return biases

    def head_types(self, layer: int) -> list[list[str]]:
        """Per head of layer ``layer`` (0-based), the learned bias types it adds."""
        out: list[list[str]] = [[] for _ in range(self.num_heads)]
        for heads, kind in zip(self._heads[layer], self._types[layer]):
            for h in heads:
                out[h].append(kind)
        return out

    def forward(self, layer: int, extras: Any, mask: Tensor | None = None,
                edge_index: Tensor | None = None) -> Tensor | None:
        """Sum of layer ``layer``'s biases: ``[B, H, N, N]`` (dense) or ``[E, H]`` (``edge_index`` given).

        None when the layer has no learned bias.
        """
        total: Tensor | None = None
        axis = 1 if edge_index is None else -1
        for module, heads in zip(self._biases(layer), self._heads[layer]):
            out = module(extras, mask=mask, edge_index=edge_index)
            if len(heads) != self.num_heads or heads != tuple(range(self.num_heads)):
                shape = list(out.shape)
                shape[axis] = self.num_heads
                full = out.new_zeros(shape)
                idx = torch.tensor(heads, dtype=torch.long, device=out.device)
                out = full.index_add(axis if axis >= 0 else out.dim() - 1, idx, out)
            total = out if total is None else total + out
        return total
