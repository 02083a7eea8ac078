"""Presets: YAML with ``extends:``, dotted ``--set`` overrides, a typed schema.

A preset resolves to a frozen :class:`Config`; nothing here is global or
mutable. Unknown keys fail with the nearest valid key named, wrong types fail
with the key and the expected type.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from xmask_cli.errors import ConfigError, UsageError


# --------------------------------------------------------------------- schema
@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where its files are, which split."""

    dataset: str = "cora"
    root: str | None = None  # data root; --data-root and XMASK_DATA_ROOT take precedence
    split: str = "default"
    normalize_features: bool = False  # row-normalise node features (PyG NormalizeFeatures), as Planetoid recipes do


@dataclass(frozen=True)
class PowersConfig:
    """Normalized adjacency powers ``Â^1..Â^K`` (X-LogSMask)."""

    k: int = 4
    normalization: Literal["sym", "no-symnorm"] = "sym"
    eps: float = 1e-30  # used where the log mask is formed, not by prepare


@dataclass(frozen=True)
class SpdConfig:
    """Shortest-path distances up to ``max_distance`` hops."""

    enabled: bool = True
    max_distance: int = 8


@dataclass(frozen=True)
class SpectrumConfig:
    """Eigenpairs of the symmetric normalized Laplacian."""

    enabled: bool = True
    num_eigs: int = 16  # m: lowest non-zero eigenpairs kept (plus every zero pair) for graphs above full_max_nodes
    full_max_nodes: int = 64  # graphs this small keep every eigenpair


@dataclass(frozen=True)
class MagneticConfig:
    """Eigenpairs of the magnetic Laplacian (directed structure)."""

    enabled: bool = False
    q: float = 0.25
    num_eigs: int = 16


@dataclass(frozen=True)
class RrwpConfig:
    """Random-walk probabilities ``I, P, ..., P^steps`` with ``P = D^-1 A``."""

    enabled: bool = False
    steps: int = 16


@dataclass(frozen=True)
class PartitionConfig:
    """METIS partitions for node-level graphs (0: none)."""

    parts: int = 0
    seed: int = 0


@dataclass(frozen=True)
class LargeGraphConfig:
    """Rules for graphs with more than ``min_nodes`` nodes: nothing n x n dense."""

    min_nodes: int = 5000
    tau: float = 1e-6  # drop power entries below tau after every product
    topk: int = 128  # keep at most topk entries per row of every power (0: all)
    spd_radius: int = 2  # SPD only up to this many hops


