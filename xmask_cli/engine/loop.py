"""The one training loop every task level shares.

A :class:`~xmask_cli.engine.tasks.base.Task` knows its data (batches, loss, metric); :func:`fit` knows
optimisation, validation-only selection, checkpoints and resume. Node,
link, edge and graph tasks differ only in their :class:`Task`.

Selection reads validation only (the metric, ties broken by the loss): the best epoch, early stopping
and the state restored at the end. The test metric is computed once, on that
restored state, and only reported.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from xmask_cli.engine import selection
from xmask_cli.engine.checkpoint import BestCheckpoint, LastCheckpoint
from xmask_cli.engine.distributed import Strategy, World, make_strategy
from xmask_cli.engine.metrics import HIGHER_IS_BETTER
from xmask_cli.engine.optimisation import Optimisation
from xmask_cli.engine.precision import Precision, autocast, check_precision
from xmask_cli.engine.resume import open_run, rng_state, set_rng_state
from xmask_cli.engine.runs import RunDir
from xmask_cli.engine.splits import PARTS
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.train_config import TrainConfig  # re-exported: loop.TrainConfig is its long-standing path
from xmask_cli.engine.watch import RunWatch
from xmask_cli.errors import DivergedError
from xmask_cli.model.network import XMaskNet
from xmask_cli.results import RunSummary

if TYPE_CHECKING:
    from xmask_cli.model.network import ModelConfig

__all__ = ["TrainConfig", "MetricsRow", "fit", "train_task", "seed_everything", "PARTS"]

T = TypeVar("T")
#: One epoch's line of ``metrics.jsonl`` (numbers; None where JSON would need a NaN).
MetricsRow = dict[str, float | None]


def seed_everything(seed: int) -> None:
    """Seed torch (all devices) and numpy's global generator."""
    torch.manual_seed(seed)
    np.random.seed(seed)


def _finite_or_none(x: float | None) -> float | None:
    """``x``, or None where JSON would need a NaN (a task without a validation loss)."""
    return x if x is not None and math.isfinite(x) else None


