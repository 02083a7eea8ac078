"""From a resolved :class:`~xmask_cli.config.Config` to the runs a sweep makes, before any data is read.

The seeds (``--seeds``) and the device (``--device``) as given on the command line, the task level and
metric, the run name, and the run folders a sweep plans (per seed, per outer fold) or finds on disk.
:func:`make_plan` decides all of it once (the dataset's registry entry looked up once, the run-stage
rules checked once) into a frozen :class:`RunPlan` that the sweep, the experiment and the loaders read.
Nothing here loads a dataset or creates a folder.

Example::

    plan = make_plan(cfg, parse_seeds("0-2"))
    for seed, fold, run in planned_runs(plan.root, list(plan.seeds), cfg.data.folds):
        ...
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from xmask_cli.config import Config
from xmask_cli.config_rules import check_rules
from xmask_cli.data.folder import is_folder_ref
from xmask_cli.data.registry import get_dataset
from xmask_cli.data.spec import DatasetSpec
from xmask_cli.engine.runs import RunDir
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.errors import UsageError
from xmask_cli.fs import check_writable, refuse_links

__all__ = ["RunPlan", "make_plan", "parse_seeds", "check_seeds", "resolve_device", "resolve_level", "resolve_metric", "run_name", "dataset_spec",
           "with_folder_ref", "planned_runs", "existing_runs", "check_planned", "check_outputs", "DEFAULT_METRICS",
           "EDGE_FILE_DATASET", "MAX_SEED", "MAX_SEEDS"]

#: Metric a level selects on when neither the preset nor the dataset says (from the level registry).
DEFAULT_METRICS = {name: level.default_metric for name, level in LEVELS.items()}
#: Largest seed (numpy's global generator takes 32 bits) and most seeds in one sweep.
MAX_SEED = 2**32 - 1
MAX_SEEDS = 10000
#: What to do about a runs folder that cannot take a sweep's files.
RUNS_HINT = "pass another --runs-dir (run.root), or make it writable"
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
        if len(seeds) + (b - a + 1) > MAX_SEEDS:  # before the range is expanded: "0-4294967295" stays cheap
            raise UsageError(f"--seeds '{text}': more than {MAX_SEEDS} seeds in one sweep")
        seeds.extend(range(a, b + 1))
    return check_seeds(seeds, text)


def check_seeds(seeds: Sequence[int], text: str | None = None) -> list[int]:
    """``seeds`` as a list, each in 0..2^32 - 1, at most :data:`MAX_SEEDS` of them, none twice (``text``: how
    they were written, for the message; default their comma list).

    Raises:
        UsageError: a seed out of range, too many seeds, or a repeat.
    """
    out = [int(s) for s in seeds]
    shown = ",".join(map(str, out)) if text is None else text
    bad = [s for s in out if not 0 <= s <= MAX_SEED]
    if bad:
        raise UsageError(f"--seeds '{shown}': seeds must lie in 0..{MAX_SEED} (2^32 - 1), got {bad[0]}")
    if len(out) > MAX_SEEDS:
        raise UsageError(f"--seeds '{shown}': more than {MAX_SEEDS} seeds in one sweep")
    if len(set(out)) != len(out):
        raise UsageError(f"--seeds '{shown}': a seed appears twice")
    return out


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


def dataset_spec(cfg: Config) -> DatasetSpec:
    """The registry entry of ``data.dataset`` (a folder reference gets one made from its files)."""
    return get_dataset(cfg.data.dataset)


def _edge_file_level(cfg: Config) -> bool:
    """Whether the run reads an edge-attribute file (``edge`` level, or ``auto`` with ``edge.file``).

    Raises:
        UsageError: ``task.level`` edge without ``edge.file``.
    """
    level = cfg.task.level
    if level == "edge" or (level == "auto" and cfg.edge.file):
        if not cfg.edge.file:
            raise UsageError("task level edge needs an edge-attribute file: --set edge.file=PATH.csv "
                             "(columns src,dst,target...)")
        return True
    return False


def resolve_level(cfg: Config, spec: DatasetSpec | None = None) -> str:
    """The task level: ``task.level``, or the dataset's default (``edge`` when ``edge.file`` is set);
    ``spec``: ``data.dataset``'s entry when already looked up.

    Raises:
        UsageError: the dataset has no task of that level.
    """
    if _edge_file_level(cfg):
        return "edge"
    spec = spec or dataset_spec(cfg)
    level = cfg.task.level
    if level == "auto":
        return spec.level
    if level not in spec.levels:
        raise UsageError(f"dataset {spec.name} has no {level}-level task; it supports: {', '.join(spec.levels)}")
    return level


def resolve_metric(cfg: Config, level: str, spec: DatasetSpec | None = None) -> str:
    """``task.metric``, or the dataset's metric for its main level, or the level's default."""
    metric: str = cfg.task.metric
    task_level = LEVELS[level]
    if metric == "auto":
        metric = (spec or dataset_spec(cfg)).metric if task_level.metric_from_dataset else task_level.default_metric
    if metric not in task_level.metrics:
        raise UsageError(f"metric {metric} does not apply to {level}-level tasks; use one of "
                         f"{', '.join(task_level.metrics)}")
    return metric


def run_name(cfg: Config, level: str | None = None, spec: DatasetSpec | None = None) -> str:
    """``run.name``, or ``<dataset>-<level>`` (known before any data is loaded; ``level`` if already resolved)."""
    if cfg.run.name:
        return cfg.run.name
    level = level or resolve_level(cfg, spec)
    dataset = EDGE_FILE_DATASET if LEVELS[level].data == "edge-file" else (spec or dataset_spec(cfg)).name
    return f"{dataset.lower().replace(':', '-')}-{level}"


def with_folder_ref(cfg: Config, spec: DatasetSpec | None = None) -> Config:
    """``cfg`` with a folder dataset named by its absolute path (however it was given: ``--dataset``, ``--set``,
    a preset, a Config from Python), so the saved config finds the folder from any working directory."""
    if not is_folder_ref(cfg.data.dataset):
        return cfg
    ref = (spec or get_dataset(cfg.data.dataset)).ref
    return cfg if ref == cfg.data.dataset else dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=ref))


@dataclass(frozen=True)
class RunPlan:
    """What one ``xmask train`` runs, decided once before any data is read and handed down unchanged.

    Attributes:
        cfg: the resolved config (a folder dataset named by its absolute path: what ``config.json`` records).
        spec: ``data.dataset``'s registry entry (None for an edge-attribute file, which reads no dataset).
        level, metric: the task level and the selection metric.
        name: the run name; root: ``<runs-dir>/<name>``, the folder holding the seed folders.
        seeds: the seeds, in training order.
    """

    cfg: Config
    spec: DatasetSpec | None
    level: str
    metric: str
    name: str
    root: Path
    seeds: tuple[int, ...] = (0,)


def make_plan(cfg: Config, seeds: Sequence[int] = (0,), *, run_root: str | os.PathLike[str] | None = None,
              spec: DatasetSpec | None = None) -> RunPlan:
    """The :class:`RunPlan` of ``cfg``: the dataset's entry looked up once (``spec``, when the caller has
    looked ``data.dataset`` up already, is used as it is), the level and metric it allows, then the run-stage
    rules between sections (:func:`~xmask_cli.config_rules.check_rules` with the level and the dataset's
    split); ``run_root`` overrides ``run.root``.

    Raises:
        UsageError: no such level for the dataset, a metric that does not apply, a bad seed list.
        ConfigError: a run-stage rule broken (structure the model reads but the cache would not hold, ...).
    """
    if spec is not None and spec.ref != cfg.data.dataset:
        spec = None  # an entry of another dataset (a later override changed data.dataset)
    if spec is None and not (_edge_file_level(cfg) and not cfg.data.folds):
        spec = dataset_spec(cfg)
    level = resolve_level(cfg, spec)
    metric = resolve_metric(cfg, level, spec)
    check_rules(cfg, level, split=spec.split if spec is not None and cfg.data.folds else None)
    cfg = with_folder_ref(cfg, spec)
    name = run_name(cfg, level, spec)
    return RunPlan(cfg, spec, level, metric, name, Path(run_root or cfg.run.root) / name, tuple(check_seeds(seeds)))


def planned_runs(root: Path, seeds: list[int], n_folds: int) -> Iterator[tuple[int, int | None, RunDir]]:
    """``(seed, fold or None, run folder)`` of every run of a sweep, in training order; no folder is made."""
    for seed in seeds:
        if not n_folds:
            yield seed, None, RunDir(root / str(seed), create=False)
        for i in range(n_folds):
            yield seed, i, RunDir(root / str(seed) / f"fold-{i}", create=False)


def existing_runs(root: Path, seeds: list[int], n_folds: int) -> list[RunDir]:
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


def check_outputs(root: Path, seeds: list[int], n_folds: int) -> None:
    """Refuse a sweep, before any work, whose folders could not take its files; creates nothing.

    ``root`` (``<runs-dir>/<name>``) and each seed folder that exists must be folders on a writable file
    system (else :class:`~xmask_cli.errors.NotWritableError`, exit 5), as must its ``fold-<i>`` and ``folds``
    entries with ``n_folds``; ``aggregate.json`` there must be a plain file if anything (else UsageError,
    exit 2). The run folders' own files are :func:`check_planned`'s.
    """
    check_writable(root, "runs folder", RUNS_HINT)
    if not root.is_dir():
        return
    refuse_links(root, ("aggregate.json",), "runs folder")
    for seed in seeds:
        folder = root / str(seed)
        if not os.path.lexists(folder):
            continue
        check_writable(folder, "run folder", RUNS_HINT)
        if n_folds:
            for entry in os.scandir(folder):
                if re.fullmatch(r"folds|fold-\d+", entry.name) and not entry.is_dir():
                    check_writable(folder / entry.name, "run folder", RUNS_HINT)


def check_planned(existing: list[RunDir], replace: bool) -> None:
    """Refuse a sweep, before any work, when a planned folder that exists is locked by another process,
    cannot take files (exit 5), holds something other than a plain file under a run file's name (exit 2), or
    (without ``--resume`` / ``--overwrite``: ``replace``) holds a run. Creates nothing."""
    for run in existing:
        check_writable(run.path, "run folder", RUNS_HINT)
        run.check_free()
    if not replace:
        taken = [run for run in existing if run.has_run_files()]
        if taken:
            raise UsageError(f"run folder {taken[0].path} exists"
                             + (f" (and {len(taken) - 1} more)" if len(taken) > 1 else "")
                             + "; use --resume to continue it or --overwrite to replace it")
