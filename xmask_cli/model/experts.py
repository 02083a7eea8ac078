"""M3Dphormer's hierarchical masks and bi-level attention-expert routing (one graph, node task).

Tokens: the ``N`` real nodes, then ``P`` cluster virtual nodes (one per
partition part), then ``C`` class ("global") virtual nodes (one per label).
Three masks over the tokens, each an ``edge_index [2, E]`` (row = query,
col = key), one attention expert each:

- ``local``: the given pairs among real nodes (self loops added where absent);
  a virtual token attends to itself only.
- ``cluster``: real node -> its part's cluster token; cluster token ``p`` ->
  every real node of part ``p`` and itself; a class token -> itself.
- ``global``: real node -> every class token; class token ``c`` -> the
  *training* nodes labelled ``c`` and itself; a cluster token -> itself. Built
  from ``train_idx``/``train_labels`` only, so no other label reaches it.

Virtual tokens start from pooled features (:meth:`HierarchicalMasks.pool`),
and the paper's loss covers the training nodes plus the class tokens
(:attr:`HierarchicalMasks.virtual_labels`).

:class:`RoutedAttention` mixes the experts per token with the bi-level
sigmoid router ``out = a1·local + (1-a1)·(a2·cluster + (1-a2)·global)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from xmask_cli.config import ModelSection
from xmask_cli.model.attention.dualmode import MODES, Region, dual_attention, plan_regions
from xmask_cli.model.attention.structural import StructuralAttention

EXPERTS = ("local", "cluster", "global")
ROUTINGS = ("bilevel", "flat", "none")


def _pairs(rows: Tensor, cols: Tensor) -> Tensor:
    return torch.stack([rows.long(), cols.long()])


@dataclass
class HierarchicalMasks:
    """The three masks over ``N + P + C`` tokens, plus what pooling and the loss need.

    Attributes:
        num_nodes, num_parts, num_classes: ``N``, ``P``, ``C``.
        pairs: ``{'local', 'cluster', 'global'} -> [2, E]`` token pairs.
        part: ``[N]`` part of each real node.
        train_idx, train_labels: ``[T]`` training nodes and their labels.
        num_given_local: the first ``num_given_local`` local pairs are the
            given ones, in the given order (a bias for them lines up; see
            :meth:`pad_local`).
        virtual_labels: ``[C]`` label of each class token (``0..C-1``).
    """

    num_nodes: int
    num_parts: int
    num_classes: int
    pairs: dict[str, Tensor]
    part: Tensor
    train_idx: Tensor
    train_labels: Tensor
    num_given_local: int
    virtual_labels: Tensor = field(repr=False)

    @property
    def num_tokens(self) -> int:
        return self.num_nodes + self.num_parts + self.num_classes

    @property
    def local(self) -> Tensor:
        return self.pairs["local"]

    @property
    def cluster(self) -> Tensor:
        return self.pairs["cluster"]

    @property
    def global_(self) -> Tensor:
        """The ``global`` mask (``global`` is a Python keyword)."""
        return self.pairs["global"]

    @property
    def cluster_tokens(self) -> Tensor:
        """``[P]`` token ids of the cluster virtual nodes."""
        return torch.arange(self.num_nodes, self.num_nodes + self.num_parts, device=self.part.device)

    @property
    def class_tokens(self) -> Tensor:
        """``[C]`` token ids of the class virtual nodes (labels :attr:`virtual_labels`)."""
        start = self.num_nodes + self.num_parts
        return torch.arange(start, start + self.num_classes, device=self.part.device)

    def pool(self, x: Tensor) -> Tensor:
        """``[N + P + C, F]`` token features from real-node features ``x [N, F]``.

        Cluster token = mean over its part; class token ``c`` = mean over the
        training nodes labelled ``c`` (zeros for a part or class with none).
        Only training rows of ``x`` reach the class tokens.
        """
        if x.size(0) != self.num_nodes:
            raise ValueError(f"x has {x.size(0)} rows, expected {self.num_nodes}")
        return torch.cat([x, _mean_by(x, self.part, self.num_parts),
                          _mean_by(x[self.train_idx], self.train_labels, self.num_classes)])

    def pad_local(self, values: Tensor, fill: float = 0.0) -> Tensor:
        """A per-pair tensor ``[E_given, ...]`` over the given local pairs, extended to all local pairs."""
        if values.size(0) != self.num_given_local:
            raise ValueError(f"values has {values.size(0)} rows, expected {self.num_given_local}")
        extra = self.local.size(1) - self.num_given_local
        return torch.cat([values, values.new_full((extra, *values.shape[1:]), fill)])

    def token_groups(self, name: str) -> Tensor:
        """``[N + P + C]`` group per token for :func:`plan_regions` on mask ``name``.

        Real nodes are grouped by part everywhere. Virtual tokens that only
        attend to themselves in this mask share one group; a virtual token with
        real keys (cluster token in ``cluster``, class token in ``global``)
        is a group of its own, so its row is a dense ``[1, |keys|]`` block.
        """
        P, C = self.num_parts, self.num_classes
        device = self.part.device
        own = P + torch.arange(P + C, device=device)  # one group per virtual token
        shared = torch.full((P + C,), P, device=device)
        if name == "local":
            virtual = shared
        elif name == "cluster":
            virtual = torch.cat([own[:P], shared[P:] + P + C])
        elif name == "global":
            virtual = torch.cat([shared[:P] + P + C, own[P:]])
        else:
            raise ValueError(f"unknown mask {name!r}; expected one of {EXPERTS}")
        return torch.cat([self.part.long(), virtual])

    def plan(self, head_dim: int, max_region_queries: int = 256,
             threshold: float | str = "auto") -> dict[str, list[Region]]:
        """Dual-mode regions for each mask (see :func:`plan_regions`)."""
        return {
            name: plan_regions(ei, self.num_tokens, self.token_groups(name), max_region_queries, threshold,
                               head_dim=head_dim)
            for name, ei in self.pairs.items()
        }


def _mean_by(x: Tensor, index: Tensor, size: int) -> Tensor:
    """Row means of ``x`` per ``index`` value, ``[size, F]`` (zeros where none)."""
    total = x.new_zeros(size, x.size(1)).index_add_(0, index, x)
    count = torch.bincount(index, minlength=size).clamp(min=1).to(x.dtype)
    return total / count[:, None]


def hierarchical_tokens(
    num_nodes: int,
    local_edge_index: Tensor,
    part: Tensor,
    train_idx: Tensor,
    train_labels: Tensor,
    num_classes: int,
    *,
    num_parts: int | None = None,
) -> HierarchicalMasks:
    """Build M3Dphormer's local, cluster and global masks over real + virtual tokens.

    Args:
        num_nodes: ``N`` real nodes.
        local_edge_index: ``[2, E]`` local pairs among real nodes; self loops
            are appended for nodes that lack one.
        part: ``[N]`` part id (``0..P-1``) per node, e.g. METIS.
        train_idx: ``[T]`` training nodes; the only nodes whose labels are read.
        train_labels: ``[T]`` their labels in ``0..C-1``.
        num_classes: ``C``.
        num_parts: ``P``; ``part.max() + 1`` when None.
    """
    device = local_edge_index.device
    part = part.to(device=device, dtype=torch.long)
    train_idx = train_idx.to(device=device, dtype=torch.long)
    train_labels = train_labels.to(device=device, dtype=torch.long)
    N, C = num_nodes, num_classes
    P = int(part.max()) + 1 if num_parts is None and part.numel() else int(num_parts or 0)
    if part.shape != (N,):
        raise ValueError(f"part must have shape [{N}], got {tuple(part.shape)}")
    if part.numel() and (int(part.min()) < 0 or int(part.max()) >= P):
        raise ValueError(f"part ids must lie in [0, {P})")
    if train_idx.shape != train_labels.shape:
        raise ValueError("train_idx and train_labels must have the same length")
    if train_labels.numel() and (int(train_labels.min()) < 0 or int(train_labels.max()) >= C):
        raise ValueError(f"train labels must lie in [0, {C})")
    if train_idx.numel() and (int(train_idx.min()) < 0 or int(train_idx.max()) >= N):
        raise ValueError(f"train_idx must lie in [0, {N})")
    if train_idx.unique().numel() != train_idx.numel():
        raise ValueError("train_idx has duplicates")
    if local_edge_index.numel() and int(local_edge_index.max()) >= N:
        raise ValueError("local pairs must be among real nodes")

    nodes = torch.arange(N, device=device)
    cluster_tok = N + torch.arange(P, device=device)
    class_tok = N + P + torch.arange(C, device=device)
    virtual = torch.arange(N, N + P + C, device=device)

    # local: given pairs (order kept, so a bias lines up), missing self loops, virtual self pairs.
    local_ei = local_edge_index.long()
    has_loop = torch.zeros(N, dtype=torch.bool, device=device)
    has_loop[local_ei[0, local_ei[0] == local_ei[1]]] = True
    loops = nodes[~has_loop]
    local = torch.cat([local_ei, _pairs(loops, loops), _pairs(virtual, virtual)], 1)

    # cluster: node -> its token; token p -> nodes of part p and itself; class tokens -> themselves.
    cluster = torch.cat([
        _pairs(nodes, N + part),
        _pairs(N + part, nodes),
        _pairs(cluster_tok, cluster_tok),
        _pairs(class_tok, class_tok),
    ], 1)

    # global: node -> every class token; class token c -> training nodes of class c and itself.
    glob = torch.cat([
        _pairs(nodes.repeat_interleave(C), class_tok.repeat(N)),
        _pairs(N + P + train_labels, train_idx),
        _pairs(class_tok, class_tok),
        _pairs(cluster_tok, cluster_tok),
    ], 1)

    return HierarchicalMasks(
        num_nodes=N, num_parts=P, num_classes=C,
        pairs={"local": local, "cluster": cluster, "global": glob},
        part=part, train_idx=train_idx, train_labels=train_labels,
        num_given_local=local_edge_index.size(1),
        virtual_labels=torch.arange(C, device=device),
    )


class RoutedAttention(torch.nn.Module):
    """One :class:`StructuralAttention` per mask, mixed per token by a learned router.

    Routing ``'bilevel'`` (the paper): ``a1 = sigmoid(h·g1 + b1)``,
    ``a2 = sigmoid(h·g2 + b2)``, ``out = a1·local + (1-a1)·(a2·cluster + (1-a2)·global)``.
    ``g``/``b`` start at zero, so every token starts at (0.5, 0.25, 0.25): local first.
    With a subset of experts the levels that have nothing to choose drop out:
    one expert gets weight 1; local + one other: ``a1``, ``1-a1``;
    cluster + global: ``a2``, ``1-a2``.

    Routing ``'flat'`` (single-level ablation): softmax over a linear map of
    ``h`` to one logit per expert, zero-initialised (uniform at start).
    Routing ``'none'``: fixed equal weights.

    Args:
        dim, num_heads, dropout, attn_dropout, mask_scale: as :class:`StructuralAttention`.
        experts: a non-empty subset of ``('local', 'cluster', 'global')``;
            kept in that order (the columns of :meth:`routing_weights`).
        routing: ``'bilevel'``, ``'flat'`` or ``'none'``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        experts: tuple[str, ...] | list[str] = EXPERTS,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        mask_scale: str = ModelSection.mask_scale,
        routing: str = ModelSection.routing,
    ):
        super().__init__()
        unknown = set(experts) - set(EXPERTS)
        if not experts or unknown:
            raise ValueError(f"experts must be a non-empty subset of {EXPERTS}, got {tuple(experts)}")
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        self.experts = tuple(e for e in EXPERTS if e in experts)
        self.routing = routing
        self.attn = torch.nn.ModuleDict({
            e: StructuralAttention(dim, num_heads, dropout, attn_dropout, mask_scale) for e in self.experts
        })
        self.gate1: torch.nn.Linear | None = None
        self.gate2: torch.nn.Linear | None = None
        self.flat_gate: torch.nn.Linear | None = None
        if routing == "bilevel":
            others = [e for e in self.experts if e != "local"]
            # Only the levels that choose between something get a gate (no unused parameters).
            if "local" in self.experts and others:
                self.gate1 = _zero_linear(dim, 1)
            if len(others) == 2:
                self.gate2 = _zero_linear(dim, 1)
        elif routing == "flat" and len(self.experts) > 1:
            self.flat_gate = _zero_linear(dim, len(self.experts))

    def routing_weights(self, h: Tensor) -> Tensor:
        """``[T, n_experts]`` per-token expert weights (columns in :attr:`experts` order; rows sum to 1)."""
        n = len(self.experts)
        if n == 1:
            return h.new_ones(h.size(0), 1)
        if self.routing == "none":
            return h.new_full((h.size(0), n), 1.0 / n)
        if self.flat_gate is not None:  # flat routing over more than one expert
            return torch.softmax(self.flat_gate(h), dim=-1)
        # bilevel
        a2 = torch.sigmoid(self.gate2(h)) if self.gate2 is not None else None
        rest = torch.cat([a2, 1 - a2], -1) if a2 is not None else h.new_ones(h.size(0), 1)
        if self.gate1 is None:  # cluster + global only
            return rest
        a1 = torch.sigmoid(self.gate1(h))
        return torch.cat([a1, (1 - a1) * rest], -1)

    def forward(
        self,
        h: Tensor,
        pairs: dict[str, Tensor],
        bias: dict[str, Tensor | None] | None = None,
        mode: str = "sparse",
        regions: dict[str, list[Region]] | None = None,
    ) -> Tensor:
        """Routed mix of the experts' attention over their masks.

        Args:
            h: ``[T, D]`` token features.
            pairs: mask name -> ``[2, E]`` token pairs (one per expert).
            bias: mask name -> ``[E, H]`` bias or None; None for no bias at all.
            mode: ``'sparse'``, ``'dense'`` or ``'dual'`` (see :func:`dual_attention`).
            regions: mask name -> planned regions for ``'dual'`` (planned per
                call, in contiguous chunks, when missing).

        Returns:
            ``[T, D]``.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        weights = self.routing_weights(h)
        out = None
        for i, name in enumerate(self.experts):
            if name not in pairs:
                raise KeyError(f"no pairs for expert {name!r}")
            b = bias.get(name) if bias is not None else None
            reg = regions.get(name) if regions is not None else None
            attn = self.attn[name]
            assert isinstance(attn, StructuralAttention)  # built so in __init__
            y = dual_attention(attn, h, pairs[name], b, regions=reg, mode=mode)
            y = weights[:, i : i + 1] * y
            out = y if out is None else out + y
        assert out is not None  # experts is never empty (checked in __init__)
        return out


def _zero_linear(dim: int, out: int) -> torch.nn.Linear:
    layer = torch.nn.Linear(dim, out)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    return layer
