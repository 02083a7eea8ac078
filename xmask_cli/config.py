"""The config schema: one frozen dataclass tree with every key and its default.

A preset resolves to a frozen :class:`Config`; nothing here is global or
mutable. Each section checks its own fields (:meth:`~xmask_cli.config_section.Section.check`: bounds, choices and the rules between
its own keys), raising :class:`~xmask_cli.errors.ConfigError` (exit 2). Rules between sections live in
:mod:`xmask_cli.config_rules`; reading presets (YAML with ``extends:``), dotted ``--set`` overrides and type
coercion in :mod:`xmask_cli.config_resolve` (``from xmask_cli.config_resolve import resolve``), which
imports this schema; nothing here imports either back.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from xmask_cli.config_section import Need, Section, machine_memory_bytes
from xmask_cli.config_structure import (  # noqa: F401  (re-exported: the schema's structure section)
    EdgeAttrSection,
    LargeGraphSection,
    MagneticSection,
    PartitionSection,
    PowersSection,
    RrwpSection,
    SpdSection,
    SpectrumSection,
    StructureSection,
)

#: Most outer folds ``data.folds`` may ask for (each is a run per seed): the bound known before any data loads.
MAX_FOLDS = 10_000
#: Widest ``model.hidden`` (and bias ``width``): a 65536-wide block holds 2^32 weights per matrix (16 GiB).
MAX_WIDTH = 65_536
#: Most attention heads (``model.heads``, ``model.output_heads``), layers and feed-forward multiplier.
MAX_HEADS = 1024
MAX_LAYERS = 1024
MAX_FFN_MULT = 64
#: ``model.biases[].type``: each learned bias type and the ``structure`` section it reads from the cache; the
#: bias registry (``xmask_cli.model.biases.BIASES``) holds one entry per name, with the same ``needs``.
BIAS_NEEDS: dict[str, str] = {"spd": "spd", "rrwp": "rrwp", "magnetic": "magnetic", "eigen": "spectrum",
                               "edge": "edge"}

# --------------------------------------------------------------------- schema
@dataclass(frozen=True)
class DataSection(Section):
    """Which dataset, where its files are, which split."""

    dataset: str = "cora"
    root: str | None = None  # data root; --data-root and XMASK_DATA_ROOT take precedence
    split: str = "default"
    normalize_features: bool = False  # row-normalise node features (PyG NormalizeFeatures), as Planetoid recipes do
    # graph level: K > 0 runs Errica et al.'s protocol instead of the dataset's split: stratified K outer folds
    # fixed by the seed, a stratified 10 % holdout of each outer training part for selection (engine/scoring/folds.py)
    folds: int = 0
    fold: int = 0  # the outer fold one run trains (train --folds sets it per run; 0..folds-1)

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(self.folds == 0 or self.folds >= 2, "folds", "must be 0 (the dataset's split) or >= 2 outer folds")
        # Each fold is a run folder per seed; the dataset's own bound (its smallest class) is checked once loaded.
        need(self.folds <= MAX_FOLDS, "folds", f"must be at most {MAX_FOLDS} (each outer fold needs a graph of "
             f"every class; the dataset's smallest class is checked when it loads)")
        need(0 <= self.fold < max(self.folds, 1), "fold",
             f"must lie in 0..{max(self.folds, 1) - 1} ({at('folds')} - 1)")


@dataclass(frozen=True)
class PrepareSection(Section):
    """What ``xmask prepare`` computes, and in how much memory.

    Attributes:
        compute: ``read``: only what the preset's model reads (``K`` = the largest power a head reads; SPD,
            spectra, walks, magnetic eigenpairs and partitions only where a bias, an expert or the node mode
            reads them); ``all``: every enabled ``structure`` section at ``structure.powers.k``.
        memory_gb: working-set budget of a large graph's row blocks (their products and stored pairs); the
            per-node arrays of the whole graph (adjacency, row sums, components) come on top.
    """

    compute: Literal["read", "all"] = "read"
    memory_gb: float = 2.0

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(0 < self.memory_gb <= 4096, "memory_gb", "must lie in (0, 4096] (GB; tiny values give 256-row blocks)")


@dataclass(frozen=True)
class TaskSection(Section):
    """Which prediction task to train (``level``) and what selects the best epoch (``metric``)."""

    level: Literal["auto", "graph", "node", "link", "edge", "image"] = "auto"  # auto: the dataset's default level
    metric: Literal["auto", "accuracy", "rocauc", "mrr", "mae", "rmse"] = "auto"  # auto: the level's default


@dataclass(frozen=True)
class BiasSection(Section):
    """One learned structural bias (``model.biases`` is a list of these; the model's view: ``BiasSpec``)."""

    AT_LEAST = {"max_distance": 1, "width": 1}
    AT_MOST = {"max_distance": (254, "the cache's SPD holds distances up to 254"), "width": MAX_WIDTH}

    type: str = "spd"  # a name in BIAS_NEEDS (the registry xmask_cli.model.biases.BIASES): spd, rrwp, magnetic, eigen, edge
    heads: list[int] | None = None  # 1-based heads it serves; null: all
    layers: list[int] | None = None  # 1-based layers it is in; null: all
    max_distance: int = 8  # spd: distances 1..max_distance get their own bucket
    width: int = 32  # rrwp / magnetic: hidden width

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        shown = repr(self.type) if len(repr(self.type)) <= 200 else repr(self.type)[:200] + "..."
        need(self.type in BIAS_NEEDS, "type", f"expected one of {', '.join(map(repr, BIAS_NEEDS))}, got {shown} (str)")


@dataclass(frozen=True)
class ModelSection(Section):
    """Model hyper-parameters, with their one set of defaults.

    The model takes them as :class:`xmask_cli.model.model_config.ModelConfig`, this
    section plus what a run learns from its data (``in_dim``, ``out_dim``, the task).
    """

    AT_LEAST = {"hidden": 1, "heads": 1, "layers": 1, "ffn_mult": 1}
    AT_MOST = {"hidden": MAX_WIDTH, "heads": MAX_HEADS, "layers": MAX_LAYERS, "ffn_mult": MAX_FFN_MULT,
               "output_heads": MAX_HEADS}

    # the architecture (config_arch.py): transformer, gat, experts, vit, gps; auto: picked from the other keys
    arch: Literal["auto", "transformer", "gat", "experts", "vit", "gps"] = "auto"
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    ffn_mult: int = 2
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm: Literal["post", "pre", "none"] = "post"  # LayerNorm placement in each block; none: no LayerNorm
    residual: bool = True  # residual connections around each block's attention and feed-forward layer
    ffn: bool = True  # the old spelling of model.arch=gat (false: attention-only layers); mapped with a note
    activation: Literal["none", "elu", "relu", "gelu"] = "none"  # applied to every block's output (GAT: elu)
    layer_dropout: float = 0.0  # dropout on the input of every attention layer (blocks and an attention output)
    # how a block's heads become its output: project = concatenated, then the output projection (a transformer);
    # concat = concatenated only (GAT's hidden layers)
    combine: Literal["project", "concat"] = "project"
    mask_scale: Literal["paper", "none"] = "paper"
    outside_support: Literal["hard", "eps"] = "hard"  # pairs with Â^k_ij = 0: hard = -inf on every path; eps = log(eps), dense paths only
    head_powers: list[int] | None = None  # power of Â per head; null: 1..heads
    readout: Literal["sum", "mean", "max", "cls"] = "sum"  # cls: a class token (image level)
    # graph level, sum readout: "size" divides the pooled sum by the training graphs' mean node count
    # (the head's input stays O(1) on large graphs; without it training can collapse); "none": raw sum.
    readout_norm: Literal["size", "none"] = "size"
    use_bias: bool = True  # false: plain attention (the no-logmask ablation)
    # auto: atom for OGB molecules, patch for images, else linear; none (node level): the first block's attention
    # reads the raw features (its q, k, v map them to hidden, as GAT's first layer), no separate encoder
    encoder: Literal["auto", "linear", "atom", "patch", "none"] = "auto"
    positional: Literal["none", "learned"] = "none"  # image level: learned position embeddings (the ViT arm)
    input_dropout: float = 0.0  # dropout on raw input features (bag-of-words node features overfit without it)
    # structural input channels appended to the node features (graph and node level; engine/batching/features.py):
    # degree = one-hot degree capped at MAX_DEGREE; rwse = diag(P^1..P^S) from the cached RRWP (structure.rrwp).
    node_struct: Literal["none", "degree", "rwse", "degree+rwse"] = "none"
    biases: list[BiasSection] = field(default_factory=list)  # learned biases added to X-LogSMask: [{type: spd}, ...]
    experts: list[Literal["local", "cluster", "global"]] = field(default_factory=list)  # M3Dphormer experts; []: one attention
    routing: Literal["bilevel", "flat", "none"] = "bilevel"  # how the experts are mixed per token
    expert_attention: Literal["dual", "sparse", "dense"] = "dual"  # experts: per-region dense/sparse by density
    # graph level: "packed" runs token-wise layers on real nodes only and attention per group of similar-sized
    # graphs (same numbers as "padded", faster); "padded": every layer over the batch padded to its largest graph
    graph_layout: Literal["packed", "padded"] = "packed"
    # node level: "mlp" = a per-node MLP after the last block; "attention" = a last X-LogSMask attention layer
    # whose output_heads each emit the outputs (out_dim per head), averaged over heads, as GAT's last layer
    output: Literal["mlp", "attention"] = "mlp"
    output_heads: int = 1  # output=attention: its heads
    output_powers: list[int] | None = None  # output=attention: power of Â per output head; null: Â^1 for every head

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(self.hidden % self.heads == 0, "hidden", f"must be a multiple of {at('heads')} ({self.heads})")
        memory, weights = machine_memory_bytes(), self.training_bytes()
        need(memory is None or weights <= memory, "hidden", f"{self.hidden} with {at('layers')}={self.layers} and "
             f"{at('ffn_mult')}={self.ffn_mult} needs about {weights / 2**30:.0f} GiB for its weights and "
             f"optimizer state alone, more than this machine's {(memory or 0) / 2**30:.0f} GiB: lower them")
        need(0 <= self.dropout < 1 and 0 <= self.attn_dropout < 1 and 0 <= self.input_dropout < 1, "dropout",
             "dropouts must lie in [0, 1)")
        need(0 <= self.layer_dropout < 1, "layer_dropout", "must lie in [0, 1)")
        need(self.output_heads >= 1, "output_heads", "must be >= 1")
        if self.head_powers is not None:
            need(len(self.head_powers) == self.heads, "head_powers",
                 f"must be {self.heads} powers (one power per head, {at('heads')})")
            need(min(self.head_powers) >= 0 and max(self.head_powers) >= 1, "head_powers",
                 "must be >= 0 (0: no log mask on that head), at least one >= 1")
        if self.output_powers is not None:  # their upper bound is config_rules.output_powers_within_head_powers
            need(len(self.output_powers) == self.output_heads and min(self.output_powers) >= 1, "output_powers",
                 f"must be {self.output_heads} powers >= 1 (one per output head, {at('output_heads')})")
        for i, b in enumerate(self.biases):
            for key, top in (("heads", self.heads), ("layers", self.layers)):
                idx = getattr(b, key)
                if idx is not None:
                    need(len(idx) > 0 and min(idx) >= 1 and max(idx) <= top and len(set(idx)) == len(idx),
                         f"biases[{i}].{key}", f"must be distinct 1-based indices up to {at(key)} ({top})")
        need(len(set(self.experts)) == len(self.experts), "experts", "must be distinct names (one is named twice)")
        need(not (self.experts and self.biases), "experts",
             f"experts take the X-LogSMask term only, not learned biases: drop {at('biases')}")

    def training_bytes(self) -> int:
        """A lower bound on what training this model holds: each block's q, k, v, output and feed-forward
        matrices (``(4 + 2 ffn_mult) hidden^2`` float32 weights), each with its gradient and Adam's two moments."""
        return 16 * self.layers * (4 + 2 * self.ffn_mult) * self.hidden ** 2


@dataclass(frozen=True)
class TrainSection(Section):
    """Optimisation; the training loop takes it as :class:`xmask_cli.engine.training.loop.TrainConfig` (plus seed, device).

    Attributes:
        epochs: maximum number of epochs.
        lr: peak learning rate.
        weight_decay: decoupled weight decay (``optimizer: adamw``) or L2 penalty (``adam``).
        optimizer: ``adamw`` or ``adam`` (Adam with L2, as the GCN / GAT recipes train).
        decay: the parameters ``weight_decay`` acts on: ``all``, ``first`` (the input encoder and the
            first block) or ``weights`` (none of the biases and LayerNorm parameters).
        warmup_epochs: linear warm-up length; constant learning rate afterwards.
        clip_norm: max global gradient norm (``<= 0`` disables clipping).
        batch_size: graphs per batch (graph level), pairs per batch (link / edge),
            ignored by full-graph node training.
        patience: stop after this many epochs without a validation improvement.
        skip_nonfinite: skip a batch whose loss (or clipped gradient norm) is not
            finite instead of stopping the run with :class:`~xmask_cli.errors.DivergedError`.
        precision: ``fp32``; ``bf16`` / ``fp16`` run forwards under ``torch.autocast``
            (fp16 with a grad scaler); the log-mask and softmax stay float32
            (:mod:`xmask_cli.engine.training.precision`).
    """

    AT_LEAST = {"epochs": 1, "lr": 0, "weight_decay": 0, "warmup_epochs": 0, "batch_size": 1, "patience": 1,
                "loader_workers": 0, "log_cache_mb": (0, "MB; 0 keeps no log-mask")}

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 1e-2
    # adamw: decoupled weight decay (AdamW); adam: Adam with an L2 penalty (weight_decay * w added to the gradient)
    optimizer: Literal["adamw", "adam"] = "adamw"
    # which parameters weight_decay acts on: all; first = the input encoder and the first block (PyG's GCN
    # example decays its first layer only); weights = every parameter but biases and LayerNorm parameters
    decay: Literal["all", "first", "weights"] = "all"
    warmup_epochs: int = 5
    clip_norm: float = 1.0
    batch_size: int = 32
    patience: int = 20
    loader_workers: int = 0  # graph level: DataLoader worker processes (each opens the HDF5 cache lazily)
    log_cache_mb: int = 512  # graph level, packed layout: MB of per-graph log-masks each stream keeps (0: none)
    skip_nonfinite: bool = False  # skip batches with a non-finite loss or gradient instead of stopping (exit 7)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # autocast dtype of forwards; fp16 adds a grad scaler
    # extra loggers beside metrics.jsonl and curves.png; tensorboard: event files in the run folder
    # (pip install "xmask-cli[tensorboard]")
    loggers: list[Literal["tensorboard"]] = field(default_factory=list)


@dataclass(frozen=True)
class NodeSection(Section):
    """How node-level tasks batch the graph."""

    AT_LEAST = {"subgraph_size": 0, "subgraphs_per_epoch": 1, "query_batch": (0, "0: all training nodes per step"),
                "query_chunk_pairs": 1}

    # auto: full-graph steps while one fits memory_gb (engine/batching/node_memory.py estimates it from the stored pairs
    # and the model), query batches beyond (partition batches with learned pair biases)
    mode: Literal["auto", "full", "subgraph", "query", "partition"] = "auto"
    attention: Literal["auto", "dense", "sparse"] = "auto"  # full graph: auto = dense on CUDA; on CPU sparse below 15% pair density
    subgraph_size: int = 0  # nodes per random subgraph (mode subgraph)
    subgraphs_per_epoch: int = 1
    dense_max_nodes: int = 5000  # full graph, attention auto: an N x N dense grid up to this many nodes, sparse above
    memory_gb: float = 4.0  # mode auto: GiB one full-graph training step may hold (estimated); batches beyond it
    query_batch: int = 0  # query mode: training queries per step (0: all training nodes, one full-batch step)
    query_chunk_pairs: int = 524288  # query mode: pairs per attention chunk (bounds memory; numbers unchanged)
    # full graph, sparse attention: hold features with under 5 % non-zero entries (bag-of-words) as a sparse
    # tensor: the encoder is a sparse product and input dropout draws on the stored entries only (the same
    # distribution as dense dropout, other draws)
    sparse_features: bool = False

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(0 < self.memory_gb <= 1 << 20, "memory_gb", "must lie in (0, 1048576] (GiB a full-graph step may hold)")


@dataclass(frozen=True)
class LinkSection(Section):
    """Link prediction protocol (seeded edge split, fixed negatives)."""

    AT_LEAST = {"num_neg_per_pos": 1}

    fractions: list[float] = field(default_factory=lambda: [0.85, 0.05, 0.10])
    num_neg_per_pos: int = 1  # fixed val/test negatives per positive
    protocol: Literal["shared", "per-positive"] = "shared"  # MRR: rank against all negatives of the part, or own ones

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(len(self.fractions) == 3 and abs(sum(self.fractions) - 1) < 1e-6 and min(self.fractions) >= 0,
             "fractions", "must be three non-negative fractions summing to 1")


@dataclass(frozen=True)
class EdgeSection(Section):
    """Edge regression from an edge-attribute file (``src,dst,target...``)."""

    file: str | None = None
    features: str | None = None  # optional node features (.npy or headerless .csv)
    fractions: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(len(self.fractions) == 3 and abs(sum(self.fractions) - 1) < 1e-6 and min(self.fractions) >= 0,
             "fractions", "must be three non-negative fractions summing to 1")


@dataclass(frozen=True)
class ImageSection(Section):
    """Image level: patches of the image form one grid graph shared by every image."""

    AT_LEAST = {"patch": 1}

    patch: int = 2  # patch side in pixels; must divide the image height and width
    connectivity: Literal[4, 8] = 4  # grid neighbours: edge-sharing patches, or also diagonal ones
    augment: bool = False  # random crop (pad 1/8 of the side) and horizontal flip on training batches


@dataclass(frozen=True)
class RunSection(Section):
    """Where runs are written: ``<root>/<name>/<seed>/``."""

    root: str = "runs"
    name: str | None = None  # null: <dataset>-<level>

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        if self.name is not None:  # one path segment: a name never reaches outside the runs dir
            need(self.name not in ("", ".", "..") and "/" not in self.name and "\\" not in self.name
                 and "\0" not in self.name, "name", f"'{self.name}' is not a run name: one folder name, no '/', "
                 f"'..' or absolute path (use --runs-dir for the location)")


@dataclass(frozen=True)
class Config:
    """A resolved preset."""

    description: str = ""
    data: DataSection = field(default_factory=DataSection)
    structure: StructureSection = field(default_factory=StructureSection)
    prepare: PrepareSection = field(default_factory=PrepareSection)
    task: TaskSection = field(default_factory=TaskSection)
    model: ModelSection = field(default_factory=ModelSection)
    train: TrainSection = field(default_factory=TrainSection)
    node: NodeSection = field(default_factory=NodeSection)
    link: LinkSection = field(default_factory=LinkSection)
    edge: EdgeSection = field(default_factory=EdgeSection)
    image: ImageSection = field(default_factory=ImageSection)
    run: RunSection = field(default_factory=RunSection)
    # `xmask tune`'s search space: dotted key -> {int|float: [low, high], log, step} or {choice: [...]};
    # checked by xmask_cli.tune.space (every preset, not only when tuning).
    tune: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def section_fields(section: Any) -> dict[str, Any]:
    """A section's fields by name, values as they are (``asdict`` would turn nested sections into dicts).

    What the model's and the loop's views (``ModelConfig``, ``TrainConfig``) are built from.
    """
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}


def to_json(cfg: Config) -> str:
    """Canonical JSON of a config (sorted keys), for hashing and saving."""
    return json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