def _cpu_state(model: torch.nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@torch.no_grad()
def score(task: Task, model: torch.nn.Module, part: str, precision: str = "fp32", device: str = "cpu") -> float:
    """``task.metric`` on ``part`` with ``model`` in eval mode (forward under ``precision``'s autocast)."""
    model.eval()
    with autocast(precision, device):
        return float(task.score(model, part))


@torch.no_grad()
def score_and_loss(task: Task, model: torch.nn.Module, part: str, precision: str = "fp32",
                   device: str = "cpu") -> tuple[float, float]:
    """``(metric, mean loss)`` on ``part`` from one pass (``task.evaluate``); the loss is NaN for a task that
    keeps ``Task.evaluate``'s default (selection then breaks metric ties by the later epoch)."""
    model.eval()
    with autocast(precision, device):
        val, loss = task.evaluate(model, part)
        return float(val), float(loss)


def timed_batches(batches: Iterable[T], waited: list[float]) -> Iterator[T]:
    """Yield ``batches``, adding the seconds spent waiting for each one to ``waited[0]`` (the input stall)."""
    it = iter(batches)
    while True:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            waited[0] += time.perf_counter() - t
            return
        waited[0] += time.perf_counter() - t
        yield batch


@dataclass(frozen=True)
class SummaryLabels:
    """What a run's summary records that the loop does not know: the task level, the run folder as the caller
    names it, and the outer fold of a ``data.folds`` sweep with K (the sweep's; None: not recorded)."""

    level: str | None = None
    run_dir: str | None = None
    fold: int | None = None
    folds: int | None = None


def fit(
    task: Task,
    model: torch.nn.Module,
    train_cfg: TrainConfig,
    run_dir: RunDir | str,
    *,
    model_config: dict[str, object],
    extra_config: dict[str, object] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[MetricsRow], None] = lambda m: None,
    parts: tuple[str, ...] = PARTS,
    strategy: Strategy | None = None,
    labels: SummaryLabels = SummaryLabels(),
) -> RunSummary:
    """Train ``model`` on ``task``; returns (and writes once, as ``summary.json``) the run summary.

    Every epoch: one pass over ``task.train_batches(epoch)`` (``train.optimizer``, linear
    warm-up then constant learning rate, gradient clipping), then the
    validation metric and loss. The best epoch by validation is kept
    (:data:`~xmask_cli.engine.selection.RULE`: the metric, ties broken by the
    lower loss, then the later epoch); the run stops after ``patience`` epochs
    without improvement or at ``epochs``. The best
    state is then restored and its train/val/test metrics reported.

    ``last.pt`` is written after every epoch (model, optimizer, scheduler,
    RNG states, early-stopping counters); with ``resume=True`` a killed run
    continues from it and ends exactly as an uninterrupted run would (on CPU).
    ``log`` receives each epoch's metrics row after it has been checkpointed.
    A folder that already holds a run is refused unless ``resume`` (same
    config, only ``epochs`` may differ) or ``overwrite`` (its files are deleted,
    checkpoints first) is given.

    Args:
        model_config: JSON-able model hyper-parameters, saved and compared on resume.
        extra_config: anything else to save in ``config.json`` (e.g. the resolved preset).
        parts: the parts scored on the restored best state and reported in ``summary["metrics"]``;
            ``xmask tune`` leaves ``test`` out so a search never reads the test split.
        labels: the summary's fields the caller knows (level, run folder, fold), written with it.
        strategy: how this process trains (:mod:`~xmask_cli.engine.distributed`); by default DDP over the open
            process group, else one process, under ``train_cfg.precision``. Only its main process writes the
            run folder; every process returns the summary.

    The run folder also gets ``curves.png`` when training ends, however it ends (a finished run, Ctrl-C, a
    diverged loss), and TensorBoard events with ``train_cfg.loggers`` (:class:`~xmask_cli.engine.watch.RunWatch`).

    Raises:
        ValueError: ``epochs < 1``, or ``parts`` without ``val`` or with an unknown part.
        DivergedError: a non-finite loss or gradient norm (unless
            ``train_cfg.skip_nonfinite``); ``best.pt`` so far is kept.
        UsageError: the folder holds a run and neither ``resume`` nor
            ``overwrite`` is given, or ``resume`` finds a run whose config differs
            in anything but the epoch budget (the message names the keys).
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    watch = RunWatch(run, train_cfg.loggers)  # writes only once given epochs or a summary: on the main process
    if train_cfg.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {train_cfg.epochs}")
    check_precision(train_cfg.precision, train_cfg.device)
    if "val" not in parts or not set(parts) <= set(PARTS):
        raise ValueError(f"parts must include 'val' and lie in {PARTS}, got {parts}")
    if strategy is None:
        device = next(iter(model.parameters()), torch.empty(0)).device  # where collectives put their tensors
        strategy = make_strategy(Precision(train_cfg.precision, train_cfg.device), device)

    def logged(row: MetricsRow) -> None:
        watch.epoch(row)
        log(row)

    try:
        summary = _fit(task, model, train_cfg, run, strategy, model_config=model_config, extra_config=extra_config,
                       resume=resume, overwrite=overwrite, log=logged, parts=parts, labels=labels)
    except BaseException:
        with contextlib.suppress(Exception):  # the figure is a courtesy: never mask the real error
            watch.close()
        raise
    strategy.on_main(watch.close, summary.to_json())
    return summary


@dataclass
class _EpochStats:
    """One epoch's training pass: mean loss, learning rate, skipped batches, seconds training and waiting."""

    loss: float
    lr: float
    skipped: int
    train_s: float
    waited_s: float


def _run_config(task: Task, train_cfg: TrainConfig, model_config: dict[str, object],
                extra_config: dict[str, object] | None) -> dict[str, object]:
    """The ``config.json`` of the run (and what ``--resume`` compares)."""
    return {**(extra_config or {}), **task.describe(), "metric": task.metric, "model": model_config,
            "train": train_cfg.to_dict()}


def _restore(ckpt: LastCheckpoint | None, model: torch.nn.Module, opt: Optimisation) -> selection.Selection:
    """Model, optimisation and RNG states from ``last.pt`` (nothing for a fresh run); where selection stood."""
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load(ckpt)
        set_rng_state(ckpt["rng"])
    return selection.Selection.from_checkpoint(ckpt)


