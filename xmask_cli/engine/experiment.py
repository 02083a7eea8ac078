"""From a resolved :class:`~xmask_cli.config.Config` to trained and evaluated runs.

This is what ``xmask train`` and ``xmask eval`` call: it resolves the task
level and metric, loads the dataset, makes sure the structure cache exists
(preparing it when it does not, and saying so), builds the level's
:class:`~xmask_cli.engine.loop.Task` (through the level registry,
:data:`~xmask_cli.engine.tasks.LEVELS`) and model, and trains per seed
(:func:`~xmask_cli.engine.loop.train_task`).

Example::

    cfg = resolve("graph-level", ["train.epochs=50"])
    result = train_seeds(cfg, seeds=[0, 1, 2], device="cpu", cache_dir=Path("cache"))
    print(result.aggregate["test"].mean, result.aggregate["test"].std)
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from xmask_cli.config import Config
from xmask_cli.config_rules import check_rules
from xmask_cli.data.edgefile import load_edge_file
from xmask_cli.data.folder import is_folder_ref, source_folder
from xmask_cli.data.images import image_info, load_images
from xmask_cli.data.load import load_graphs, resolve_data_root
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine import distributed, loop, splits
from xmask_cli.engine.features import struct_info
from xmask_cli.engine.folds import HOLDOUT, check_fold_count, outer_folds, write_fold_files
from xmask_cli.engine.loop import PARTS, seed_everything
from xmask_cli.engine.runs import RunDir, aggregate, input_stall, write_json
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.engine.tasks.edge import edge_regression_split
from xmask_cli.engine.tasks.graph import graph_labels
from xmask_cli.engine.train_config import TrainConfig
from xmask_cli.engine.watch import check_loggers
from xmask_cli.errors import ConfigError, UsageError
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.model.attention_path import PathRefused
from xmask_cli.model.biases import bias_entry
from xmask_cli.model.model_config import ModelConfig, sparse_refusal
from xmask_cli.prepare import check_patch, prepare_dataset, prepare_graphs
from xmask_cli.prepare.needs import structure_needed
from xmask_cli.results import FoldsSummary, RunSummary, SweepResult, stats_of

__all__ = ["parse_seeds", "resolve_device", "resolve_level", "resolve_metric", "Experiment",
           "train_seeds", "DEFAULT_METRICS"]

#: Metric a level selects on when neither the preset nor the dataset says (from the level registry).
DEFAULT_METRICS = {name: level.default_metric for name, level in LEVELS.items()}
#: Largest seed (numpy's global generator takes 32 bits) and most seeds in one sweep.
MAX_SEED = 2**32 - 1
MAX_SEEDS = 10000
#: Dataset name used for runs and caches of an edge-attribute file.
EDGE_FILE_DATASET = "edges"


def parse_seeds(text: str | int | None) -> list[int]:
    """``"3"`` -> [3]; ``"0-4"`` -> [0..4]; ``"0,2,7"`` -> [0, 2, 7]; ranges and lists mix (``"0-2,9"``).

    Raises:
        UsageError: anything else, negative seeds or seeds >= 2^32, more than
            :data:`MAX_SEEDS` seeds, or repeats.
    """
    if text is None:
        return [0]
    if isinstance(text, int):
        text = str(text)
    seeds: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UsageError(f"--seeds '{text}': expected N, A-B or a comma list such as 0-4 or 0,2,7")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise UsageError(f"--seeds '{text}': range {a}-{b} is empty")
        if b > MAX_SEED:  # numpy's global seed takes 32 bits
            raise UsageError(f"--seeds '{text}': seeds must lie in 0..{MAX_SEED} (2^32 - 1), got {b}")
        if len(seeds) + (b - a + 1) > MAX_SEEDS:
            raise UsageError(f"--seeds '{text}': more than {MAX_SEEDS} seeds in one sweep")
        seeds.extend(range(a, b + 1))
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds '{text}': a seed appears twice")
    return seeds


def resolve_device(name: str = "auto") -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda[:i]`` is checked to exist.

    Raises:
        UsageError: an unknown device or a CUDA device that is not there.
    """
    name = (name or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if not m:
        raise UsageError(f"--device '{name}': expected auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
    index = int(m.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return name


def _spec(cfg: Config) -> Any:
    return get_dataset(cfg.data.dataset)


def resolve_level(cfg: Config) -> str:
    """The task level: ``task.level``, or the dataset's default (``edge`` when ``edge.file`` is set).

    Raises:
        UsageError: the dataset has no task of that level.
    """
    level = cfg.task.level
    if level == "edge" or (level == "auto" and cfg.edge.file):
        if not cfg.edge.file:
            raise UsageError("task level edge needs an edge-attribute file: --set edge.file=PATH.csv "
                             "(columns src,dst,target...)")
        return "edge"
    spec = _spec(cfg)
    if level == "auto":
        return spec.level
    if level not in spec.levels:
        raise UsageError(f"dataset {spec.name} has no {level}-level task; it supports: {', '.join(spec.levels)}")
    return level


def resolve_metric(cfg: Config, level: str) -> str:
    """``task.metric``, or the dataset's metric for its main level, or the level's default."""
    metric, task_level = cfg.task.metric, LEVELS[level]
    if metric == "auto":
        metric = _spec(cfg).metric if task_level.metric_from_dataset else task_level.default_metric
    if metric not in task_level.metrics:
        raise UsageError(f"metric {metric} does not apply to {level}-level tasks; use one of "
                         f"{', '.join(task_level.metrics)}")
    return metric


def _check_structure(cfg: Config) -> None:
    for b in cfg.model.biases:
        section = bias_entry(b.type).needs
        if not getattr(cfg.structure, section).enabled:
            raise ConfigError(f"model.biases uses {b.type}, which reads structure.{section}: "
                              f"set structure.{section}.enabled=true")


def check_config(cfg: Config) -> tuple[str, str]:
    """The checks a config passes before any file is touched; returns ``(level, metric)``.

    The rules between sections a run needs (:func:`~xmask_cli.config_rules.check_rules` with the level),
    then what the bias registry and the dataset's spec know.

    Raises:
        UsageError: no such level for the dataset, a metric that does not apply, structure the model
            reads but the cache would not hold.
    """
    level = resolve_level(cfg)
    metric = resolve_metric(cfg, level)
    check_rules(cfg, level)
    _check_structure(cfg)
    _check_folds(cfg)
    return level, metric


def _check_folds(cfg: Config) -> None:
    if not cfg.data.folds:
        return
    spec = _spec(cfg)
    if spec.split == "scaffold":
        raise ConfigError(f"{spec.name} has an official split (OGB scaffold) that results are reported on: "
                          f"drop --folds (data.folds={cfg.data.folds})")


def _check_data(cfg: Config, level: str, graphs: Any) -> None:
    """The checks that need the loaded dataset, run before its structure is prepared or a run folder made.

    Raises:
        ConfigError: ``data.folds`` more than the graphs, or than the smallest class holds.
        UsageError: the dataset's split leaves train, val or test empty (a one- or two-node graph), or a
            link split has fewer non-edges than its negatives need.
    """
    if cfg.data.folds and level == "graph":
        check_fold_count(graph_labels(graphs), cfg.data.folds)
    else:
        _check_split(cfg, level, graphs)


def _check_split(cfg: Config, level: str, graphs: Any) -> None:
    """Each part of the split the tasks will draw holds an item (sizes do not depend on the seed)."""
    spec, source = graphs.spec, graphs.spec.ref
    if level == "node":
        split = splits.node_split(spec.split, graphs.dataset[0], seed=0, dataset=graphs.dataset)
        splits.check_parts(split.sizes(), split=split.name, items="nodes", source=source)
    elif level == "graph":
        split = splits.graph_split(spec.split, graphs.dataset, seed=0)
        splits.check_parts(split.sizes(), split=split.name, items="graphs", source=source)
    elif level == "link":
        data = graphs.dataset[0]
        n = int(data.num_nodes)
        pairs = len(splits.edge_pair_keys(data.edge_index.numpy(), n))
        fractions = tuple(cfg.link.fractions)
        sizes = splits.random_split_sizes(pairs, fractions)
        splits.check_parts(sizes, split=splits.split_name("edge-", fractions), items="edges", source=source)
        need, free = (sizes[1] + sizes[2]) * cfg.link.num_neg_per_pos, n * (n - 1) // 2 - pairs
        if need > free:
            raise UsageError(f"{source}: link.num_neg_per_pos={cfg.link.num_neg_per_pos} needs {need} negative "
                             f"pairs for its {sizes[1] + sizes[2]} val and test edges, but the graph has only "
                             f"{free} non-edges; lower link.num_neg_per_pos")


def _check_splittable(path: str, rows: int, fractions: list[float]) -> None:
    """Every part with a positive fraction gets a row, before any structure is computed."""
    sizes = edge_regression_split(rows, 0, fractions).sizes()
    empty = [part for part, size, f in zip(PARTS, sizes, fractions) if size == 0 and (f > 0 or part == "train")]
    if empty:
        raise UsageError(f"{path}: {rows} row(s) are too few for the edge.fractions {list(fractions)} split "
                         f"(no {', '.join(empty)} rows); add rows or change edge.fractions")


def _train_config(cfg: Config, seed: int, device: str) -> TrainConfig:
    return TrainConfig.from_section(cfg.train, seed=seed, device=device)


def _model_config(cfg: Config, level: str, in_dim: int, out_dim: int, dataset: str, readout_scale: float = 1.0,
                  **image: Any) -> Any:
    encoder = cfg.model.encoder
    if level == "image":  # image_size and patch_size come with `image`
        encoder = "patch"
    elif encoder == "auto":
        encoder = "atom" if dataset.lower().startswith("ogbg-mol") else "linear"
    return ModelConfig.from_section(cfg.model, in_dim=in_dim, out_dim=out_dim, task=level, encoder=encoder,
                                    eps=cfg.structure.powers.eps, rrwp_dim=cfg.structure.rrwp.steps + 1,
                                    readout_scale=readout_scale, **image)


@dataclass
class Experiment:
    """Everything seeds share: the config, level, metric, loaded data and structure cache.

    Build with :meth:`load`; then :meth:`task` and :meth:`model_config` per seed.
    """

    cfg: Config
    level: str
    metric: str
    dataset: str
    graphs: Any = None
    cache_path: Path | None = None
    edge_data: Any = None
    cache_dir: Path = Path("cache")
    log: Callable[[str], None] = lambda m: None

    @classmethod
    def load(
        cls,
        cfg: Config,
        *,
        cache_dir: Path,
        data_root: str | os.PathLike | None = None,
        offline: bool | None = None,
        workers: int = 1,
        log: Callable[[str], None] = lambda m: None,
    ) -> Experiment:
        """Resolve level and metric, load the data and make sure the structure cache exists."""
        level, metric = check_config(cfg)
        if not Path(cache_dir).is_dir():
            ensure_writable_dir(cache_dir)
        # No write check of an existing cache dir: a complete cache on a read-only mount serves training;
        # writers check their own folder.
        task_level = LEVELS[level]
        if task_level.data == "edge-file":
            data = load_edge_file(cfg.edge.file, cfg.edge.features)
            for note in data.notes:
                log(note)
            _check_splittable(cfg.edge.file, data.edge_index.shape[1], cfg.edge.fractions)
            return cls(cfg, level, metric, EDGE_FILE_DATASET, edge_data=data, cache_dir=cache_dir, log=log)
        spec = _spec(cfg)
        if task_level.data == "images":
            # A patch that does not divide the image fails before any data is read or downloaded.
            check_patch(spec.key, image_info(spec).shape[1:], cfg.image.patch)
            images = load_images(spec, data_root=resolve_data_root(data_root, cfg.data.root), offline=offline)
            summary = prepare_dataset(cfg, data_root=data_root, cache_dir=cache_dir, offline=offline, log=log)
            if not summary.cached:
                log(f"structure cache was missing: prepared {summary.path} in {summary.seconds:.1f}s")
            return cls(cfg, level, metric, spec.name, graphs=images, cache_path=Path(summary.path),
                       cache_dir=cache_dir, log=log)
        graphs = load_graphs(spec, data_root=resolve_data_root(data_root, cfg.data.root), cache_dir=cache_dir,
                             offline=offline)
        for note in graphs.notes:
            log(note)
        if cfg.data.normalize_features:
            from torch_geometric.transforms import NormalizeFeatures

            # Applied on access: every reader of dataset[i].x (all task levels) sees rows summing to 1.
            graphs.dataset.transform = NormalizeFeatures()
        _check_data(cfg, level, graphs)  # before prepare, before any run folder
        exp = cls(cfg, level, metric, spec.name, graphs=graphs, cache_dir=cache_dir, log=log)
        if task_level.structure == "dataset":
            # Pair tasks ("train-edges") prepare the structure of their training edges per split seed instead.
            summary = prepare_graphs(dataset_key=spec.key, level=level, edges=graphs.edge_index,
                                     num_nodes=graphs.num_nodes, fingerprint=graphs.fingerprint(),
                                     cfg=structure_needed(cfg, level), cache_dir=cache_dir, workers=workers,
                                     log=log, memory_gb=cfg.prepare.memory_gb, source_folder=source_folder(spec),
                                     merged_edge_rows=graphs.merged_edge_rows)
            if not summary.cached:
                log(f"structure cache was missing: prepared {summary.path} in {summary.seconds:.1f}s")
            exp.cache_path = Path(summary.path)
        return exp

    def task(self, seed: int, device: str) -> Any:
        """The level's :class:`~xmask_cli.engine.loop.Task` for ``seed`` (which also draws random splits).

        Raises:
            ConfigError: the model needs a dense path (``model.outside_support:
                eps``, or a learned bias on a plain head) where only a sparse
                one fits or one is requested.
        """
        try:
            return self._task(seed, device)
        except PathRefused as exc:
            raise ConfigError(str(exc)) from None

    def _task(self, seed: int, device: str) -> Any:
        return LEVELS[self.level].build(self, seed, device, sparse_refusal(self.cfg.model))

    def model_config(self, task: Any) -> Any:
        """The :class:`ModelConfig` this experiment's model takes on ``task`` (dimensions from the level's task)."""
        fields = LEVELS[self.level].model_fields(self, task)
        return _model_config(self.cfg, self.level, dataset=self.dataset, **fields)

    def features(self) -> dict[str, Any] | None:
        """The node features the model reads (``GraphSet.feature_info``); None for image sets and edge files."""
        info = getattr(self.graphs, "feature_info", None)
        if info is None:
            return None
        out = info().to_dict()
        if self.cfg.model.node_struct != "none":
            out["node_struct"] = struct_info(self.graphs, self.cfg.model.node_struct, self.cfg.structure.rrwp.steps)
        return out

    def run_name(self) -> str:
        """``run.name``, or ``<dataset>-<level>``."""
        return run_name(self.cfg, self.level)


def _fold_experiment(exp: Experiment, seed: int, fold: int, root: Path, write: bool) -> Experiment:
    """``exp`` for outer fold ``fold`` (its config records ``data.fold``, which ``eval`` reads back); the
    seed's fold index files are written into ``<root>/<seed>/folds/`` with its first fold."""
    if write and fold == 0:
        write_fold_files(outer_folds(graph_labels(exp.graphs), exp.cfg.data.folds, seed), root / str(seed) / "folds")
    cfg = dataclasses.replace(exp.cfg, data=dataclasses.replace(exp.cfg.data, fold=fold))
    return dataclasses.replace(exp, cfg=cfg)


def _planned_runs(root: Path, seeds: list[int], n_folds: int) -> Iterator[tuple[int, int | None, RunDir]]:
    """``(seed, fold or None, run folder)`` of every run of a sweep, in training order; no folder is made."""
    for seed in seeds:
        if not n_folds:
            yield seed, None, RunDir(root / str(seed), create=False)
        for i in range(n_folds):
            yield seed, i, RunDir(root / str(seed) / f"fold-{i}", create=False)


def _existing_runs(root: Path, seeds: list[int], n_folds: int) -> list[RunDir]:
    """The planned run folders that exist already, found on disk (the cost is what is there, not the plan's)."""
    out = []
    for seed in seeds:
        folder = root / str(seed)
        if not folder.is_dir():
            continue
        if not n_folds:
            out.append(RunDir(folder, create=False))
            continue
        found = (re.fullmatch(r"fold-(0|[1-9]\d*)", entry.name) for entry in os.scandir(folder) if entry.is_dir())
        out += [RunDir(folder / m.group(0), create=False)
                for m in sorted(filter(None, found), key=lambda m: int(m.group(1))) if int(m.group(1)) < n_folds]
    return out


def _check_planned(existing: list[RunDir], replace: bool) -> None:
    """Refuse a sweep, before any work, when a planned folder that exists is locked by another process or
    (without ``--resume`` / ``--overwrite``: ``replace``) holds a run. Creates nothing."""
    for run in existing:
        run.check_free()
    if not replace:
        taken = [run for run in existing if run.has_run_files()]
        if taken:
            raise UsageError(f"run folder {taken[0].path} exists"
                             + (f" (and {len(taken) - 1} more)" if len(taken) > 1 else "")
                             + "; use --resume to continue it or --overwrite to replace it")


def run_name(cfg: Config, level: str | None = None) -> str:
    """``run.name``, or ``<dataset>-<level>`` (known before any data is loaded; ``level`` if already resolved)."""
    if cfg.run.name:
        return cfg.run.name
    level = level or resolve_level(cfg)
    dataset = EDGE_FILE_DATASET if LEVELS[level].data == "edge-file" else _spec(cfg).name
    return f"{dataset.lower().replace(':', '-')}-{level}"


def _with_folder_ref(cfg: Config) -> Config:
    """``cfg`` with a folder dataset named by its absolute path (however it was given: ``--dataset``, ``--set``,
    a preset, a Config from Python), so the saved config finds the folder from any working directory."""
    if not is_folder_ref(cfg.data.dataset):
        return cfg
    ref = get_dataset(cfg.data.dataset).ref
    return cfg if ref == cfg.data.dataset else dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=ref))


def train_seeds(
    cfg: Config,
    seeds: list[int],
    *,
    device: str = "cpu",
    cache_dir: Path,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    run_root: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = lambda m: None,
    on_epoch: Callable[[int, dict[str, Any]], None] = lambda seed, row: None,
    on_seed_start: Callable[[int, int], None] = lambda seed, epochs: None,
    parts: tuple[str, ...] = PARTS,
    max_folds: int | None = None,
) -> SweepResult:
    """Train one run per seed into ``<run_root>/<name>/<seed>/``; returns summaries and the aggregate.

    With ``data.folds`` = K (graph level), one run per seed and outer fold into
    ``<name>/<seed>/fold-<i>/``, the fold index files in ``<name>/<seed>/folds/``
    (:mod:`xmask_cli.engine.folds`); ``max_folds`` trains only the first folds
    (``xmask tune`` scores a trial on their holdouts). The aggregate is then over
    every (seed, fold) run, and ``folds`` adds each seed's mean ± std over its folds.

    ``parts``: the parts each seed's best state is scored on (``xmask tune`` passes
    ``("train", "val")``: a search never scores test).

    With more than one seed an ``aggregate.json`` (mean ± std over seeds of
    every final metric) is written beside the seed folders. Before any work every
    planned folder that exists is checked (locked by another process, or holding a
    run without ``resume`` / ``overwrite``); each run then makes and locks its folder
    (:meth:`RunDir.lock`) when it starts, held to the end of the call.

    Raises:
        UsageError: a seed folder is locked by another process, or holds a run
            and neither ``resume`` nor ``overwrite`` is given.
    """
    if resume and overwrite:
        raise UsageError("give --resume or --overwrite, not both")
    check_loggers(cfg.train.loggers)  # a missing logger fails before any data is loaded
    level, _ = check_config(cfg)
    cfg = _with_folder_ref(cfg)
    root = Path(run_root or cfg.run.root) / run_name(cfg, level)
    if max_folds is not None and (isinstance(max_folds, bool) or not isinstance(max_folds, int) or max_folds < 1):
        raise UsageError(f"max_folds: expected an int >= 1 or None, got {max_folds!r}")
    n_folds = min(cfg.data.folds, max_folds or cfg.data.folds)
    summaries: list[RunSummary] = []
    jobs: list[tuple[int, int | None, RunDir]] = []  # the runs started so far, in training order
    # Under torchrun: one process group for every seed; only rank 0 locks, reads and writes run folders.
    with distributed.session(device) as (w, device), contextlib.ExitStack() as held:
        if w.main:
            # Every planned folder that exists is checked before any work, so a clash fails at once.
            _check_planned(_existing_runs(root, seeds, n_folds), resume or overwrite)
        if w.distributed and not w.main:
            distributed.barrier(w)  # rank 0 prepares a missing cache first; the others then read it
        exp = Experiment.load(cfg, cache_dir=cache_dir, data_root=data_root, offline=offline, log=log)
        if w.distributed and w.main:
            distributed.barrier(w)
        # Planned lazily (Experiment.load has checked data.folds against the labels): nothing is created
        # here, a run makes (and locks) its folder when it starts.
        for seed, fold, run in _planned_runs(root, seeds, n_folds):
            jobs.append((seed, fold, run))
            if w.main:
                # Made and locked as the run starts, held to the end of the sweep: a second train into any
                # folder this one has started fails at once (train_task refuses a folder that holds a run).
                held.enter_context(run.lock())
            run_exp = exp if fold is None else _fold_experiment(exp, seed, fold, root, write=w.main)
            seed_everything(seed)
            task = run_exp.task(seed, device)
            on_seed_start(seed, cfg.train.epochs)
            extra = {"config": run_exp.cfg.to_dict(), "level": exp.level,
                     "data_root": None if data_root is None else str(data_root)}
            # Through the module, read per call: a substitute for train_task (tests) is seen.
            summary = loop.train_task(task, run_exp.model_config(task), _train_config(cfg, seed, device), run,
                                      extra_config=extra, resume=resume, overwrite=overwrite,
                                      log=lambda row, s=seed: on_epoch(s, row), parts=parts)
            summary = RunSummary.from_json({**summary, "level": exp.level, "run_dir": str(run.path),
                                            **({} if fold is None else {"fold": fold, "folds": cfg.data.folds})},
                                           strict=True)
            if w.main:
                run.write_summary(summary.to_json())
            summaries.append(summary)
            stall = input_stall(run.read_metrics()) if w.main else None  # other ranks never read the run folder
            log(f"seed {seed}{'' if fold is None else f' fold {fold}'}: best epoch {summary.best_epoch}, "
                + ", ".join(f"{p} {exp.metric} {summary.metrics[p]:.4f}" for p in PARTS if p in summary.metrics)
                + ("" if stall is None else f"; input stall {100 * stall:.1f} % of training time (waiting for batches)"))
        run_dirs = [run for _, _, run in jobs]
        folds = None
        if n_folds and w.main:
            folds = FoldsSummary(cfg.data.folds, n_folds, HOLDOUT, {
                str(s): stats_of(aggregate([r for s2, _, r in jobs if s2 == s])) for s in seeds})
        result = SweepResult(exp.run_name(), exp.dataset, exp.level, exp.metric, exp.features(), tuple(seeds),
                             str(root), tuple(summaries), stats_of(aggregate(run_dirs)) if w.main else None, folds)
        if len(run_dirs) > 1 and w.main:
            root.mkdir(parents=True, exist_ok=True)
            write_json(root / "aggregate.json", result.aggregate_json())
        return result
