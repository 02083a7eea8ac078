"""What :meth:`XMaskNet.forward <xmask_cli.model.network.XMaskNet.forward>` takes: one small type per path.

The type of a batch names its path, so the model dispatches on it instead of
probing which fields are set; the tasks in ``engine/`` build them:

* :class:`DenseBatch`: a padded batch with dense powers (the dense path, or the
  packed path for a graph task with ``graph_layout='packed'``);
* :class:`PackedBatch`: a padded batch whose powers come as per-graph log-powers
  (a graph-level stream that caches them; the packed path);
* :class:`SparseBatch`: attended pairs of one graph or a disjoint union (the sparse path);
* :class:`TokenBatch`: the M3Dphormer tokens of one graph (the attention-experts path).

Example::

    out = model(DenseBatch(x=x, powers=powers, mask=mask))             # [B, out_dim] or [B, N, out_dim]
    out = model(SparseBatch(x=x, edge_index=pairs, values=values))    # [N, out_dim]
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import Tensor

from xmask_cli.model.attention.dualmode import Region
from xmask_cli.model.experts import HierarchicalMasks

__all__ = ["DenseBatch", "LogPairs", "PackedBatch", "SparseBatch", "TokenBatch", "ModelBatch"]


@dataclass
class DenseBatch:
    """A padded batch with dense powers.

    Attributes:
        x: ``[B, N, F]`` node features (image level: ``[B, C, H, W]`` images).
        powers: ``[B, K, N, N]`` ``Â^1..Â^K`` (image level: the grid's ``[1, K, T, T]``); None when ``use_bias=False``.
        mask: ``[B, N]`` bool, True for real nodes; None: all real.
        extras: dense structure the learned biases read (``spd``, ``rrwp``, ...), or None.
    """

    x: Tensor
    powers: Tensor | None = None
    mask: Tensor | None = None
    extras: Mapping[str, Tensor] | None = None


@dataclass
class LogPairs:
    """The log-powers of a batch's graphs at their stored pairs, flat over the batch (no per-graph tensors).

    Every pair of a graph that is not listed is outside the stored support: its
    value is what :func:`~xmask_cli.model.logsmask.log_powers` gives a zero there.

    Attributes:
        graph: ``[P]`` long, batch position of each pair's graph.
        row, col: ``[P]`` long, the pair's query and key within its graph.
        values: ``[P, K]`` float32 :func:`~xmask_cli.model.logsmask.log_powers` of ``Â^1..Â^K`` at the pair.
    """

    graph: Tensor
    row: Tensor
    col: Tensor
    values: Tensor


@dataclass
class PackedBatch:
    """A padded batch whose structure is log-powers (a graph-level stream's store).

    Attributes:
        x: ``[B, N, F]`` node features; mask: ``[B, N]`` bool, real nodes first in each row.
        log_powers: the batch's :class:`LogPairs`, or per graph its ``[K, n_b, n_b]``
            :func:`~xmask_cli.model.logsmask.log_powers`.
        log_spec: ``(eps, outside_support)`` they were taken with; must be the model's.
        extras: dense structure the learned biases read, or None.
    """

    x: Tensor
    mask: Tensor
    log_powers: LogPairs | tuple[Tensor, ...]
    log_spec: tuple[float, str] | None
    extras: Mapping[str, Tensor] | None = None


@dataclass
class SparseBatch:
    """Attended pairs of one graph or a disjoint union of graphs (no pair crosses graphs).

    Attributes:
        x: ``[N, F]`` node features, dense or a sparse COO tensor.
        edge_index: ``[2, E]`` attended pairs, row = query, col = key.
        values: ``[E, K]`` ``Â^1..Â^K`` at each pair; None when ``use_bias=False``.
        batch: ``[N]`` graph of each node; None: one graph.
        num_graphs: ``G``; None: ``batch.max() + 1``.
        extras: sparse structure the learned biases read (per pair / per node), or None.
    """

    x: Tensor
    edge_index: Tensor
    values: Tensor | None = None
    batch: Tensor | None = None
    num_graphs: int | None = None
    extras: Mapping[str, Tensor] | None = None


@dataclass
class TokenBatch:
    """The M3Dphormer tokens of one graph: real nodes, cluster and class tokens under three masks.

    Attributes:
        x: ``[N + P + C, F]`` token features (:meth:`HierarchicalMasks.pool`).
        masks: the local / cluster / global token masks.
        values: ``[E, K]`` ``Â^1..Â^K`` at the given local pairs (the X-LogSMask
            term of the local expert; read only when ``use_bias=True``).
        regions: dual-mode regions per head width (``masks.plan(head_dim)``), planned
            by the model on first use and kept here for the next forward.
    """

    x: Tensor
    masks: HierarchicalMasks
    values: Tensor | None = None
    regions: dict[int, dict[str, list[Region]]] = field(default_factory=dict)


#: Any batch :meth:`XMaskNet.forward` takes.
ModelBatch = DenseBatch | PackedBatch | SparseBatch | TokenBatch
