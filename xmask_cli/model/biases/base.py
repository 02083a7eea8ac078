"""What every learned bias shares: the :class:`LearnedBias` interface and helpers for its outputs.

A learned bias reads its cached structure from the batch's ``extras`` (see
:mod:`xmask_cli.model.biases` for which keys each one reads) and returns
``[B, H, N, N]`` (dense batch) or ``[E, H]`` (one row per attended pair)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from xmask_cli.config import BiasSection, RrwpSection
from xmask_cli.model.logsmask import StructuralBias, read_field

__all__ = ["BiasInputs", "LearnedBias", "extra", "in_chunks", "finish_dense", "finish_sparse", "linear_at", "CHUNK_FLOATS"]


@dataclass(frozen=True)
class BiasInputs:
    """What the cache's data decide about a bias's shape (the run's, not the preset's).

    Attributes:
        rrwp_dim: walk channels of the cache's RRWP (``structure.rrwp.steps + 1``).
        edge_encoding: ``index`` or ``linear``, how the cache's edge attributes are coded.
        edge_dims: per column the vocabulary (``index``), or the column count alone (``linear``).
    """

    rrwp_dim: int = RrwpSection.steps + 1
    edge_encoding: str = "index"
    edge_dims: tuple[int, ...] = ()


class LearnedBias(StructuralBias):
    """A bias of ``model.biases``: learned parameters over one kind of cached structure.

    ``forward(extras, mask=None, edge_index=None)``: ``[B, H, N, N]`` from dense
    extras (``mask [B, N]`` marks real nodes; padded pairs must get 0), or
    ``[E, H]`` from per-pair extras when ``edge_index [2, E]`` is given. Start
    the output at zero (the layer then equals plain attention at
    initialisation, GTLM Appendix B).
    """

    @classmethod
    def from_spec(cls, spec: BiasSection, num_heads: int, inputs: BiasInputs) -> LearnedBias:
        """The module for one ``model.biases`` entry serving ``num_heads`` heads.

        ``spec`` is typed as the config's section (the model's :class:`~xmask_cli.model.biases.stack.BiasSpec`
        is one): a bias reads only its own settings, and the biases stay below ``biases.stack``.

        The default takes ``num_heads`` only; a bias with settings of its own
        (``spec.max_distance``, ``spec.width``) or whose shape the cache's data decide
        (``inputs.rrwp_dim``, ``inputs.edge_dims``) overrides this.
        """
        return cls(num_heads)


def extra(extras: Any, name: str) -> Tensor:
    """``extras[name]`` (a mapping or an attribute holder), with an actionable error when the batch lacks it."""
    value = read_field(extras, name)
    if value is None:
        raise ValueError(f"this bias needs `{name}` in the batch; prepare the cache with its structure section enabled")
    return value


def linear_at(mlp: torch.nn.Sequential, index: int) -> torch.nn.Linear:
    """Layer ``index`` of ``mlp``, a :class:`~torch.nn.Linear` (a Sequential's items are typed as any Module)."""
    layer = mlp[index]
    if not isinstance(layer, torch.nn.Linear):
        raise TypeError(f"layer {index} of {type(mlp).__name__} is a {type(layer).__name__}, not a Linear")
    return layer


#: Floats of per-pair MLP activations computed at once (~64 MB in float32); see :func:`in_chunks`.
CHUNK_FLOATS = 1 << 24


def in_chunks(fn: Any, size: int, per_item: int, dim: int) -> Tensor:
    """``fn(start, stop)`` over slices of ``size`` items, concatenated along ``dim``.

    The per-pair MLPs (RRWP, magnetic) would otherwise hold ``[B, N, N, width]``
    activations for autograd: 14 GB for a PROTEINS batch. Each slice holds about
    :data:`CHUNK_FLOATS` floats and, when gradients are needed, is checkpointed
    (recomputed in the backward), so only the ``[.., H]`` outputs are kept.
    """
    step = max(1, CHUNK_FLOATS // max(per_item, 1))
    if step >= size:
        return fn(0, size)
    parts = []
    for start in range(0, size, step):
        stop = min(size, start + step)
        if torch.is_grad_enabled():
            parts.append(checkpoint(fn, start, stop, use_reentrant=False))
        else:
            parts.append(fn(start, stop))
    return torch.cat(parts, dim)


def finish_dense(out: Tensor, mask: Tensor | None, zero_diagonal: bool) -> Tensor:
    """``[B, N, N, H] -> [B, H, N, N]``, 0 on padded pairs (and the diagonal)."""
    out = out.permute(0, 3, 1, 2)
    keep = None
    if mask is not None and not bool(mask.all()):
        keep = mask[:, None, :, None] & mask[:, None, None, :]
    if zero_diagonal:
        n = out.size(-1)
        off = ~torch.eye(n, dtype=torch.bool, device=out.device)[None, None]
        keep = off if keep is None else keep & off
    return out if keep is None else out * keep.to(out.dtype)


def finish_sparse(out: Tensor, edge_index: Tensor, zero_diagonal: bool) -> Tensor:
    """``[E, H]`` as is, or 0 on self pairs (``zero_diagonal``)."""
    if not zero_diagonal:
        return out
    return out * (edge_index[0] != edge_index[1]).to(out.dtype).unsqueeze(-1)
