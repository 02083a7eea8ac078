"""The public attention and block: the model's own modules, each with every switch the model has.

:class:`XLogSMaskAttention` holds a :class:`~xmask_cli.model.attention.StructuralAttention` and
:class:`XLogSMaskBlock` a :class:`~xmask_cli.model.layers.TransformerBlock`, built by the same
constructors ``xmask train`` calls, with the same log mask
(:class:`~xmask_cli.model.logsmask.XLogSMaskBias`) and the path choice of a full-graph node run
(:func:`~xmask_cli.model.attention.path.full_graph_attention`). Both are PyG ``MessagePassing``
modules: the attention weights pass through ``propagate`` as the ``alpha`` of ``message`` (only
when asked for, or when a message hook listens, as PyG's ``AttentionExplainer``'s does), and
``return_attention_weights=True`` returns ``(out, (logsmask_index, alpha))`` as ``GATConv`` does.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import to_dense_adj, to_dense_batch

from xmask_cli import arguments as args
from xmask_cli.config import ModelSection, NodeSection, PowersSection
from xmask_cli.errors import UsageError
from xmask_cli.model.attention.path import ATTENTIONS, PathRefused, full_graph_attention
from xmask_cli.model.attention.structural import COMBINES, StructuralAttention
from xmask_cli.model.layers import ACTIVATIONS, TransformerBlock
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias
from xmask_cli.model.model_config import plain_heads, sparse_refusal
from xmask_cli.nn.checks import check_state, compare_switches, dense_fits, fits_in_memory, graph_inputs
from xmask_cli.nn.from_run import block_settings, loaded_run

__all__ = ["XLogSMaskAttention", "XLogSMaskBlock"]

_Layer = TypeVar("_Layer", bound="_OnGraph")


def _dense_pair_weights(attention: Tensor, index: Tensor, batch: Tensor | None) -> Tensor:
    """``[P, H]`` weights at the pairs ``index`` of a padded ``[B, H, N, N]`` attention (``to_dense_batch``'s layout)."""
    if batch is None:
        graph, local = torch.zeros_like(index[0]), torch.arange(attention.size(-1), device=index.device)
    else:
        counts = torch.bincount(batch)
        local = torch.arange(batch.numel(), device=batch.device) - (counts.cumsum(0) - counts)[batch]
        graph = batch[index[0]]
    return attention[graph, :, local[index[0]], local[index[1]]]


class _OnGraph(MessagePassing):
    """The log mask, the path choice, the input checks and the switch record both public modules share.

    ``self.layer`` is the wrapped model module; ``self.switches`` what changes the function it computes.
    """

    layer: torch.nn.Module
    #: What :meth:`from_run` takes of a run's block: the block itself (None) or its attention (``'attn'``).
    _run_part: ClassVar[str | None] = None

    def __init__(self, in_channels: int, out_channels: int, heads: int, head_powers: Sequence[int] | None,
                 eps: float, outside_support: str, attention: str, dense_max_nodes: int):
        super().__init__(aggr="sum", flow="target_to_source", node_dim=0)  # pairs: row = query (target)
        self.in_channels = args.int_arg("in_channels", in_channels, minimum=1)
        self.out_channels = args.int_arg("out_channels", out_channels, minimum=1)
        self.heads = args.int_arg("heads", heads, minimum=1)
        powers = args.ints_arg("head_powers", head_powers, minimum=0)
        if powers is not None and len(powers) != self.heads:
            raise UsageError(f"head_powers: expected one power per head ({self.heads}); got {powers}")
        self.head_powers = tuple(powers) if powers is not None else tuple(range(1, self.heads + 1))
        eps = args.float_arg("eps", eps, low=0, high=1, low_open=True, high_open=True)
        outside_support = args.choice_arg("outside_support", outside_support,
                                          args.literal_choices(ModelSection, "outside_support"))
        self.attention_path = args.choice_arg("attention", attention, ATTENTIONS)
        self.dense_max_nodes = args.int_arg("dense_max_nodes", dense_max_nodes, minimum=0)
        masked = any(self.head_powers)  # every head plain (all powers 0): the model's use_bias=False
        self.log_mask = XLogSMaskBias(self.heads, self.head_powers, eps, outside_support) if masked else None
        fields = {"heads": self.heads, "use_bias": masked, "head_powers": self.head_powers,
                  "outside_support": outside_support}
        self.plain_heads = plain_heads(fields)
        self._dense_only = sparse_refusal(fields)
        self.switches: dict[str, Any] = {"in_channels": self.in_channels, "out_channels": self.out_channels,
                                         "heads": self.heads, "head_powers": list(self.head_powers), "eps": eps,
                                         "outside_support": outside_support}

    @property
    def max_power(self) -> int:
        """The ``K`` that ``logsmask_values`` must at least carry: the largest head power."""
        return max(self.head_powers)

    def path(self, num_nodes: int, num_pairs: int, device: torch.device | str) -> str:
        """``'dense'`` or ``'sparse'`` for a graph of ``num_nodes`` nodes and ``num_pairs`` stored pairs."""
        try:
            return full_graph_attention(self.attention_path, num_nodes, num_pairs, device, self.dense_max_nodes,
                                        self._dense_only)
        except PathRefused as exc:
            raise UsageError(f"attention: {exc}") from None

    def message(self, alpha: Tensor) -> Tensor:
        """The attention weights ``[P, H]`` as the messages (what message hooks, AttentionExplainer's, read)."""
        return alpha

    def forward(self, x: Tensor, logsmask_index: Tensor, logsmask_values: Tensor, batch: Tensor | None = None,
                return_attention_weights: bool | None = None) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """``[N, out_channels]`` outputs of ``x [N, in_channels]`` attending under the log mask of the pairs.

        Args:
            x: node features (one graph, or every graph of a batch).
            logsmask_index: ``[2, P]`` pairs, row = query, col = key (:class:`~xmask_cli.transforms.AddLogSMask`),
                each once, none across two graphs.
            logsmask_values: ``[P, K]`` ``Â^1..Â^K`` at each pair, ``K`` at least the largest head power.
            batch: ``[N]`` graph of each node (sorted, as PyG batches it); None: one graph.
            return_attention_weights: also return ``(logsmask_index, alpha)``, ``alpha [P, H]`` the weight of
                each pair in each head (heads numbered from 0), as PyG's ``GATConv`` does. A plain head
                (power 0) attends over every node of its graph: its ``alpha`` is its weight at the listed pairs.

        A batch takes the path its largest graph would (``dense`` pads every graph to that size); one graph
        takes the path a full-graph node run takes. Inputs are checked before any arithmetic: a wrong one
        raises :class:`~xmask_cli.errors.UsageError` naming it.
        """
        x, index, values, batch = graph_inputs(x, logsmask_index, logsmask_values, batch, self.in_channels,
                                               self.max_power)
        num_graphs = 1 if batch is None or batch.numel() == 0 else int(batch.max()) + 1
        largest = x.size(0) if batch is None else int(torch.bincount(batch).max()) if batch.numel() else 0
        weights = bool(return_attention_weights) or bool(self._message_forward_hooks)  # PyG's hook registry
        terms: dict[str, Tensor] = {}
        if self.path(largest, -(-index.size(1) // num_graphs), x.device) == "sparse":
            bias = None if self.log_mask is None else self.log_mask(SparseStructure(edge_index=index, values=values))
            out = self._run(terms, weights, x, bias, edge_index=index, groups=batch)
            alpha = terms.get("attention")
        else:
            dense_fits(num_graphs, largest, self.heads, values.size(1))
            xd, mask = to_dense_batch(x, batch)
            bias = None
            if self.log_mask is not None:
                powers = to_dense_adj(index, batch, values, max_num_nodes=xd.size(1)).permute(0, 3, 1, 2)
                bias = self.log_mask(DenseStructure(powers=powers, mask=mask))
            out = self._run(terms, weights, xd, bias, mask=mask)[mask]
            alpha = _dense_pair_weights(terms["attention"], index, batch) if weights else None
        if alpha is not None and self._message_forward_hooks:
            self.propagate(index, alpha=alpha, size=(x.size(0), x.size(0)))
        if return_attention_weights:
            return out, (index, cast(Tensor, alpha))  # computed above whenever asked for
        return out

    def _run(self, terms: dict[str, Tensor], weights: bool, x: Tensor, bias: Tensor | None, **kw: Any) -> Tensor:
        """The wrapped layer; with ``weights`` its attention terms go into ``terms``."""
        if not weights:
            return self.layer(x, bias, **kw)
        out, recorded = self.layer(x, bias, return_terms=True, **kw)
        terms.update(recorded)
        return out

    @classmethod
    def from_run(cls: type[_Layer], run: Any, layer: int | str = 0, *, attention: str = "auto",
                 dense_max_nodes: int = NodeSection.dense_max_nodes, **load: Any) -> _Layer:
        """Block ``layer`` of a trained run (its attention, for :class:`XLogSMaskAttention`), rebuilt with every
        switch the run used and its trained weights.

        Args:
            run: a run folder (``runs/<name>/<seed>/``, read by :func:`xmask_cli.load_run`, data and cache
                included) or a :class:`~xmask_cli.api.LoadedRun`.
            layer: the block's index, from 0; or ``'output'``, the attention output layer (``model.output:
                attention``).
            attention, dense_max_nodes: the path choice (they change the cost, not the numbers).
            load: for a run folder, keywords of :func:`xmask_cli.load_run` (``device``, ``cache_dir``,
                ``data_root``, ``offline``).

        Returns:
            The layer in eval mode on the run's device; its outputs are the run's.

        Raises:
            UsageError: ``layer`` is not a block of the run, or the block is one these classes do not
                compute (M3Dphormer's experts, learned biases: their structure is not AddLogSMask's).
        """
        settings, block = block_settings(loaded_run(run, load).model, layer)
        weights = block if cls._run_part is None else getattr(block, cls._run_part)
        takes = inspect.signature(cls.__init__).parameters  # the attention takes the block's attention keys only
        built = cls(**{k: v for k, v in settings.items() if k in takes}, attention=attention,
                    dense_max_nodes=dense_max_nodes)
        built.layer.load_state_dict(weights.state_dict())
        return built.to(next(weights.parameters()).device).eval()

    # ---------------------------------------------------------------- the switch record
    def get_extra_state(self) -> dict[str, Any]:
        """The switches the weights belong to, saved in every ``state_dict`` (``<prefix>_extra_state``)."""
        return {"layer": type(self).__name__, **self.switches}

    def set_extra_state(self, state: Any) -> None:
        compare_switches(state, self.get_extra_state())

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:
        # Runs first for this module's keys (also inside a user's network): refuse before anything is copied.
        check_state(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """``torch.nn.Module.load_state_dict``, its failures (missing or unexpected keys) as ``UsageError``."""
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except RuntimeError as exc:
            raise UsageError(f"state_dict: {' '.join(str(exc).split())[:300]}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


def _width(out_channels: int, heads: int, combine: str) -> int:
    """The wrapped attention's ``dim``: ``out_channels``, or ``heads * out_channels`` when the heads are averaged."""
    if combine == "mean":
        return heads * out_channels
    if out_channels % heads:
        raise UsageError(f"out_channels: expected a multiple of heads ({heads}) with combine={combine!r}; "
                         f"got {out_channels}")
    return out_channels


def _drops(**values: float) -> list[float]:
    return [args.float_arg(k, v, low=0, high=1, high_open=True) for k, v in values.items()]


class XLogSMaskAttention(_OnGraph):
    r"""Multi-head attention whose head ``h`` adds ``log(Â^{k_h} + eps)`` to its logits.

    Logits ``(q_i·k_j + M_ij) / sqrt(d_h)`` (``mask_scale='paper'``) or
    ``q_i·k_j / sqrt(d_h) + M_ij`` (``'none'``), ``M = log(Â^{k_h} + eps)``;
    a pair outside a head's stored support gets ``-inf`` under
    ``outside_support='hard'`` and ``log(eps)`` under ``'eps'`` (dense path only).

    Args:
        in_channels: width of ``x``.
        out_channels: width of the output.
        heads: number of heads ``H``.
        head_powers: ``k_h`` per head (head 0 first); default ``1..H``. ``0``: a plain head (no mask, every node).
        combine: ``'project'`` (heads concatenated, then an output projection; ``out_channels`` a multiple of
            ``H``), ``'concat'`` (concatenated only, GAT's hidden layers) or ``'mean'`` (each head emits
            ``out_channels``, averaged: GAT's output layer) (``model.combine``).
        dropout: on the output projection. attn_dropout: on the attention weights.
        mask_scale: ``'paper'`` or ``'none'`` (``model.mask_scale``).
        eps: floor inside the log (``structure.powers.eps``).
        outside_support: ``'hard'`` or ``'eps'`` (``model.outside_support``).
        attention: ``'auto'``, ``'dense'`` or ``'sparse'`` (``node.attention``).
        dense_max_nodes: above this many nodes ``auto`` goes sparse (``node.dense_max_nodes``).

    :meth:`from_run` rebuilds the attention of a trained run's block.

    Attributes:
        layer: the :class:`~xmask_cli.model.attention.StructuralAttention` itself.
        switches: the settings that change what it computes, as its ``state_dict`` records them.
    """

    _run_part = "attn"

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, head_powers: Sequence[int] | None = None,
                 *, combine: str = "project", dropout: float = 0.0, attn_dropout: float = 0.0,
                 mask_scale: str = ModelSection.mask_scale, eps: float = PowersSection.eps,
                 outside_support: str = ModelSection.outside_support, attention: str = "auto",
                 dense_max_nodes: int = NodeSection.dense_max_nodes):
        super().__init__(in_channels, out_channels, heads, head_powers, eps, outside_support, attention,
                         dense_max_nodes)
        combine = args.choice_arg("combine", combine, COMBINES)
        dropout, attn_dropout = _drops(dropout=dropout, attn_dropout=attn_dropout)
        mask_scale = args.choice_arg("mask_scale", mask_scale, args.literal_choices(ModelSection, "mask_scale"))
        dim = _width(self.out_channels, self.heads, combine)
        self.switches.update(combine=combine, mask_scale=mask_scale)
        sizes = {"in_channels": (self.in_channels, 3 * self.in_channels * dim),
                 "out_channels": (self.out_channels, dim * dim if combine == "project" else dim)}
        self.layer = fits_in_memory(sizes, lambda: StructuralAttention(
            dim, self.heads, dropout, attn_dropout, mask_scale, self.plain_heads, in_dim=self.in_channels,
            combine=combine))


class XLogSMaskBlock(_OnGraph):
    """A transformer block: :class:`XLogSMaskAttention` and a feed-forward layer, each with a residual and LayerNorm.

    The switches are the model's (``model.*`` keys of the same names): ``norm='post'`` (the paper):
    ``x = LN(x + f(x))``; ``'pre'``: ``x = x + f(LN(x))``; ``'none'``: ``x = x + f(x)``. Without
    ``residual`` the ``x +`` goes; ``ffn=False`` drops the feed-forward sub-layer (``ffn_mult``: its
    hidden width as a multiple of ``out_channels``); ``layer_dropout`` drops the block's input and
    ``activation`` (``'none'``, ``'elu'``, ``'relu'``, ``'gelu'``) is applied to its output. The
    other arguments are :class:`XLogSMaskAttention`'s. An input width other than ``out_channels`` (a
    first layer reading raw features) takes no residual or pre-norm; ``combine='mean'`` (an attention
    output layer) takes no residual, norm or feed-forward layer.

    :meth:`from_run` rebuilds a trained run's block, weights and switches. The ``state_dict`` records
    the switches: loading one into a block of another shape or switch set raises ``UsageError``.

    Attributes:
        layer: the :class:`~xmask_cli.model.layers.TransformerBlock` itself.
        switches: the settings that change what it computes, as its ``state_dict`` records them.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, head_powers: Sequence[int] | None = None,
                 *, ffn: bool = ModelSection.ffn, ffn_mult: int = ModelSection.ffn_mult,
                 residual: bool = ModelSection.residual, norm: str = ModelSection.norm,
                 activation: str = ModelSection.activation, combine: str = ModelSection.combine,
                 dropout: float = 0.0, attn_dropout: float = 0.0, layer_dropout: float = 0.0,
                 mask_scale: str = ModelSection.mask_scale, eps: float = PowersSection.eps,
                 outside_support: str = ModelSection.outside_support, attention: str = "auto",
                 dense_max_nodes: int = NodeSection.dense_max_nodes):
        super().__init__(in_channels, out_channels, heads, head_powers, eps, outside_support, attention,
                         dense_max_nodes)
        ffn, residual = bool(args.bool_arg("ffn", ffn)), bool(args.bool_arg("residual", residual))
        ffn_mult = args.int_arg("ffn_mult", ffn_mult, minimum=1)
        norm = args.choice_arg("norm", norm, args.literal_choices(ModelSection, "norm"))
        activation = args.choice_arg("activation", activation, tuple(ACTIVATIONS))
        combine = args.choice_arg("combine", combine, COMBINES)
        mask_scale = args.choice_arg("mask_scale", mask_scale, args.literal_choices(ModelSection, "mask_scale"))
        dropout, attn_dropout, layer_dropout = _drops(dropout=dropout, attn_dropout=attn_dropout,
                                                      layer_dropout=layer_dropout)
        if combine == "mean" and (residual or norm != "none" or ffn):
            raise UsageError("combine: 'mean' (an attention output layer) takes residual=False, norm='none', "
                             "ffn=False")
        if self.in_channels != self.out_channels and (residual or norm == "pre"):
            raise UsageError(f"in_channels: {self.in_channels} differs from out_channels ({self.out_channels}): "
                             f"that block takes residual=False and a norm other than 'pre'")
        dim = _width(self.out_channels, self.heads, combine)
        self.switches.update(ffn=ffn, ffn_mult=ffn_mult if ffn else None, residual=residual, norm=norm,
                             activation=activation, combine=combine, mask_scale=mask_scale)
        sizes = {"in_channels": (self.in_channels, 3 * self.in_channels * dim),
                 "out_channels": (self.out_channels, dim * dim if combine == "project" else dim),
                 "ffn_mult": (ffn_mult, 2 * dim * dim * ffn_mult if ffn else 0)}
        self.layer = fits_in_memory(sizes, lambda: TransformerBlock(
            dim, self.heads, ffn_mult, dropout, attn_dropout, norm, mask_scale, plain_heads=self.plain_heads,
            residual=residual, ffn=ffn, activation=activation, layer_dropout=layer_dropout,
            in_dim=self.in_channels, combine=combine))
