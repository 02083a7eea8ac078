"""The X-LogSMask term and the structural-bias protocol: per-head additive terms for the attention logits.

Every bias takes one batch and returns what head ``h`` adds to its logits,
either dense ``[B, H, N, N]`` (padded graph batches) or sparse ``[E, H]``
(one value per attended pair). How the term is scaled is the attention's
business (``mask_scale``), not the bias's.

Outside the support (``outside_support``, docs/attention-paths.md): under ``'hard'`` (default) a pair whose stored
``Â^{k_h}_ij`` is 0 gets ``-inf`` for head ``h``, the ``eps -> 0`` limit of
Eq. 9, so every attention path (dense grid, sparse pairs, partitions) gives
the same numbers; under ``'eps'`` it gets ``log(0 + eps)``, the literal dense
formula, which only a path holding the whole domain densely can represent.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import PowersSection
from xmask_cli.model.tracing import exporting

#: Values of ``model.outside_support``: ``hard`` (-inf outside a head's stored support) or ``eps`` (``log(eps)``).
OUTSIDE_SUPPORT = ("hard", "eps")

@dataclass
class DenseStructure:
    """A padded batch of dense structure.

    Attributes:
        powers: ``[B, K, N, N]`` float, ``Â^1..Â^K`` per graph, zero where no entry.
        mask: ``[B, N]`` bool, True for real nodes.
    """

    powers: Tensor
    mask: Tensor


@dataclass
class SparseStructure:
    """Structure on a list of attended pairs.

    Attributes:
        edge_index: ``[2, E]`` long, row = query ``i``, col = key ``j``.
        values: ``[E, K]`` float, ``Â^1..Â^K`` at each pair.
    """

    edge_index: Tensor
    values: Tensor


def read_field(obj: Any, name: str) -> Any:
    """``name`` from a mapping (a dict batch, a config dict) or an attribute holder (a dataclass); None if absent.

    Batches, extras and configs reach the model either way; one reader serves all.
    """
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def log_powers(values: Tensor, eps: float, outside_support: str = "hard",
               off_diagonal: Tensor | None = None, inplace: bool = False) -> Tensor:
    """``log(values + eps)`` elementwise, in float32 or wider; under ``'hard'``, ``-inf`` at zeros off the diagonal.

    ``off_diagonal``: broadcastable bool, True for pairs ``i != j`` (the self
    pair is always in the support, so no row is all ``-inf``); None: every
    zero is outside. The one formula of the X-LogSMask term:
    :class:`XLogSMaskBias` and the graph-level stream's per-graph cache call it.
    ``inplace``: overwrite ``values`` (float32 or wider, no grad) with the result,
    the same numbers without a second ``[K, n, n]`` tensor (the stream's own
    scratch of a large graph).
    """
    if outside_support not in OUTSIDE_SUPPORT:
        raise ValueError(f"outside_support must be one of {OUTSIDE_SUPPORT}, got {outside_support!r}")
    # 1e-30 underflows float16 (and log of a float16 rounds badly): widen first.
    wide = torch.promote_types(values.dtype, torch.float32)
    outside = None
    if outside_support == "hard":
        outside = values == 0
        if off_diagonal is not None:
            outside &= off_diagonal
    if inplace:
        if values.dtype != wide or values.requires_grad:
            raise ValueError("inplace log_powers needs float32-or-wider values without grad")
        out = values.add_(eps).log_()
    elif values.requires_grad:  # structure is data, but keep autograd correct if someone learns it
        out = torch.log(values.to(wide) + eps)
    else:  # torch.add allocates the output once; the log then runs in place on it.
        out = torch.add(values.to(wide), eps).log_()
    if outside is not None:
        out = out.masked_fill(outside, float("-inf")) if out.requires_grad else out.masked_fill_(outside, float("-inf"))
    return out


class StructuralBias(torch.nn.Module):
    """Interface: ``forward(batch)`` returns a per-head additive logit bias.

    Dense batches (``powers`` and ``mask``) give ``[B, H, N, N]``; sparse
    batches (``edge_index`` and ``values``) give ``[E, H]``.
    """

    num_heads: int

    def forward(self, batch: Any) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class XLogSMaskBias(StructuralBias):
    """X-LogSMask: head ``h`` adds ``log(Â^{k_h} + eps)`` to its logits.

    Args:
        num_heads: number of attention heads ``H``.
        head_powers: power ``k_h`` read by each head (1-based); default
            ``[1, ..., H]`` (head 1 sees 1 hop, ..., head H sees H hops).
            ``k_h = 0`` leaves head ``h`` without the log mask (its bias is 0),
            e.g. to give some heads only a learned bias.
        eps: floor inside the log: ``log(Â^k_ij + eps)`` inside the support.
        outside_support: ``'hard'``: a pair with ``Â^{k_h}_ij = 0`` gets
            ``-inf`` (the self pair excepted: it is always in the support, and
            keeping it finite means no row can be all ``-inf``); ``'eps'``:
            it gets ``log(eps)``.
    """

    # Buffers (registered in __init__): the channel each head reads, and the heads without a mask.
    _index: Tensor
    _off: Tensor

    def __init__(self, num_heads: int, head_powers: Sequence[int] | None = None, eps: float = PowersSection.eps,
                 outside_support: str = "hard"):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        powers = list(range(1, num_heads + 1)) if head_powers is None else [int(k) for k in head_powers]
        if len(powers) != num_heads:
            raise ValueError(f"head_powers has {len(powers)} entries for {num_heads} heads")
        if min(powers) < 0 or max(powers) < 1:
            raise ValueError(f"head_powers are 1-based powers of Â (0: no log mask on that head), got {powers}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if outside_support not in OUTSIDE_SUPPORT:
            raise ValueError(f"outside_support must be one of {OUTSIDE_SUPPORT}, got {outside_support!r}")
        self.outside_support = outside_support
        self.num_heads = num_heads
        self.head_powers = powers
        self.eps = float(eps)
        # 0-based channel of each head (heads without a mask read channel 0, zeroed later);
        # buffers so they follow .to(device).
        self.register_buffer("_index", (torch.tensor(powers, dtype=torch.long) - 1).clamp(min=0), persistent=False)
        self.register_buffer("_off", torch.tensor([k == 0 for k in powers]), persistent=False)
        self._any_off = 0 in powers

    def _log(self, values: Tensor, axis: int, off_diagonal: Tensor | None = None) -> Tensor:
        """``log(values[..., k_h, ...] + eps)`` per head along ``axis``, in float32 or wider.

        Under ``'hard'``, ``-inf`` where the value is 0 and ``off_diagonal``
        (broadcastable bool, True for pairs ``i != j``) holds.
        """
        picked = self._pick(values, axis)
        return self._zero_off(log_powers(picked, self.eps, self.outside_support, off_diagonal), axis)

    def _pick(self, values: Tensor, axis: int) -> Tensor:
        """Channel ``k_h`` of each head along ``axis`` (heads without a mask read channel 0, zeroed later)."""
        if values.size(axis) < max(self.head_powers):
            raise ValueError(f"head_powers need Â^{max(self.head_powers)}, batch has K={values.size(axis)}")
        if self.head_powers == list(range(1, self.num_heads + 1)):
            return values.narrow(axis, 0, self.num_heads)  # the default 1..H: a view, no copy
        return values.index_select(axis, self._index)

    def _zero_off(self, out: Tensor, axis: int) -> Tensor:
        """Heads with ``k_h = 0`` get no log mask (0)."""
        if self._any_off:
            shape = [1] * out.dim()
            shape[axis] = self.num_heads
            out = out.masked_fill(self._off.view(shape), 0.0)
        return out

    def from_log_powers(self, logp: Tensor, axis: int = 0) -> Tensor:
        """The bias from :func:`log_powers` of every channel ``Â^1..Â^K`` (``K`` along ``axis``).

        The same numbers as :meth:`forward` on the powers (the log is elementwise:
        taking it before or after picking the heads' channels is the same). The
        graph-level stream caches each graph's log-powers once, and the packed
        path reads them here instead of taking the log of every batch.
        """
        return self._zero_off(self._pick(logp, axis), axis)

    def forward(self, batch: Any) -> Tensor:
        """Bias for a dense or a sparse batch.

        Args:
            batch: mapping or object with ``powers`` ``[B, K, N, N]`` and
                ``mask`` ``[B, N]`` (dense), or ``edge_index`` ``[2, E]`` and
                ``values`` ``[E, K]`` (sparse).

        Returns:
            ``[B, H, N, N]`` (dense; 0 wherever the query or key is padding,
            the attention masks padded keys itself) or ``[E, H]`` (sparse).
        """
        powers = read_field(batch, "powers")
        if powers is not None:
            mask = read_field(batch, "mask")
            if mask is None:
                raise ValueError("a dense batch needs `mask` [B, N] beside `powers`")
            n = powers.size(-1)
            off_diag = ~torch.eye(n, dtype=torch.bool, device=powers.device)
            bias = self._log(powers, axis=1, off_diagonal=off_diag)
            # The all-real shortcut reads the mask's values: a program being exported takes the general form,
            # which gives the same numbers (the fill below is then a no-op).
            if not exporting() and bool(mask.all()):
                return bias
            # Keep padding rows/columns finite and inert (the attention gives padded keys -inf itself).
            pair = (mask[:, :, None] & mask[:, None, :])[:, None]
            return bias.masked_fill(~pair, 0.0) if bias.requires_grad else bias.masked_fill_(~pair, 0.0)
        values = read_field(batch, "values")
        if values is not None:
            edge_index = read_field(batch, "edge_index")
            off_pairs = None if edge_index is None else (edge_index[0] != edge_index[1]).unsqueeze(-1)
            return self._log(values, axis=1, off_diagonal=off_pairs)
        raise ValueError("batch has neither `powers` (dense) nor `values` (sparse)")

