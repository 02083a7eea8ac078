"""Hyper-parameters of the graph transformer: :class:`ModelConfig` and what reads them.

:class:`ModelConfig` is the preset's ``model`` section plus what a run adds;
:func:`plain_heads`, :func:`sparse_refusal` and :func:`head_labels` read a
config (or the raw ``model`` section) without building the model
(:class:`~xmask_cli.model.network.XMaskNet`), which re-exports them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from xmask_cli.config import Config, ModelSection, PowersSection, RrwpSection, section_fields
from xmask_cli.config_arch import arch_needs, resolve_arch
from xmask_cli.config_rules import check_model_rules, resolve_encoder
from xmask_cli.config_section import needer
from xmask_cli.errors import ConfigError
from xmask_cli.model.biases import bias_entry
from xmask_cli.model.biases.stack import BiasSpec
from xmask_cli.model.logsmask import read_field
from xmask_cli.structure.edge_attrs import ENCODINGS

#: cls: the class token's output (image level, ``encoder='patch'``); the others pool real nodes / patches.
READOUTS = ("sum", "mean", "max", "cls")
#: graph: one output per graph; node: one per node; link / edge: one per node pair (see :meth:`XMaskNet.score_pairs`);
#: image: one per image (patch tokens over the shared grid graph).
TASKS = ("graph", "node", "link", "edge", "image")
#: linear: ``Linear(in_dim, hidden)`` on float features; atom: OGB's ``AtomEncoder`` on integer atom features;
#: patch: a strided convolution over ``[B, in_dim, H, W]`` images (:class:`~xmask_cli.model.patch.PatchEncoder`);
#: none: no encoder, the first block's attention reads the raw features (node task).
ENCODERS = ("linear", "atom", "patch", "none")
#: Values of ``model.graph_layout`` (graph task): ``packed`` (:mod:`~xmask_cli.model.packing`) or ``padded``.
GRAPH_LAYOUTS = ("packed", "padded")
#: Values of ``model.output``: a per-node MLP head, or a last attention layer whose heads emit the outputs.
OUTPUTS = ("mlp", "attention")


@dataclass(frozen=True)
class ModelConfig(ModelSection):
    """Hyper-parameters of :class:`XMaskNet`: the preset's ``model`` section plus what a run adds.

    Every hyper-parameter of :class:`~xmask_cli.config.ModelSection` (one
    schema, one set of defaults) is a field here too; build this view from a
    config with :meth:`from_section`. What the section's keys mean for the model:

    Attributes:
        hidden: model width ``D`` (a multiple of ``heads``).
        heads: attention heads ``H``.
        layers: number of transformer blocks.
        ffn_mult: FFN hidden width as a multiple of ``hidden``.
        dropout: dropout in the blocks and the task head.
        attn_dropout: dropout on the attention weights.
        norm: ``'post'``, ``'pre'`` or ``'none'`` LayerNorm placement.
        residual: residual connections around each block's sub-layers.
        ffn: whether the blocks have their feed-forward sub-layer.
        activation: ``'none'``, ``'elu'``, ``'relu'`` or ``'gelu'`` on every block's output.
        layer_dropout: dropout on the input of every attention layer (each
            block and the attention output layer); 0 disables it.
        output: ``'mlp'`` (a per-node / per-graph MLP head) or ``'attention'``
            (node task: a last X-LogSMask attention layer of ``output_heads``
            heads, each emitting ``out_dim`` outputs, averaged over heads).
        output_heads: heads of the attention output layer.
        output_powers: power of ``Â`` per output head; None means ``Â^1`` for
            every head. Stored as a tuple.
        mask_scale: ``'paper'`` or ``'none'``, see :class:`StructuralAttention`.
        head_powers: power of ``Â`` read by each head (0: no log mask on that
            head); None means ``[1, ..., H]``. Stored as a tuple so the config stays hashable.
        outside_support: ``'hard'`` (default): a pair with ``Â^{k_h}_ij = 0``
            gets ``-inf`` for head ``h`` on every path (the ``eps -> 0`` limit
            of Eq. 9); ``'eps'``: it gets ``log(eps)``, the literal dense
            formula, which only dense paths compute (sparse ones refuse it).
        readout: ``'sum'``, ``'mean'`` or ``'max'`` over real nodes (graph task).
        readout_norm: resolved by the engine into ``readout_scale``; the model reads only that.
        use_bias: False drops the structural bias (plain attention, the ablation).
        encoder: ``'linear'``, ``'atom'`` (OGB ``AtomEncoder``; ``in_dim`` is then
            ignored), ``'patch'`` or ``'none'`` (node task: the first block's attention
            reads the raw features, as GAT's first layer); ``'auto'`` is ``'patch'`` for
            the image task, else ``'linear'`` (the engine picks ``'atom'`` for OGB molecules itself).
        combine: ``'project'`` (a block's heads concatenated, then its output
            projection) or ``'concat'`` (concatenated only, GAT's hidden layers).
        input_dropout: dropout on the raw input features before a linear encoder
            (as GCN/GAT apply to sparse bag-of-words features); 0 disables it.
        biases: learned structural biases (SPD, RRWP, magnetic, eigen) and the
            heads and layers each serves, added to the X-LogSMask term.
        experts: M3Dphormer attention experts, a subset of ``('local', 'cluster',
            'global')``; empty (default) = one attention per block. With experts
            the model runs on tokens (real nodes + cluster and class virtual
            nodes; :meth:`XMaskNet.forward_tokens`, node task only); the
            X-LogSMask term goes to the local expert.
        routing: ``'bilevel'`` (the paper's sigmoid gates, starting local),
            ``'flat'`` (one softmax gate) or ``'none'`` (equal weights).
        expert_attention: ``'dual'`` (dense or sparse per region, by density),
            ``'sparse'`` or ``'dense'``; all three compute the same numbers.
        positional: ``'none'`` or ``'learned'`` position embeddings of the patch tokens (``encoder='patch'``).
        node_struct: structural input channels the engine appends to the node
            features (``'degree'``, ``'rwse'``, ``'degree+rwse'``; see
            :mod:`xmask_cli.engine.batching.features`); the model reads only ``struct_dim``.
        graph_layout: graph task, how :meth:`XMaskNet.forward` runs a padded batch:
            ``'packed'`` (default) runs the token-wise layers on the real nodes only
            and attention per group of similar-sized graphs
            (:mod:`~xmask_cli.model.packing`); ``'padded'`` runs every layer over
            the batch padded to its largest graph. Same numbers to float rounding,
            dropout masks included.

    What a run adds:

    Attributes:
        in_dim: node feature width ``F`` (keyword only, required).
        out_dim: output width, classes or regression targets (keyword only, required).
        eps: floor inside ``log(Â^k + eps)`` (``structure.powers.eps``).
        readout_scale: factor on the pooled features before the head (graph
            task). The graph-level engine sets ``1 / mean node count`` of the
            training graphs for a ``sum`` readout (``model.readout_norm: size``):
            a sum of post-LayerNorm node states grows with the node count, and a
            head fed inputs of tens to hundreds is trained at that many times the
            learning rate (Adam steps each weight by ~lr, the pre-activation moves
            by ~lr x the input's L1 norm), which kills its ReLUs and collapses
            the output to a constant. The scale is a fixed number,
            not a statistic of the batch: a graph's output never depends on its
            batch, and the sum keeps its count information.
        task: ``'graph'`` (one output per graph), ``'node'`` (one per node), ``'link'``
            or ``'edge'`` (one per node pair, scored by :meth:`XMaskNet.score_pairs`).
        rrwp_dim: walk channels of the cache's RRWP (``structure.rrwp.steps + 1``).
        edge_encoding: how the ``edge`` bias encodes the cache's edge attributes (``index``: integer codes,
            one table per column; ``linear``: floats), as the cache's ``edge`` section records it.
        edge_dims: per column the vocabulary (``index``), or the column count alone (``linear``); ``()``
            without an ``edge`` bias.
        struct_dim: how many of the last ``in_dim`` feature columns are structural
            channels (``node_struct``). A linear encoder reads them with the rest;
            the atom encoder embeds the leading atom columns and adds a linear map of these.
        image_size: ``(H, W)`` of the images (``encoder='patch'``; ``in_dim`` is then the channel count).
        patch_size: patch side in pixels (``encoder='patch'``).
    """

    in_dim: int = field(kw_only=True)
    out_dim: int = field(kw_only=True)
    eps: float = PowersSection.eps
    readout_scale: float = 1.0
    task: str = "graph"
    rrwp_dim: int = RrwpSection.steps + 1
    edge_encoding: str = "index"
    edge_dims: Sequence[int] = ()
    struct_dim: int = 0
    image_size: Sequence[int] = ()
    patch_size: int = 0

    #: Section keys the engine resolves before building the model (``readout_norm`` -> ``readout_scale``):
    #: not saved in a run's ``config.json`` ``model``.
    NOT_SAVED: ClassVar[frozenset[str]] = frozenset({"readout_norm"})

    @classmethod
    def from_section(cls, section: ModelSection, **run: Any) -> ModelConfig:
        """The preset's ``model`` section plus what the run adds (``in_dim``, ``out_dim``, ``task``, ...).

        ``run`` may also override a section key the engine resolves (e.g. ``encoder='atom'`` for ``auto``).
        """
        return cls(**{**section_fields(section), **run})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able hyper-parameters as saved with a run; ``ModelConfig(**d)`` rebuilds the config."""
        return {k: v for k, v in asdict(self).items() if k not in self.NOT_SAVED}

    def __post_init__(self) -> None:
        """Check the fields this view adds; the section's own fields and the rules the model alone needs
        are checked by the same code that checks a preset (one error type, :class:`ConfigError`, exit 2)."""
        # frozen: normalise through object.__setattr__; tuples keep the config hashable.
        object.__setattr__(self, "biases", tuple(BiasSpec.of(b) for b in self.biases))
        object.__setattr__(self, "experts", tuple(self.experts))
        self.check("")  # ModelSection's own checks, keys named as this view names them ("hidden must be ...")
        need = needer("")
        for name in ("in_dim", "out_dim"):
            need(int(getattr(self, name)) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        # the dataset's own columns come first
        need(0 <= int(self.struct_dim) < int(self.in_dim), "struct_dim",
             f"must be in [0, in_dim), got {self.struct_dim} (in_dim {self.in_dim})")
        need(self.task in TASKS, "task", f"must be one of {TASKS}, got {self.task!r}")
        need(self.eps > 0, "eps", f"must be > 0, got {self.eps}")
        need(self.readout_scale > 0 and math.isfinite(self.readout_scale), "readout_scale",
             f"must be a finite number > 0, got {self.readout_scale}")
        object.__setattr__(self, "encoder", resolve_encoder(self.encoder, self.task))
        # The architecture by name (auto resolved against the task), and the old key it stands for made explicit.
        object.__setattr__(self, "arch", resolve_arch(self, self.task))
        if self.arch == "gat":
            object.__setattr__(self, "ffn", False)
        powers = range(1, self.heads + 1) if self.head_powers is None else self.head_powers
        object.__setattr__(self, "head_powers", tuple(int(k) for k in powers))
        out_powers = [1] * int(self.output_heads) if self.output_powers is None else self.output_powers
        object.__setattr__(self, "output_powers", tuple(int(k) for k in out_powers))
        object.__setattr__(self, "image_size", tuple(int(s) for s in self.image_size))
        object.__setattr__(self, "edge_dims", tuple(int(d) for d in self.edge_dims))
        if any(b.type == "edge" for b in self.biases):  # run fields: the cache's coding of its edge attributes
            need(self.edge_encoding in ENCODINGS, "edge_encoding",
                 f"must be one of {ENCODINGS}, got {self.edge_encoding!r}")
            need(len(self.edge_dims) > 0 and min(self.edge_dims) >= 1, "edge_dims",
                 f"must be positive (the cache's edge section records them), got {list(self.edge_dims)}")
        # The encoder, readout and positional switches against the task are config_rules' (model=True) rules.
        check_model_rules(Config(model=self), self.task)
        if self.encoder == "patch" and (len(self.image_size) != 2 or self.patch_size < 1):  # run fields
            raise ConfigError(f"encoder 'patch' needs image_size (H, W) and patch_size >= 1, got "
                              f"{list(self.image_size)} and {self.patch_size}")

    @property
    def max_power(self) -> int:
        """Largest ``k`` any head reads (the attention output layer's too): the ``K`` a batch must at least carry."""
        top = max(head_powers(self))
        return max(top, *(self.output_powers or ())) if self.output == "attention" else top

    @property
    def needs(self) -> frozenset[str]:
        """Cache sections beyond the powers that batches must carry (``spd``, ``rrwp``, ``magnetic``, ``spectrum``,
        ``edge``): the learned biases' and the architecture's (gps: the edges)."""
        return frozenset(BiasSpec.of(b).needs for b in self.biases) | arch_needs(self, self.task)

    @property
    def plain_heads(self) -> tuple[int, ...]:
        """0-based heads without a structural mask (see :func:`plain_heads`)."""
        return plain_heads(self)


def head_powers(model: Any) -> tuple[int, ...]:
    """``k_h`` of every head: ``model.head_powers``, default ``1..heads`` (head h reads Â^h).

    ``model``: a :class:`ModelConfig` or the config's ``model`` section (same field names).
    """
    return tuple(int(k) for k in (_get(model, "head_powers") or range(1, int(_get(model, "heads")) + 1)))


def bias_needs(model: Any) -> frozenset[str]:
    """Cache sections beyond the powers that the learned biases of ``model`` read (``spd``, ``rrwp``, ...)."""
    return frozenset(bias_entry(_get(b, "type")).needs for b in _get(model, "biases"))


def plain_heads(model: Any) -> tuple[int, ...]:
    """0-based heads that attend over every pair of their domain: all under ``use_bias=False``, else ``k_h = 0``.

    ``model``: a :class:`ModelConfig` or the config's ``model`` section (same field names).
    """
    heads = int(_get(model, "heads"))
    if not _get(model, "use_bias"):
        return tuple(range(heads))
    return tuple(h for h, k in enumerate(head_powers(model)) if k == 0)




def sparse_refusal(model: Any) -> str | None:
    """Why this model cannot run on a sparse path (pairs, partitions, query batches); None if it can.

    Two things need every pair of the domain densely: ``outside_support='eps'``
    (``log(eps)`` at every pair outside the support) and a learned bias on a
    plain head (its value at every pair, which sparse batches do not carry).
    ``model``: a :class:`ModelConfig` or the config's ``model`` section.
    """
    if _get(model, "use_bias") and _get(model, "outside_support") == "eps":
        return ("model.outside_support=eps (the literal dense formula, log(eps) at every pair outside the "
                "support) needs the whole domain as one dense grid; use model.outside_support=hard or a dense path")
    plain = {h + 1 for h in plain_heads(model)}
    heads = int(_get(model, "heads"))
    for b in _get(model, "biases") or ():
        served = set(_get(b, "heads") or range(1, heads + 1))
        if served & plain:
            return (f"the learned {_get(b, 'type')} bias (model.biases) serves plain head(s) "
                    f"{sorted(served & plain)} (k_h = 0 or model.use_bias=false), which attend over every pair "
                    f"of the domain; sparse batches carry it only at the stored pairs: use a dense path, or give "
                    f"those heads a power (model.head_powers)")
    return None


def effective_powers(cfg: ModelConfig) -> list[int]:
    """Per head, the power ``k_h`` of the log-mask it adds; 0 where it adds none (``k_h = 0`` or
    ``use_bias: false``), so every report of a run (explain summaries, ``maps.h5``) says the same."""
    return [int(k) if cfg.use_bias else 0 for k in head_powers(cfg)]


def head_labels(cfg: ModelConfig) -> list[list[str]]:
    """Per layer, per head: the biases it adds, e.g. ``"Â^2 + SPD"`` or ``"none"`` (figures, tables)."""
    placed = [(bias_entry(b.type).label, *BiasSpec.of(b).placement(cfg.heads, cfg.layers)) for b in cfg.biases]
    powers = head_powers(cfg)
    out = []
    for layer in range(1, cfg.layers + 1):
        row = []
        for h in range(1, cfg.heads + 1):
            parts = [f"Â^{powers[h - 1]}"] if cfg.use_bias and powers[h - 1] > 0 else []
            parts += [label for label, heads, layers in placed if h in heads and layer in layers]
            row.append(" + ".join(parts) if parts else "none")
        out.append(row)
    return out


_get = read_field  # a config or batch field, from a mapping or an attribute holder