@dataclass(frozen=True)
class StructureConfig:
    """What ``xmask prepare`` computes into the cache."""

    powers: PowersConfig = field(default_factory=PowersConfig)
    spd: SpdConfig = field(default_factory=SpdConfig)
    spectrum: SpectrumConfig = field(default_factory=SpectrumConfig)
    magnetic: MagneticConfig = field(default_factory=MagneticConfig)
    rrwp: RrwpConfig = field(default_factory=RrwpConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    large: LargeGraphConfig = field(default_factory=LargeGraphConfig)


@dataclass(frozen=True)
class TaskConfig:
    """Which prediction task to train (``level``) and what selects the best epoch (``metric``)."""

    level: Literal["auto", "graph", "node", "link", "edge", "image"] = "auto"  # auto: the dataset's default level
    metric: Literal["auto", "accuracy", "rocauc", "mrr", "mae", "rmse"] = "auto"  # auto: the level's default


@dataclass(frozen=True)
class BiasSection:
    """One learned structural bias (``model.biases`` is a list of these; the model's view: ``BiasSpec``)."""

    type: str = "spd"  # a name in xmask_cli.model.biases.BIASES: spd, rrwp, magnetic, eigen
    heads: list[int] | None = None  # 1-based heads it serves; null: all
    layers: list[int] | None = None  # 1-based layers it is in; null: all
    max_distance: int = 8  # spd: distances 1..max_distance get their own bucket
    width: int = 32  # rrwp / magnetic: hidden width


@dataclass(frozen=True)
class ModelSection:
    """Model hyper-parameters, with their one set of defaults.

    The model takes them as :class:`xmask_cli.model.model_config.ModelConfig`, this
    section plus what a run learns from its data (``in_dim``, ``out_dim``, the task).
    """

    hidden: int = 64
    heads: int = 4
    layers: int = 2
    ffn_mult: int = 2
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm: Literal["post", "pre"] = "post"
    mask_scale: Literal["paper", "none"] = "paper"
    outside_support: Literal["hard", "eps"] = "hard"  # pairs with Â^k_ij = 0: hard = -inf on every path; eps = log(eps), dense paths only
    head_powers: list[int] | None = None  # power of Â per head; null: 1..heads
    readout: Literal["sum", "mean", "max", "cls"] = "sum"  # cls: a class token (image level)
    # graph level, sum readout: "size" divides the pooled sum by the training graphs' mean node count
    # (the head's input stays O(1) on large graphs; without it training can collapse); "none": raw sum.
    readout_norm: Literal["size", "none"] = "size"
    use_bias: bool = True  # false: plain attention (the no-logmask ablation)
    encoder: Literal["auto", "linear", "atom", "patch"] = "auto"  # auto: atom for OGB molecules, patch for images, else linear
    positional: Literal["none", "learned"] = "none"  # image level: learned position embeddings (the ViT arm)
    input_dropout: float = 0.0  # dropout on raw input features (bag-of-words node features overfit without it)
    biases: list[BiasSection] = field(default_factory=list)  # learned biases added to X-LogSMask: [{type: spd}, ...]
    experts: list[Literal["local", "cluster", "global"]] = field(default_factory=list)  # M3Dphormer experts; []: one attention
    routing: Literal["bilevel", "flat", "none"] = "bilevel"  # how the experts are mixed per token
    expert_attention: Literal["dual", "sparse", "dense"] = "dual"  # experts: per-region dense/sparse by density


@dataclass(frozen=True)
class TrainSection:
    """Optimisation; the training loop takes it as :class:`xmask_cli.engine.loop.TrainConfig` (plus seed, device).

    Attributes:
        epochs: maximum number of epochs.
        lr: AdamW peak learning rate.
        weight_decay: AdamW decoupled weight decay.
        warmup_epochs: linear warm-up length; constant learning rate afterwards.
        clip_norm: max global gradient norm (``<= 0`` disables clipping).
        batch_size: graphs per batch (graph level), pairs per batch (link / edge),
            ignored by full-graph node training.
        patience: stop after this many epochs without a validation improvement.
        skip_nonfinite: skip a batch whose loss (or clipped gradient norm) is not
            finite instead of stopping the run with :class:`~xmask_cli.errors.DivergedError`.
        precision: ``fp32``; ``bf16`` / ``fp16`` run forwards under ``torch.autocast``
            (fp16 with a grad scaler); the log-mask and softmax stay float32
            (:mod:`xmask_cli.engine.precision`).
    """

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_epochs: int = 5
    clip_norm: float = 1.0
    batch_size: int = 32
    patience: int = 20
    loader_workers: int = 0  # graph level: DataLoader worker processes (each opens the HDF5 cache lazily)
    skip_nonfinite: bool = False  # skip batches with a non-finite loss or gradient instead of stopping (exit 7)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # autocast dtype of forwards; fp16 adds a grad scaler


@dataclass(frozen=True)
class NodeSection:
    """How node-level tasks batch the graph."""

    mode: Literal["auto", "full", "subgraph", "query", "partition"] = "auto"  # auto: full up to dense_max_nodes, query above
    attention: Literal["auto", "dense", "sparse"] = "auto"  # full graph: auto = dense on CUDA; on CPU sparse below 15% pair density
    subgraph_size: int = 0  # nodes per random subgraph (mode subgraph)
    subgraphs_per_epoch: int = 1
    dense_max_nodes: int = 5000  # auto: full-graph dense attention up to this many nodes, query batches above
    query_batch: int = 0  # query mode: training queries per step (0: all training nodes, one full-batch step)
    query_chunk_pairs: int = 524288  # query mode: pairs per attention chunk (bounds memory; numbers unchanged)


@dataclass(frozen=True)
class LinkSection:
    """Link prediction protocol (seeded edge split, fixed negatives)."""

    fractions: list[float] = field(default_factory=lambda: [0.85, 0.05, 0.10])
    num_neg_per_pos: int = 1  # fixed val/test negatives per positive
    protocol: Literal["shared", "per-positive"] = "shared"  # MRR: rank against all negatives of the part, or own ones


@dataclass(frozen=True)
class EdgeSection:
    """Edge regression from an edge-attribute file (``src,dst,target...``)."""

    file: str | None = None
    features: str | None = None  # optional node features (.npy or headerless .csv)
    fractions: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])


