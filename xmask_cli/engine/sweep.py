"""The sweep: one run per seed (and outer fold) of an :class:`~xmask_cli.engine.experiment.Experiment`,
then the aggregate over them.

This is what ``xmask train``, ``xmask ablate`` and ``xmask tune`` call.

Example::

    cfg = resolve("graph-level", ["train.epochs=50"])
    result = train_seeds(cfg, seeds=[0, 1, 2], device="cpu", cache_dir=Path("cache"))
    print(result.aggregate["test"].mean, result.aggregate["test"].std)

:func:`train_seeds` makes the sweep's :class:`~xmask_cli.engine.plan.RunPlan`; :func:`train_plan` takes one
made already (what ``xmask train`` does, through :func:`xmask_cli.api.train`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from xmask_cli.config import Config
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine import distributed, loop
from xmask_cli.engine.data import DatasetMemo
from xmask_cli.engine.distributed import World
from xmask_cli.engine.experiment import Experiment, _train_config
from xmask_cli.engine.folds import HOLDOUT, outer_folds, write_fold_files
from xmask_cli.engine.loop import PARTS, MetricsRow, SummaryLabels, seed_everything
from xmask_cli.engine.plan import RunPlan, check_outputs, check_planned, existing_runs, make_plan, planned_runs
from xmask_cli.engine.runs import RunDir, aggregate, input_stall, write_json
from xmask_cli.engine.tasks.graph import graph_labels
from xmask_cli.engine.threads import apply_threads, choose_threads, usable_cores
from xmask_cli.engine.watch import check_loggers
from xmask_cli.errors import UsageError
from xmask_cli.results import FoldsSummary, RunSummary, SweepResult, stats_of

__all__ = ["train_seeds", "train_plan"]

#: One run of a sweep: its seed, its outer fold (None without folds) and its folder.
Job = tuple[int, int | None, RunDir]


@dataclass(frozen=True)
class _RunOptions:
    """What every run of one sweep is trained with (``train_seeds``'s keywords)."""

    device: str
    root: Path
    data_root: str | os.PathLike[str] | None
    resume: bool
    overwrite: bool
    parts: tuple[str, ...]
    log: Callable[[str], None]
    on_epoch: Callable[[int, MetricsRow], None]
    on_seed_start: Callable[[int, int], None]
    on_run_start: Callable[[int, int | None, int], None]


def _fold_experiment(exp: Experiment, seed: int, fold: int, root: Path, write: bool) -> Experiment:
    """``exp`` for outer fold ``fold`` (its config records ``data.fold``, which ``eval`` reads back); the
    seed's fold index files are written into ``<root>/<seed>/folds/`` with its first fold."""
    if write and fold == 0:
        assert isinstance(exp.graphs, GraphSet), "folds are graph-level (config_rules), whose data is a GraphSet"
        write_fold_files(outer_folds(graph_labels(exp.graphs), exp.cfg.data.folds, seed), root / str(seed) / "folds")
    cfg = dataclasses.replace(exp.cfg, data=dataclasses.replace(exp.cfg.data, fold=fold))
    return dataclasses.replace(exp, cfg=cfg)


def _fold_count(cfg: Config, max_folds: int | None) -> int:
    """The outer folds each seed trains: ``data.folds``, at most ``max_folds``."""
    if max_folds is not None and (isinstance(max_folds, bool) or not isinstance(max_folds, int) or max_folds < 1):
        raise UsageError(f"max_folds: expected an int >= 1 or None, got {max_folds!r}")
    return min(cfg.data.folds, max_folds or cfg.data.folds)


def _load(plan: RunPlan, w: World, *, cache_dir: Path, data_root: str | os.PathLike[str] | None,
          offline: bool | None, log: Callable[[str], None], datasets: DatasetMemo | None) -> Experiment:
    """The experiment, loaded by rank 0 first: it prepares a missing cache, the other ranks then read it."""
    if w.distributed and not w.main:
        distributed.barrier(w)
    exp = Experiment.load(plan, cache_dir=cache_dir, data_root=data_root, offline=offline, log=log,
                          datasets=datasets)
    if w.distributed and w.main:
        distributed.barrier(w)
    return exp


def _locked(jobs: Iterable[Job], held: contextlib.ExitStack, w: World) -> Iterator[Job]:
    """Each run as it starts, its folder made and locked (rank 0 only) and held to the end of the sweep: a
    second train into any folder this one has started fails at once (train_task refuses a folder that holds
    a run)."""
    for job in jobs:
        if w.main:
            held.enter_context(job[2].lock())
        yield job


def _train_run(exp: Experiment, job: Job, w: World, opts: _RunOptions) -> RunSummary:
    """Train one run of the sweep (the loop writes its summary, labelled with the level and fold); its line
    logged."""
    seed, fold, run = job
    cfg = exp.cfg
    run_exp = exp if fold is None else _fold_experiment(exp, seed, fold, opts.root, write=w.main)
    seed_everything(seed)
    task = run_exp.task(seed, opts.device)
    opts.on_seed_start(seed, cfg.train.epochs)
    opts.on_run_start(seed, fold, cfg.train.epochs)
    extra = {"config": run_exp.cfg.to_dict(), "level": exp.level,
             "data_root": None if opts.data_root is None else str(opts.data_root)}
    # Through the module, read per call: a substitute for train_task (tests) is seen.
    labels = SummaryLabels(level=exp.level, run_dir=str(run.path), fold=fold,
                           folds=None if fold is None else cfg.data.folds)
    summary = loop.train_task(task, run_exp.model_config(task), _train_config(cfg, seed, opts.device), run,
                              extra_config=extra, resume=opts.resume, overwrite=opts.overwrite,
                              log=lambda row: opts.on_epoch(seed, row), parts=opts.parts, labels=labels)
    stall = input_stall(run.read_metrics()) if w.main else None  # other ranks never read the run folder
    opts.log(f"seed {seed}{'' if fold is None else f' fold {fold}'}: best epoch {summary.best_epoch}, "
             + ", ".join(f"{p} {exp.metric} {summary.metrics[p]:.4f}" for p in PARTS if p in summary.metrics)
             + ("" if stall is None else f"; input stall {100 * stall:.1f} % of training time (waiting for batches)"))
    return summary


def _aggregate(exp: Experiment, plan: RunPlan, jobs: list[Job], summaries: list[RunSummary], n_folds: int,
               w: World) -> SweepResult:
    """The sweep's result: every run's summary and the mean ± std over them (and per seed over its folds);
    ``aggregate.json`` written beside the seed folders when there is more than one run (rank 0)."""
    seeds, root = list(plan.seeds), plan.root
    run_dirs = [run for _, _, run in jobs]
    folds = None
    if n_folds and w.main:
        folds = FoldsSummary(exp.cfg.data.folds, n_folds, HOLDOUT, {
            str(s): stats_of(aggregate([r for s2, _, r in jobs if s2 == s])) for s in seeds})
    result = SweepResult(plan.name, exp.dataset, exp.level, exp.metric, exp.features(), tuple(seeds),
                         str(root), tuple(summaries), stats_of(aggregate(run_dirs)) if w.main else None, folds)
    if len(run_dirs) > 1 and w.main:
        root.mkdir(parents=True, exist_ok=True)
        write_json(root / "aggregate.json", result.aggregate_json())
    return result


def train_seeds(
    cfg: Config,
    seeds: list[int],
    *,
    device: str = "cpu",
    cache_dir: Path,
    data_root: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    run_root: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = lambda m: None,
    on_epoch: Callable[[int, MetricsRow], None] = lambda seed, row: None,
    on_seed_start: Callable[[int, int], None] = lambda seed, epochs: None,
    on_run_start: Callable[[int, int | None, int], None] = lambda seed, fold, epochs: None,
    parts: tuple[str, ...] = PARTS,
    max_folds: int | None = None,
    datasets: DatasetMemo | None = None,
) -> SweepResult:
    """Train one run per seed into ``<run_root>/<name>/<seed>/``; returns summaries and the aggregate.

    With ``data.folds`` = K (graph level), one run per seed and outer fold into
    ``<name>/<seed>/fold-<i>/``, the fold index files in ``<name>/<seed>/folds/``
    (:mod:`xmask_cli.engine.folds`); ``max_folds`` trains only the first folds
    (``xmask tune`` scores a trial on their holdouts). The aggregate is then over
    every (seed, fold) run, and ``folds`` adds each seed's mean ± std over its folds.

    ``on_seed_start(seed, epochs)`` and ``on_run_start(seed, fold, epochs)`` (fold None without folds) are
    called before each run trains, ``on_epoch(seed, row)`` after each of its epochs.

    ``parts``: the parts each seed's best state is scored on (``xmask tune`` passes
    ``("train", "val")``: a search never scores test).

    With more than one seed an ``aggregate.json`` (mean ± std over seeds of
    every final metric) is written beside the seed folders. Before any work every
    planned folder that exists is checked (locked by another process, not writable, a
    folder or FIFO under a run file's name, or holding a run without ``resume`` /
    ``overwrite``), and so is the runs folder; each run then makes and locks its folder
    (:meth:`RunDir.lock`) when it starts, held to the end of the call.

    Raises:
        UsageError: a seed folder is locked by another process, holds something other than a file under a
            run file's name, or holds a run and neither ``resume`` nor ``overwrite`` is given.
        NotWritableError: the runs folder or a run folder is a file, read-only or not writable.
    """
    return train_plan(make_plan(cfg, seeds, run_root=run_root), device=device, cache_dir=cache_dir,
                      data_root=data_root, offline=offline, resume=resume, overwrite=overwrite, log=log,
                      on_epoch=on_epoch, on_seed_start=on_seed_start, on_run_start=on_run_start, parts=parts,
                      max_folds=max_folds, datasets=datasets)


def train_plan(
    plan: RunPlan,
    *,
    device: str = "cpu",
    cache_dir: Path,
    data_root: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = lambda m: None,
    on_epoch: Callable[[int, MetricsRow], None] = lambda seed, row: None,
    on_seed_start: Callable[[int, int], None] = lambda seed, epochs: None,
    on_run_start: Callable[[int, int | None, int], None] = lambda seed, fold, epochs: None,
    parts: tuple[str, ...] = PARTS,
    max_folds: int | None = None,
    datasets: DatasetMemo | None = None,
) -> SweepResult:
    """:func:`train_seeds` of a plan made already (its config checked, level, metric, name and folders
    decided once: :func:`~xmask_cli.engine.plan.make_plan`); the same keywords but ``run_root`` (the plan's
    ``root``). ``datasets``: datasets loaded by an earlier sweep of this process, reused (tune, ablate).
    """
    cfg, seeds, root = plan.cfg, list(plan.seeds), plan.root
    if resume and overwrite:
        raise UsageError("give --resume or --overwrite, not both")
    check_loggers(cfg.train.loggers)  # a missing logger fails before any data is loaded
    apply_threads(choose_threads(plan.level, usable_cores(), os.environ))
    n_folds = _fold_count(cfg, max_folds)
    summaries: list[RunSummary] = []
    jobs: list[Job] = []  # the runs started so far, in training order
    # Under torchrun: one process group for every seed; only rank 0 locks, reads and writes run folders.
    with distributed.session(device) as (w, device), contextlib.ExitStack() as held:
        if w.main:
            # Every planned folder that exists is checked before any work, so a clash fails at once.
            check_outputs(root, seeds, n_folds)
            check_planned(existing_runs(root, seeds, n_folds), resume or overwrite)
        exp = _load(plan, w, cache_dir=cache_dir, data_root=data_root, offline=offline, log=log, datasets=datasets)
        opts = _RunOptions(device, root, data_root, resume, overwrite, parts, log, on_epoch, on_seed_start,
                           on_run_start)
        # Planned lazily (Experiment.load has checked data.folds against the labels): nothing is created
        # here, a run makes (and locks) its folder when it starts.
        for job in _locked(planned_runs(root, seeds, n_folds), held, w):
            jobs.append(job)
            summaries.append(_train_run(exp, job, w, opts))
        return _aggregate(exp, plan, jobs, summaries, n_folds, w)
