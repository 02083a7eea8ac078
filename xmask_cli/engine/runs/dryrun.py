"""``xmask train --dry-run``: what a sweep would make, read and cost, found without writing anything.

:func:`dry_run` resolves the config's level and metric and runs the checks ``train`` runs before any work,
lists the run folders the sweep would make (and what it would do with each that exists), names the
structure cache file it needs (present, or to prepare), and estimates from the graphs and that file's plan
the stored pairs, the model's parameters and the memory of its largest training step
(:mod:`~xmask_cli.engine.runs.estimate`). The dataset is read offline, staged in a temporary folder that is
removed afterwards: the runs folder, the cache folder and the data root are left as they were.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmask_cli.cache import StructureCache, cache_key, cache_path
from xmask_cli.config import Config
from xmask_cli.data.graphset import GraphSet
from xmask_cli.data.load import load_graphs, resolve_data_root
from xmask_cli.engine.batching.features import struct_info
from xmask_cli.engine.batching.node_memory import auto_mode, full_step_memory, step_shape
from xmask_cli.engine.runs.data import check_data
from xmask_cli.engine.runs.estimate import StepShape, cached_pair_counts, graph_batch_shape, hop_pair_counts, step_bytes
from xmask_cli.engine.runs.experiment import _model_config
from xmask_cli.engine.runs.plan import RunPlan, dataset_spec, existing_runs, planned_runs
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.engine.training.watch import check_loggers
from xmask_cli.model.attention.path import full_graph_attention
from xmask_cli.model.model_config import ModelConfig, head_powers, sparse_refusal
from xmask_cli.model.network import XMaskNet
from xmask_cli.prepare.edge_section import EdgeInputs, edge_inputs
from xmask_cli.prepare.graphs import structure_params
from xmask_cli.prepare.needs import edge_readers, model_needs, structure_needed

__all__ = ["CacheEntry", "DryRun", "Estimate", "PlannedRun", "dry_run"]

#: Optimizer state floats per parameter (Adam and AdamW: two moments).
_OPTIMIZER_FLOATS = 2


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep: its seed, outer fold (None without folds), folder and what ``train`` would do
    there (``new``, ``resume``, ``replace``, or ``refused``: it holds a run and neither flag is given)."""

    seed: int
    fold: int | None
    path: str
    action: str


@dataclass(frozen=True)
class CacheEntry:
    """The structure cache file the runs read: its path, whether it is there, and its sections."""

    path: str
    present: bool
    sections: tuple[str, ...]


@dataclass(frozen=True)
class Estimate:
    """What the runs cost (see :mod:`~xmask_cli.engine.runs.estimate`).

    Attributes:
        pairs: stored pairs of ``Â^1..Â^K`` (their union support) over all graphs; ``pairs_per_power`` each
            power's own; ``pairs_from``: ``cache`` (read back) or ``graphs`` (counted from them).
        parameters: the model's parameter count.
        model_state_bytes: weights and optimizer state (resident through training).
        step: the largest training step (:class:`~xmask_cli.engine.runs.estimate.StepShape`); None where the
            memory model does not cover the config (the dry run's notes say why).
        step_bytes: what that step adds (gradients and activations); ``peak_bytes``: the two together.
    """

    pairs: int
    pairs_per_power: tuple[int, ...]
    pairs_from: str
    parameters: int
    model_state_bytes: int
    step: StepShape | None
    step_bytes: int | None

    @property
    def peak_bytes(self) -> int | None:
        return None if self.step_bytes is None else self.model_state_bytes + self.step_bytes

    def to_json(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "pairs_per_power": list(self.pairs_per_power), "pairs_from": self.pairs_from,
                "parameters": self.parameters, "model_state_bytes": self.model_state_bytes,
                "largest_step": None if self.step is None else self.step.to_json(), "step_bytes": self.step_bytes,
                "peak_bytes": self.peak_bytes}


@dataclass(frozen=True)
class DryRun:
    """What ``xmask train --dry-run`` reports; ``to_json()`` is its ``--format json`` output."""

    dataset: str
    level: str
    metric: str
    name: str
    config: dict[str, Any]
    runs: tuple[PlannedRun, ...]
    cache: CacheEntry | None
    estimate: Estimate | None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": True, "dataset": self.dataset, "level": self.level, "metric": self.metric,
                "name": self.name, "config": self.config,
                "runs": [{"seed": r.seed, "fold": r.fold, "path": r.path, "action": r.action} for r in self.runs],
                "cache": None if self.cache is None else {"path": self.cache.path, "present": self.cache.present,
                                                          "sections": list(self.cache.sections)},
                "estimate": None if self.estimate is None else self.estimate.to_json(), "notes": list(self.notes)}