@dataclass(frozen=True)
class ImageSection:
    """Image level: patches of the image form one grid graph shared by every image."""

    patch: int = 2  # patch side in pixels; must divide the image height and width
    connectivity: Literal[4, 8] = 4  # grid neighbours: edge-sharing patches, or also diagonal ones
    augment: bool = False  # random crop (pad 1/8 of the side) and horizontal flip on training batches


@dataclass(frozen=True)
class RunSection:
    """Where runs are written: ``<root>/<name>/<seed>/``."""

    root: str = "runs"
    name: str | None = None  # null: <dataset>-<level>


@dataclass(frozen=True)
class Config:
    """A resolved preset."""

    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    structure: StructureConfig = field(default_factory=StructureConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
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


# ------------------------------------------------------------------- presets
def packaged_presets_dir() -> Path:
    """Folder of the presets shipped with xmask.

    A wheel carries the repo's ``presets/`` as ``xmask_cli/presets``; a source
    checkout (or an editable install) reads ``presets/`` beside the package.
    """
    installed = Path(str(resources.files("xmask_cli"))) / "presets"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "presets"


def preset_dirs() -> list[Path]:
    """Where preset names are looked up: ``XMASK_PRESETS`` (``:``-separated) first."""
    extra = [Path(p) for p in os.environ.get("XMASK_PRESETS", "").split(os.pathsep) if p]
    return [*extra, packaged_presets_dir()]


def list_presets() -> dict[str, Path]:
    """Preset name -> file, earlier directories shadowing later ones."""
    found: dict[str, Path] = {}
    for d in reversed(preset_dirs()):
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                found[p.stem] = p
    return dict(sorted(found.items()))


def find_preset(name_or_path: str, *, relative_to: Path | None = None) -> Path:
    """Resolve a preset name or a YAML path to a file."""
    candidates = []
    if relative_to is not None:
        candidates.append(relative_to / name_or_path)
        candidates.append(relative_to / f"{name_or_path}.yaml")
    candidates.append(Path(name_or_path))
    for c in candidates:
        if c.suffix in (".yaml", ".yml") and c.is_file():
            return c
    presets = list_presets()
    if name_or_path in presets:
        return presets[name_or_path]
    close = difflib.get_close_matches(name_or_path, list(presets), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UsageError(f"unknown preset '{name_or_path}': {hint}see `xmask presets ls` for the {len(presets)} available")


def read_yaml(path: Path) -> dict[str, Any]:
    """One preset file as a mapping (no inheritance applied)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of sections, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_preset_dict(name_or_path: str, *, _seen: tuple[str, ...] = (), _relative: Path | None = None) -> dict[str, Any]:
    """Raw merged mapping of a preset and everything it ``extends``."""
    path = find_preset(name_or_path, relative_to=_relative)
    key = str(path.resolve())
    if key in _seen:
        raise ConfigError(f"preset '{path.stem}' extends itself through {' -> '.join(Path(s).stem for s in _seen)}")
    data = read_yaml(path)
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = _merge(merged, load_preset_dict(str(parent), _seen=(*_seen, key), _relative=path.parent))
    return _merge(merged, data)


# ----------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=v"`` -> (``["a", "b"]``, typed ``v``), values parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"--set '{text}': expected KEY=VALUE, e.g. --set structure.powers.k=3")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip():
        raise ConfigError(f"--set '{text}': empty key")
    if any(not p.strip() for p in parts):  # model..heads, .heads, heads.: a typo, never a key
        raise ConfigError(f"--set '{text}': empty part in key '{key.strip()}'; keys are dotted names such as model.heads")
    parts = [p.strip() for p in parts]
    if parts[0] == "tune" and len(parts) > 2:  # tune's keys are dotted names: tune.model.hidden -> tune["model.hidden"]
        parts = ["tune", ".".join(parts[1:])]
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return ``data`` with every ``--set`` applied (schema checks come later)."""
    out = _merge({}, data)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = {}
                node[p] = nxt
            node = nxt
        node[parts[-1]] = value
    return out


# ---------------------------------------------------------------- validation
def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError:
                continue
        raise bad
    if origin is dict:  # free-form mappings (the tune section) are checked by their owner
        if value is None:  # `tune: null` clears an inherited mapping
            return {}
        if isinstance(value, dict):
            return dict(value)
        raise bad
    if origin is list:
        (inner,) = typing.get_args(tp)
        if dataclasses.is_dataclass(inner):
            if isinstance(value, dict):  # one mapping stands for a list of one
                value = [value]
            if not isinstance(value, list):
                raise bad
            return [build(inner, v, f"{key}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, (int, float, str)) and not isinstance(value, bool) and inner is not str:
            value = [value]
        if not isinstance(value, list):
            raise bad
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "1e-30" as a string
            try:
                out = float(value)
            except ValueError:
                raise bad from None
        else:
            raise bad
        if not math.isfinite(out):  # no setting means anything at inf or nan (train.lr=inf trains to NaN)
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    raise bad


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Instantiate dataclass ``cls`` from ``data``, checking keys and types."""
    where = prefix or "config"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f"did you mean '{prefix + '.' if prefix else ''}{close[0]}'?" if close else f"valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown key '{full}': {hint}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = build(tp, value, full)
        else:
            kwargs[key] = _coerce(value, tp, full)
    obj = cls(**kwargs)
    _check_ranges(obj, prefix)
    return obj


def _check_ranges(obj: Any, prefix: str) -> None:
    """Domain checks a type cannot express."""
    def need(cond: bool, key: str, what: str) -> None:
        if not cond:
            raise ConfigError(f"{prefix}.{key}: {what}")

    if isinstance(obj, PowersConfig):
        need(1 <= obj.k <= 16, "k", "must lie in [1, 16]")
        need(0 < obj.eps < 1, "eps", "must lie in (0, 1)")
    elif isinstance(obj, SpdConfig):
        need(1 <= obj.max_distance <= 254, "max_distance", "must lie in [1, 254]")
    elif isinstance(obj, (SpectrumConfig, MagneticConfig)):
        need(obj.num_eigs >= 1, "num_eigs", "must be >= 1")
    elif isinstance(obj, RrwpConfig):
        need(1 <= obj.steps <= 64, "steps", "must lie in [1, 64]")
    elif isinstance(obj, PartitionConfig):
        need(obj.parts >= 0, "parts", "must be >= 0")
    elif isinstance(obj, ModelSection):
        for key in ("hidden", "heads", "layers", "ffn_mult"):
            need(getattr(obj, key) >= 1, key, "must be >= 1")
        need(obj.hidden % obj.heads == 0, "hidden", f"must be a multiple of model.heads ({obj.heads})")
        need(0 <= obj.dropout < 1 and 0 <= obj.attn_dropout < 1 and 0 <= obj.input_dropout < 1, "dropout",
             "dropouts must lie in [0, 1)")
        if obj.head_powers is not None:
            need(len(obj.head_powers) == obj.heads, "head_powers", f"needs one power per head ({obj.heads})")
            need(min(obj.head_powers) >= 0 and max(obj.head_powers) >= 1, "head_powers",
                 "powers must be >= 0 (0: no log mask on that head), at least one >= 1")
        for i, b in enumerate(obj.biases):
            for name, top in (("heads", obj.heads), ("layers", obj.layers)):
                idx = getattr(b, name)
                if idx is not None:
                    need(len(idx) > 0 and min(idx) >= 1 and max(idx) <= top and len(set(idx)) == len(idx),
                         f"biases[{i}].{name}", f"must be distinct 1-based indices up to model.{name} ({top})")
        need(len(set(obj.experts)) == len(obj.experts), "experts", "names an expert twice")
        need(not (obj.experts and obj.biases), "experts", "experts take the X-LogSMask term only; drop model.biases")
    elif isinstance(obj, BiasSection):
        from xmask_cli.model.biases import BIASES  # the bias registry names the valid types

        need(obj.type in BIASES, "type", f"expected one of {', '.join(repr(k) for k in BIASES)}, got {obj.type!r} (str)")
        need(obj.max_distance >= 1, "max_distance", "must be >= 1")
        need(obj.width >= 1, "width", "must be >= 1")
    elif isinstance(obj, TrainSection):
        need(obj.epochs >= 1, "epochs", "must be >= 1")
        need(obj.lr >= 0, "lr", "must be >= 0")
        need(obj.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(obj.warmup_epochs >= 0, "warmup_epochs", "must be >= 0")
        need(obj.batch_size >= 1, "batch_size", "must be >= 1")
        need(obj.patience >= 1, "patience", "must be >= 1")
        need(obj.loader_workers >= 0, "loader_workers", "must be >= 0")
    elif isinstance(obj, NodeSection):
        need(obj.subgraph_size >= 0, "subgraph_size", "must be >= 0")
        need(obj.subgraphs_per_epoch >= 1, "subgraphs_per_epoch", "must be >= 1")
        need(obj.query_batch >= 0, "query_batch", "must be >= 0 (0: all training nodes per step)")
        need(obj.query_chunk_pairs >= 1, "query_chunk_pairs", "must be >= 1")
    elif isinstance(obj, (LinkSection, EdgeSection)):
        need(len(obj.fractions) == 3 and abs(sum(obj.fractions) - 1) < 1e-6 and min(obj.fractions) >= 0,
             "fractions", "must be three non-negative fractions summing to 1")
        if isinstance(obj, LinkSection):
            need(obj.num_neg_per_pos >= 1, "num_neg_per_pos", "must be >= 1")
    elif isinstance(obj, RunSection) and obj.name is not None:
        # One path segment: a name never reaches outside the runs dir.
        need(obj.name not in ("", ".", "..") and "/" not in obj.name and "\\" not in obj.name
             and "\0" not in obj.name, "name",
             f"'{obj.name}' is not a run name: one folder name, no '/', '..' or absolute path (use --runs-dir for the location)")
    elif isinstance(obj, ImageSection):
        need(obj.patch >= 1, "patch", "must be >= 1")
    elif isinstance(obj, Config) and obj.tune:
        from xmask_cli.tune.space import check_space

        check_space(obj)
    elif isinstance(obj, LargeGraphConfig):
        need(obj.tau >= 0, "tau", "must be >= 0")
        need(obj.topk >= 0, "topk", "must be >= 0")
        need(obj.spd_radius >= 1, "spd_radius", "must be >= 1")


def resolve(preset: str | None = None, overrides: list[str] | None = None, base: dict[str, Any] | None = None) -> Config:
    """Preset name/path (or none: the schema defaults) + ``--set`` overrides -> :class:`Config`."""
    data = load_preset_dict(preset) if preset else dict(base or {})
    data = apply_overrides(data, overrides or [])
    return build(Config, data)


def to_json(cfg: Config) -> str:
    """Canonical JSON of a config (sorted keys), for hashing and saving."""
    return json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