def _diverged(run: RunDir, bad: str, epoch: int, batch: int, lr: float) -> DivergedError:
    best_path = run.path / RunDir.BEST
    kept = f"best checkpoint so far: {best_path}" if best_path.is_file() else "no checkpoint yet"
    return DivergedError(f"training diverged: non-finite {bad} at epoch {epoch}, batch {batch} (lr {lr:g}); "
                         f"lower train.lr, or set train.skip_nonfinite=true to skip such batches; {kept}")


def _train_epoch(task: Task, model: torch.nn.Module, strategy: Strategy, opt: Optimisation, cfg: TrainConfig,
                 run: RunDir, epoch: int) -> _EpochStats:
    """One pass over the epoch's batches (this process's share), then the scheduler's step.

    Raises:
        DivergedError: a non-finite loss or gradient norm, unless ``cfg.skip_nonfinite``.
    """
    model.train()
    total, count, skipped = 0.0, 0, 0
    lr = opt.optimizer.param_groups[0]["lr"]
    waited = [0.0]
    t0 = time.perf_counter()
    for i, (batch, real) in enumerate(timed_batches(strategy.batches(task, epoch, cfg.seed), waited)):
        opt.optimizer.zero_grad(set_to_none=True)
        loss, n, bad = strategy.backward(task, model, batch, real)
        if bad is None:
            bad = opt.clip(model, cfg.clip_norm)
        if bad is not None:
            if not cfg.skip_nonfinite:
                raise _diverged(run, bad, epoch, i, lr)
            opt.optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        opt.step()
        total += float(loss.detach()) * n
        count += n
    train_s = time.perf_counter() - t0
    opt.scheduler.step()
    total, items = strategy.reduce([total, count])  # the epoch's loss over every process's items
    return _EpochStats(total / max(int(items), 1), lr, skipped, train_s, waited[0])


def _epoch_row(epoch: int, stats: _EpochStats, metric: str, val: float, val_loss: float | None, best_epoch: int,
               t_epoch: float) -> MetricsRow:
    """The epoch's line of ``metrics.jsonl``."""
    row: MetricsRow = {
        "epoch": epoch, "loss": stats.loss, "lr": stats.lr, f"val_{metric}": val,
        "val_loss": _finite_or_none(val_loss), "best_epoch": best_epoch, "train_s": round(stats.train_s, 4),
        "epoch_s": round(time.perf_counter() - t_epoch, 4),  # training pass + validation
        "input_stall": round(stats.waited_s / stats.train_s, 4) if stats.train_s > 0 else 0.0}
    if stats.skipped:
        row["skipped_batches"] = stats.skipped
    return row


def _save_best(run: RunDir, model: torch.nn.Module, epoch: int, val: float, val_loss: float | None,
               config: dict[str, object]) -> None:
    """``best.pt``: the state selection restores at the end, and the config it was trained with (what
    ``eval``, ``explain``, ``load_run`` and ``--resume`` check against ``config.json``)."""
    best: BestCheckpoint = {"model": _cpu_state(model), "epoch": epoch, "val": val, "val_loss": val_loss,
                            "config": json.dumps(config, sort_keys=True)}
    run.save_checkpoint(best, RunDir.BEST)


def _end_epoch(run: RunDir, epoch: int, row: MetricsRow, model: torch.nn.Module, opt: Optimisation,
               sel: selection.Selection, config: dict[str, object], log: Callable[[MetricsRow], None]) -> None:
    """The epoch's metrics row, then ``last.pt`` (everything ``--resume`` needs to go on as if never stopped),
    then ``log``."""
    run.append_metrics(row)
    # RNG states after the epoch: the next one (dropout) draws exactly what it would have uninterrupted.
    # The key order is part of the file's bytes (torch.save pickles the dict in order): keep it.
    last: LastCheckpoint = {
        "model": _cpu_state(model), **opt.state(), "rng": rng_state(), "epoch": epoch, **sel.state(),
        "config": json.dumps(config, sort_keys=True),  # resume compares against this, not config.json
    }
    run.save_checkpoint(last, RunDir.LAST)
    log(row)