def _runs(root: Path, seeds: list[int], n_folds: int, resume: bool, overwrite: bool) -> tuple[PlannedRun, ...]:
    taken = {run.path for run in existing_runs(root, seeds, n_folds) if run.has_run_files()}
    held = "resume" if resume else "replace" if overwrite else "refused"
    return tuple(PlannedRun(seed, fold, str(run.path), held if run.path in taken else "new")
                 for seed, fold, run in planned_runs(root, seeds, n_folds))


def _sections(cfg: Config, level: str) -> tuple[str, ...]:
    """The sections the cache file holds for this run: the powers, and what the structure config enables."""
    struct = structure_needed(cfg, level)
    enabled = [s for s in ("spd", "spectrum", "magnetic", "rrwp", "edge") if getattr(struct, s).enabled]
    return ("powers", *enabled, *(["partition"] if struct.partition.parts > 0 else []))


def _model(cfg: Config, level: str, graphs: GraphSet, edges: EdgeInputs | None = None) -> ModelConfig:
    """The model config ``train`` builds for this data (its widths from the dataset, as the tasks read them)."""
    info = struct_info(graphs, cfg.model.node_struct, cfg.structure.rrwp.steps)
    struct_dim = 0 if info is None else int(info["dim"])
    in_dim = graphs.feature_info().dim + struct_dim
    ds = graphs.dataset
    classes = int(getattr(ds, "num_classes", 0) or 0) or int(ds[0].y.max()) + 1
    coding: dict[str, Any] = {} if edges is None else {"edge_encoding": edges.coding.encoding,
                                                       "edge_dims": edges.coding.dims}
    return _model_config(cfg, level, in_dim=in_dim, out_dim=classes, dataset=graphs.spec.name,
                         struct_dim=struct_dim, **coding)


def parameter_count(model_cfg: ModelConfig) -> int:
    """Parameters of the model ``model_cfg`` builds (made on the meta device: no memory spent)."""
    with torch.device("meta"):
        return sum(p.numel() for p in XMaskNet(model_cfg).parameters())


def _pair_counts(cache: CacheEntry, graphs: GraphSet, k: int, cfg: Config) -> tuple[np.ndarray, str]:
    if cache.present:
        with StructureCache(cache.path) as c:
            return cached_pair_counts(c, k), "cache"
    large = cfg.structure.large
    return hop_pair_counts(graphs.edge_index, graphs.num_nodes, k, large_min=large.min_nodes,
                           topk=large.topk), "graphs"


def _step_shape(cfg: Config, level: str, graphs: GraphSet, counts: np.ndarray, model_cfg: ModelConfig,
                device: str) -> StepShape | str:
    """The largest training step's shape, or why there is no estimate for this config."""
    m = cfg.model
    dropped = _dropped_width(cfg, level, model_cfg)
    if level == "graph":
        sizes = sorted((int(n) for n in graphs.num_nodes), reverse=True)[:cfg.train.batch_size]
        return graph_batch_shape(sizes, m.heads, m.graph_layout, dropped)
    n = int(graphs.num_nodes[0])
    union = int(counts[0, -1])
    path = full_graph_attention(cfg.node.attention, n, union, device, cfg.node.dense_max_nodes,
                                dense_only=sparse_refusal(m))
    mode = cfg.node.mode if cfg.node.mode != "auto" else _auto_mode(cfg, n, counts, model_cfg, path)
    if mode != "full" or model_cfg.experts:
        return f"no memory estimate for node.mode={mode}{' with experts' if model_cfg.experts else ''}"
    if path == "dense":
        return StepShape(1, n, n * n * m.heads, "dense", dropped)

    def pairs(k: int) -> int:  # a plain head (k = 0) attends every node
        return n * n if k == 0 else int(counts[0, k - 1])

    per_layer: list[int] = [pairs(k) for k in head_powers(model_cfg)]
    entries = m.layers * sum(per_layer)
    if model_cfg.output == "attention":
        out_powers: list[int] = list(model_cfg.output_powers or [1] * model_cfg.output_heads)
        entries += sum(pairs(k) for k in out_powers)
    return StepShape(1, n, entries, "sparse", dropped)