def _summarize(task: Task, model: torch.nn.Module, run: RunDir, cfg: TrainConfig, parts: tuple[str, ...],
               epochs_run: int, stopped_early: bool, w: World, labels: SummaryLabels) -> RunSummary:
    """Restore the best state by validation (whatever ended the run), score ``parts`` on it, write the summary."""
    best_ckpt = run.load_best()
    model.load_state_dict(best_ckpt["model"])
    metric = task.metric
    metrics = {part: score(task, model, part, cfg.precision, cfg.device) for part in PARTS if part in parts}
    summary = RunSummary(
        dataset=task.describe().get("dataset"), metric=metric, seed=cfg.seed,
        best_epoch=int(best_ckpt["epoch"]), epochs_run=epochs_run, stopped_early=bool(stopped_early),
        split={**{k: v for k, v in (task.describe().get("split") or {}).items() if k in ("name", "seed")},
               **task.split_sizes()},
        metrics=metrics,
        # The rule that chose best_epoch, and the two values it read there.
        selection={"rule": selection.RULE, f"val_{metric}": best_ckpt.get("val"),
                   "val_loss": _finite_or_none(best_ckpt.get("val_loss"))},
        processes=w.size if w.distributed else None,
        **dataclasses.asdict(labels),
    )
    run.write_summary(summary.to_json())
    return summary


def _fit(task: Task, model: torch.nn.Module, train_cfg: TrainConfig, run: RunDir, strategy: Strategy, *,
         model_config: dict[str, object], extra_config: dict[str, object] | None, resume: bool, overwrite: bool,
         log: Callable[[MetricsRow], None], parts: tuple[str, ...], labels: SummaryLabels) -> RunSummary:
    """:func:`fit`'s training, without the run folder's figures and loggers: open the run, restore, then per
    epoch train, validate, select and checkpoint; at the end score the best state."""
    metric, higher = task.metric, HIGHER_IS_BETTER[task.metric]
    opt = Optimisation.build(model, train_cfg, strategy.precision)
    config = _run_config(task, train_cfg, model_config, extra_config)
    # Only the main process reads and writes the run folder; every process resumes from its checkpoint,
    # whatever the number of processes that wrote it.
    ckpt = strategy.from_main(open_run, run, config, resume, overwrite)
    sel = _restore(ckpt, model, opt)
    strategy.setup(model)

    epoch = sel.start - 1
    stopped_early = sel.start > 0 and sel.bad_epochs >= train_cfg.patience
    # A resumed run that had already stopped early trains no further epoch.
    for epoch in range(sel.start, sel.start if stopped_early else train_cfg.epochs):
        t_epoch = time.perf_counter()
        stats = _train_epoch(task, model, strategy, opt, train_cfg, run, epoch)
        # Scored once (the full split, fixed batches), the same values everywhere: every process selects
        # and stops alike.
        val, val_loss = strategy.from_main(score_and_loss, task, model, "val", train_cfg.precision, train_cfg.device)
        if sel.update(val, val_loss, epoch, higher):
            strategy.on_main(_save_best, run, model, epoch, val, val_loss, config)
        stopped_early = sel.bad_epochs >= train_cfg.patience
        row = _epoch_row(epoch, stats, metric, val, val_loss, sel.best_epoch, t_epoch)
        strategy.on_main(_end_epoch, run, epoch, row, model, opt, sel, config, log)
        if stopped_early:
            break
    return strategy.from_main(_summarize, task, model, run, train_cfg, parts, epoch + 1, stopped_early, strategy.world,
                              labels)


def train_task(task: Task, model_cfg: ModelConfig, train_cfg: TrainConfig, run_dir: RunDir | str | os.PathLike,
               **fit_options: Any) -> RunSummary:
    """Seed, build :class:`XMaskNet` from ``model_cfg`` and train it on ``task`` with :func:`fit`.

    ``fit_options``: :func:`fit`'s keywords but ``model_config`` (``extra_config``, ``resume``, ``overwrite``,
    ``log``, ``parts``, ``labels``).

    Raises:
        ValueError: ``model_cfg`` does not fit a task that states its
            ``(model_task, in_dim, out_dim)``, or anything :func:`fit` raises.
    """
    if task.model_task is not None:
        want = (task.model_task, task.in_dim, task.out_dim)
        got = (model_cfg.task, model_cfg.in_dim, model_cfg.out_dim)
        if want != got:
            raise ValueError(f"model config (task, in_dim, out_dim) = {got}, the task needs {want}")
    seed_everything(train_cfg.seed)
    model = XMaskNet(model_cfg).to(task.device)
    return fit(task, model, train_cfg, run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir),
               model_config=model_cfg.to_dict(), **fit_options)