def _auto_mode(cfg: Config, n: int, counts: np.ndarray, model_cfg: ModelConfig, path: str) -> str:
    """What ``node.mode: auto`` trains with, decided as the node task decides it: the full-graph step's
    estimate (:func:`~xmask_cli.engine.batching.node_memory.full_step_memory`, features counted dense) against
    ``node.memory_gb`` (:func:`~xmask_cli.engine.batching.node_memory.auto_mode`)."""
    shape = step_shape(cfg.model, model_cfg.out_dim)
    last = counts.shape[1]
    per_power = {k: int(counts[0, min(k, last) - 1]) for k in {k for heads in shape.heads for k in heads} if k >= 1}
    memory = full_step_memory(n, int(counts[0, -1]), per_power, last, shape, model_cfg.in_dim, path)
    return auto_mode(memory, cfg.node.memory_gb, bool(model_needs(cfg)))


def _dropped_width(cfg: Config, level: str, model_cfg: ModelConfig) -> int:
    """The raw feature columns a dropout draws over (``input_dropout`` before a linear encoder; the first
    block's ``layer_dropout`` without an encoder); 0 for sparse node features, whose stored entries alone
    are dropped."""
    if level == "node" and cfg.node.sparse_features:
        return 0
    if model_cfg.encoder == "linear" and model_cfg.input_dropout > 0:
        return model_cfg.in_dim
    if model_cfg.encoder == "none" and model_cfg.layer_dropout > 0:
        return model_cfg.in_dim
    return 0


def dry_run(plan: RunPlan, *, cache_dir: Path, data_root: str | os.PathLike[str] | None = None,
            resume: bool = False, overwrite: bool = False, device: str = "cpu") -> DryRun:
    """What ``train_plan(plan, ...)`` would make, read and cost; nothing is written.

    Raises:
        the errors ``train`` raises before any work (a bad config, a dataset not found offline, a split
        that leaves a part empty).
    """
    cfg, level = plan.cfg, plan.level
    check_loggers(cfg.train.loggers)
    runs = _runs(plan.root, list(plan.seeds), cfg.data.folds, resume, overwrite)
    spec = plan.spec or dataset_spec(cfg)  # an edge file's run names data.dataset's entry here, as it always has
    base = DryRun(spec.name, level, plan.metric, plan.name, cfg.to_dict(), runs, None, None)
    if LEVELS[level].data != "graphs" or LEVELS[level].structure != "dataset":
        return _with(base, notes=(f"no cache or memory estimate for the {level} level (its structure is "
                                  "prepared per split)" if level in ("link", "edge") else
                                  f"no cache or memory estimate for the {level} level",))
    # PyG's processed/ files go to the staging folder, which lives until the plan is made: OGB's datasets
    # read their split files from it lazily (check_data asks for the split).
    with tempfile.TemporaryDirectory(prefix="xmask-dry-run-") as staging:
        graphs = load_graphs(spec, data_root=resolve_data_root(data_root, cfg.data.root), cache_dir=Path(staging),
                             offline=True)
        return _graph_plan(base, cfg, level, graphs, cache_dir, device)


def _graph_plan(base: DryRun, cfg: Config, level: str, graphs: GraphSet, cache_dir: Path, device: str) -> DryRun:
    """The cache and memory parts of a graph-level dry run, on the loaded ``graphs``."""
    check_data(cfg, level, graphs)
    struct = structure_needed(cfg, level)
    edges = edge_inputs(graphs, struct, **edge_readers(cfg))
    key = cache_key(graphs.fingerprint(), structure_params(struct, level, edges))
    path = cache_path(cache_dir, graphs.spec.key, key)
    cache = CacheEntry(str(path), path.is_file(), _sections(cfg, level))
    counts, source = _pair_counts(cache, graphs, struct.powers.k, cfg)
    model_cfg = _model(cfg, level, graphs, edges)
    params = parameter_count(model_cfg)
    found = _step_shape(cfg, level, graphs, counts, model_cfg, device)
    shape, notes = (None, (found,)) if isinstance(found, str) else (found, ())
    step = None if shape is None else step_bytes(shape, parameters=params, hidden=cfg.model.hidden,
                                                 layers=cfg.model.layers)
    estimate = Estimate(int(counts[:, -1].sum()), tuple(int(c) for c in counts.sum(0)), source, params,
                        4 * params * (1 + _OPTIMIZER_FLOATS), shape, step)
    return _with(base, cache=cache, estimate=estimate, notes=notes)


def _with(base: DryRun, **changes: Any) -> DryRun:
    return dataclasses.replace(base, **changes)
