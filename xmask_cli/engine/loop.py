"""The one training loop every task level shares.

A :class:`Task` knows its data (batches, loss, metric); :func:`fit` knows
optimisation, validation-only selection, checkpoints and resume. Node,
link, edge and graph tasks differ only in their :class:`Task`.

Selection reads validation only (the metric, ties broken by the loss): the best epoch, early stopping
and the state restored at the end. The test metric is computed once, on that
restored state, and only reported.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor

from xmask_cli.engine import distributed, selection
from xmask_cli.engine.metrics import HIGHER_IS_BETTER
from xmask_cli.engine.precision import autocast, check_precision, grad_scaler
from xmask_cli.engine.resume import check_resumable, rng_state, set_rng_state
from xmask_cli.engine.runs import RunDir
from xmask_cli.engine.splits import PARTS
from xmask_cli.engine.train_config import TrainConfig  # re-exported: loop.TrainConfig is its long-standing path
from xmask_cli.engine.watch import RunWatch
from xmask_cli.errors import DivergedError, UsageError
from xmask_cli.jsonfile import parse_checked
from xmask_cli.model.network import XMaskNet

if TYPE_CHECKING:
    from xmask_cli.model.network import ModelConfig

__all__ = ["TrainConfig", "Task", "fit", "train_task", "seed_everything", "PARTS"]



class Task(Protocol):
    """What :func:`fit` needs from a task level.

    Attributes:
        metric: name in :data:`xmask_cli.engine.metrics.METRICS` used for selection.
    """

    metric: str

    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the data side (dataset, split, ...): saved, and compared on resume."""

    def split_sizes(self) -> dict[str, int]:
        """Number of scored items (nodes, graphs, pairs) per part."""

    def train_batches(self, epoch: int) -> Iterable[Any]:
        """The training batches of ``epoch``; a function of (seed, epoch) only, so resume is exact."""

    def loss(self, model: torch.nn.Module, batch: Any) -> tuple[Tensor, int]:
        """Mean loss of ``batch`` (on the task's device) and how many items it averaged."""

    def score(self, model: torch.nn.Module, part: str) -> float:
        """``metric`` on ``part`` (``train``/``val``/``test``); called in eval mode under ``no_grad``."""


def seed_everything(seed: int) -> None:
    """Seed torch (all devices) and numpy's global generator."""
    torch.manual_seed(seed)
    np.random.seed(seed)


def _warmup(warmup_epochs: int) -> Callable[[int], float]:
    """LambdaLR factor: linear from ``1/warmup`` to 1 over ``warmup`` epochs, then 1."""
    def factor(epoch: int) -> float:
        return 1.0 if warmup_epochs <= 0 else min(1.0, (epoch + 1) / warmup_epochs)
    return factor


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
    """``(metric, mean loss)`` on ``part`` from one pass (``task.evaluate``); the loss is NaN for a task
    without ``evaluate`` (selection then breaks metric ties by the later epoch)."""
    model.eval()
    with autocast(precision, device):
        if hasattr(task, "evaluate"):
            val, loss = task.evaluate(model, part)
            return float(val), float(loss)
        return float(task.score(model, part)), float("nan")


def timed_batches(batches: Iterable[Any], waited: list[float]) -> Iterable[Any]:
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


def fit(
    task: Task,
    model: torch.nn.Module,
    train_cfg: TrainConfig,
    run_dir: RunDir | str,
    *,
    model_config: dict[str, Any],
    extra_config: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[dict[str, Any]], None] = lambda m: None,
    parts: tuple[str, ...] = PARTS,
) -> dict[str, Any]:
    """Train ``model`` on ``task``; returns (and writes) the run summary.

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
    if not distributed.world().main:  # only rank 0 writes the run folder
        return _fit(task, model, train_cfg, run, model_config=model_config, extra_config=extra_config,
                    resume=resume, overwrite=overwrite, log=log, parts=parts)
    watch = RunWatch(run, train_cfg.loggers)

    def logged(row: dict[str, Any]) -> None:
        watch.epoch(row)
        log(row)

    try:
        summary = _fit(task, model, train_cfg, run, model_config=model_config, extra_config=extra_config,
                       resume=resume, overwrite=overwrite, log=logged, parts=parts)
    except BaseException:
        with contextlib.suppress(Exception):  # the figure is a courtesy: never mask the real error
            watch.close()
        raise
    watch.close(summary)
    return summary


#: Parameter-name prefixes of the first layer (``train.decay: first``): the input encoder and the first block.
FIRST_LAYER = ("encoder.", "blocks.0.")


def decay_groups(model: torch.nn.Module, decay: str, weight_decay: float) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: ``weight_decay`` on the parameters ``decay`` names, 0 on the others.

    ``all``: every parameter; ``first``: the input encoder and the first block (PyG's GCN example decays
    its first layer only); ``weights``: every parameter but biases and LayerNorm parameters.
    """
    if decay == "all":
        return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    norms = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    decayed: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if decay == "first":
            chosen = name.startswith(FIRST_LAYER)
        elif decay == "weights":
            chosen = not name.endswith(".bias") and id(p) not in norms
        else:
            raise UsageError(f"train.decay must be one of all, first, weights, got {decay!r}")
        (decayed if chosen else rest).append(p)
    if not decayed:
        raise UsageError(f"train.decay={decay} chooses no parameter of this model; use train.decay=all")
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@dataclass
class _Optimisation:
    """Adam / AdamW, the warm-up schedule and (fp16) the gradient scaler of one run."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: Any

    @classmethod
    def build(cls, model: torch.nn.Module, cfg: TrainConfig) -> _Optimisation:
        optimizer: torch.optim.Optimizer
        if cfg.optimizer == "adamw" and cfg.decay == "all":
            optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        else:
            groups = decay_groups(model, cfg.decay, cfg.weight_decay)
            if cfg.optimizer == "adam":  # weight_decay as an L2 penalty: weight_decay * w added to the gradient
                optimizer = torch.optim.Adam(groups, lr=cfg.lr)
            elif cfg.optimizer == "adamw":
                optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
            else:
                raise UsageError(f"train.optimizer must be adamw or adam, got {cfg.optimizer!r}")
        return cls(optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup(cfg.warmup_epochs)),
                   grad_scaler(cfg.precision, cfg.device))

    def state(self) -> dict[str, Any]:
        """What ``last.pt`` keeps of them."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {})}

    def load(self, ckpt: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and "scaler" in ckpt:
            self.scaler.load_state_dict(ckpt["scaler"])

    def step(self) -> None:
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()


@dataclass
class _EpochStats:
    """One epoch's training pass: mean loss, learning rate, skipped batches, seconds training and waiting."""

    loss: float
    lr: float
    skipped: int
    train_s: float
    waited_s: float


def _run_config(task: Task, train_cfg: TrainConfig, model_config: dict[str, Any],
                extra_config: dict[str, Any] | None) -> dict[str, Any]:
    """The ``config.json`` of the run (and what ``--resume`` compares)."""
    return {**(extra_config or {}), **task.describe(), "metric": task.metric, "model": model_config,
            "train": train_cfg.to_dict()}


def _open_run(run: RunDir, config: dict[str, Any], resume: bool, overwrite: bool) -> dict[str, Any] | None:
    """Prepare the run folder (rank 0): ``last.pt`` to resume from, or a fresh folder holding ``config.json``.

    Raises:
        UsageError: the folder holds a run and neither ``resume`` nor ``overwrite`` is given, or ``resume``
            finds another config.
    """
    now = json.loads(json.dumps(config))  # JSON round trip so tuples compare equal to the lists read back
    if resume and run.has_checkpoint(RunDir.LAST):
        ckpt = run.load_checkpoint(RunDir.LAST)
        # The config the checkpoint was trained with (older checkpoints: config.json).
        saved = (parse_checked(ckpt["config"], f"the config saved in {run.path / RunDir.LAST}")
                 if isinstance(ckpt.get("config"), str) else run.load_config())
        check_resumable(run, saved, now)
        run.truncate_metrics(ckpt["epoch"] + 1)
        run.save_config(config)  # the same run; only the epoch budget may have changed
        return ckpt
    if run.has_run_files():
        if resume and (run.path / RunDir.CONFIG).is_file():
            # Killed before its first checkpoint: start over, but only as the same run.
            check_resumable(run, run.load_config(), now)
        elif not (resume or overwrite):
            raise UsageError(f"run folder {run.path} exists; use --resume to continue it or --overwrite to replace it")
        run.remove_run_files()
    run.save_config(config)
    return None


def _restore(ckpt: dict[str, Any] | None, model: torch.nn.Module, opt: _Optimisation) -> selection.Selection:
    """Model, optimisation and RNG states from ``last.pt`` (nothing for a fresh run); where selection stood."""
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load(ckpt)
        set_rng_state(ckpt["rng"])
    return selection.Selection.from_checkpoint(ckpt)


def _batches(task: Task, epoch: int, seed: int, ddp: torch.nn.Module | None,
             w: distributed.World) -> Iterable[tuple[Any, bool]]:
    """``(batch, real)`` of ``epoch``: the task's batches, or under DDP this rank's share (padding not real)."""
    if ddp is None:
        return ((b, True) for b in task.train_batches(epoch))
    torch.manual_seed(distributed.epoch_seed(seed, epoch, w.rank))
    return distributed.shard_batches(task, epoch, w)


def _backward(task: Task, model: torch.nn.Module, ddp: torch.nn.Module | None, batch: Any, real: bool,
              opt: _Optimisation, cfg: TrainConfig, w: distributed.World,
              comm_device: torch.device) -> tuple[Tensor, int, str | None]:
    """Loss and gradients of one batch, clipped: ``(loss, items, what was non-finite or None)``."""
    if ddp is None:
        with autocast(cfg.precision, cfg.device):
            loss, n = task.loss(model, batch)
        bad = "loss" if not bool(torch.isfinite(loss.detach()).all()) else None
        if bad is None:
            (loss if opt.scaler is None else opt.scaler.scale(loss)).backward()
    else:
        loss, n, bad = _ddp_backward(ddp, task, batch, real, w, comm_device, cfg.precision, cfg.device, opt.scaler)
        n = n if real else 0
    if bad is None:
        if opt.scaler is not None:
            opt.scaler.unscale_(opt.optimizer)  # clip the true gradients
        if cfg.clip_norm > 0:
            # Under DDP the gradients are already averaged: every rank clips the same norm.
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            bad = "gradient norm" if not bool(torch.isfinite(norm)) else None
        if bad is not None and opt.scaler is not None:
            # fp16 overflow: the scaler skips this step and lowers its scale, as it is meant to.
            bad = None
    return loss, n, bad


def _diverged(run: RunDir, bad: str, epoch: int, batch: int, lr: float) -> DivergedError:
    best_path = run.path / RunDir.BEST
    kept = f"best checkpoint so far: {best_path}" if best_path.is_file() else "no checkpoint yet"
    return DivergedError(f"training diverged: non-finite {bad} at epoch {epoch}, batch {batch} (lr {lr:g}); "
                         f"lower train.lr, or set train.skip_nonfinite=true to skip such batches; {kept}")


def _train_epoch(task: Task, model: torch.nn.Module, ddp: torch.nn.Module | None, opt: _Optimisation,
                 cfg: TrainConfig, run: RunDir, epoch: int, w: distributed.World,
                 comm_device: torch.device) -> _EpochStats:
    """One pass over the epoch's batches, then the scheduler's step.

    Raises:
        DivergedError: a non-finite loss or gradient norm, unless ``cfg.skip_nonfinite``.
    """
    model.train()
    total, count, skipped = 0.0, 0, 0
    lr = opt.optimizer.param_groups[0]["lr"]
    waited = [0.0]
    t0 = time.perf_counter()
    for i, (batch, real) in enumerate(timed_batches(_batches(task, epoch, cfg.seed, ddp, w), waited)):
        opt.optimizer.zero_grad(set_to_none=True)
        loss, n, bad = _backward(task, model, ddp, batch, real, opt, cfg, w, comm_device)
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
    if ddp is not None:  # the epoch's loss over every rank's items
        total, count = _collective(w, lambda: distributed.all_sum([total, count], comm_device))
        count = int(count)
    return _EpochStats(total / max(count, 1), lr, skipped, train_s, waited[0])


def _validate(task: Task, model: torch.nn.Module, cfg: TrainConfig, w: distributed.World,
              comm_device: torch.device) -> tuple[float, float]:
    """``(val metric, val loss)``: scored on rank 0 only (the full split, fixed batches), every rank takes
    its values, so best epoch and early stopping are decided alike everywhere."""
    val, val_loss = score_and_loss(task, model, "val", cfg.precision, cfg.device) if w.main else (None, None)
    if w.distributed:
        val, val_loss = _collective(w, lambda: distributed.broadcast((val, val_loss), comm_device))
    return val, val_loss


def _epoch_row(epoch: int, stats: _EpochStats, metric: str, val: float, val_loss: float | None, best_epoch: int,
               t_epoch: float) -> dict[str, Any]:
    """The epoch's line of ``metrics.jsonl``."""
    row = {"epoch": epoch, "loss": stats.loss, "lr": stats.lr, f"val_{metric}": val,
           "val_loss": _finite_or_none(val_loss), "best_epoch": best_epoch, "train_s": round(stats.train_s, 4),
           "epoch_s": round(time.perf_counter() - t_epoch, 4),  # training pass + validation
           "input_stall": round(stats.waited_s / stats.train_s, 4) if stats.train_s > 0 else 0.0}
    if stats.skipped:
        row["skipped_batches"] = stats.skipped
    return row


def _save_last(run: RunDir, model: torch.nn.Module, opt: _Optimisation, sel: selection.Selection, epoch: int,
               config: dict[str, Any]) -> None:
    """``last.pt``: everything ``--resume`` needs to go on as if never stopped."""
    # RNG states after the epoch: the next one (dropout) draws exactly what it would have uninterrupted.
    run.save_checkpoint({
        "model": _cpu_state(model), **opt.state(), "rng": rng_state(), "epoch": epoch, **sel.state(),
        "config": json.dumps(config, sort_keys=True),  # resume compares against this, not config.json
    }, RunDir.LAST)


def _summarize(task: Task, model: torch.nn.Module, run: RunDir, cfg: TrainConfig, parts: tuple[str, ...],
               epochs_run: int, stopped_early: bool, w: distributed.World) -> dict[str, Any]:
    """Restore the best state by validation (whatever ended the run), score ``parts`` on it, write the summary."""
    best_ckpt = run.load_checkpoint(RunDir.BEST)
    model.load_state_dict(best_ckpt["model"])
    metric = task.metric
    metrics = {part: score(task, model, part, cfg.precision, cfg.device) for part in PARTS if part in parts}
    summary = {
        "dataset": task.describe().get("dataset"), "metric": metric, "seed": cfg.seed,
        "best_epoch": int(best_ckpt["epoch"]), "epochs_run": epochs_run, "stopped_early": bool(stopped_early),
        "split": {**{k: v for k, v in (task.describe().get("split") or {}).items() if k in ("name", "seed")},
                  **task.split_sizes()},
        "metrics": metrics,
        # The rule that chose best_epoch, and the two values it read there.
        "selection": {"rule": selection.RULE, f"val_{metric}": best_ckpt.get("val"),
                      "val_loss": _finite_or_none(best_ckpt.get("val_loss"))},
    }
    if w.distributed:
        summary["processes"] = w.size
    run.write_summary(summary)
    return summary


def _fit(task: Task, model: torch.nn.Module, train_cfg: TrainConfig, run: RunDir, *, model_config: dict[str, Any],
         extra_config: dict[str, Any] | None, resume: bool, overwrite: bool,
         log: Callable[[dict[str, Any]], None], parts: tuple[str, ...]) -> dict[str, Any]:
    """:func:`fit`'s training, without the run folder's figures and loggers: open the run, restore, then per
    epoch train, validate, select and checkpoint; at the end score the best state."""
    if train_cfg.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {train_cfg.epochs}")
    check_precision(train_cfg.precision, train_cfg.device)
    if "val" not in parts or not set(parts) <= set(PARTS):
        raise ValueError(f"parts must include 'val' and lie in {PARTS}, got {parts}")
    metric, higher = task.metric, HIGHER_IS_BETTER[task.metric]
    opt = _Optimisation.build(model, train_cfg)
    config = _run_config(task, train_cfg, model_config, extra_config)

    w = distributed.world()
    comm_device = next(iter(model.parameters()), torch.empty(0)).device  # where collectives put their tensors
    ckpt = _open_run(run, config, resume, overwrite) if w.main else None  # only rank 0 reads and writes the run folder
    if w.distributed:
        # Every rank resumes from rank 0's checkpoint, whatever the number of ranks that wrote it.
        ckpt = _collective(w, lambda: distributed.broadcast(ckpt, comm_device))
    sel = _restore(ckpt, model, opt)
    ddp = _collective(w, lambda: distributed.wrap(model, comm_device)) if w.distributed else None

    epoch = sel.start - 1
    stopped_early = sel.start > 0 and sel.bad_epochs >= train_cfg.patience
    # A resumed run that had already stopped early trains no further epoch.
    for epoch in range(sel.start, sel.start if stopped_early else train_cfg.epochs):
        t_epoch = time.perf_counter()
        stats = _train_epoch(task, model, ddp, opt, train_cfg, run, epoch, w, comm_device)
        val, val_loss = _validate(task, model, train_cfg, w, comm_device)
        if sel.update(val, val_loss, epoch, higher) and w.main:
            run.save_checkpoint({"model": _cpu_state(model), "epoch": epoch, "val": val, "val_loss": val_loss},
                                RunDir.BEST)
        stopped_early = sel.bad_epochs >= train_cfg.patience
        if not w.main:  # no files here; the same broadcast values stop every rank at the same epoch
            if stopped_early:
                break
            continue
        row = _epoch_row(epoch, stats, metric, val, val_loss, sel.best_epoch, t_epoch)
        run.append_metrics(row)
        _save_last(run, model, opt, sel, epoch, config)
        log(row)
        if stopped_early:
            break

    if not w.main:  # rank 0 scores and writes; the others return its summary
        return _collective(w, lambda: distributed.broadcast(None, comm_device))
    summary = _summarize(task, model, run, train_cfg, parts, epoch + 1, stopped_early, w)
    if w.distributed:
        distributed.broadcast(summary, comm_device)
    return summary


def _collective(w: distributed.World, fn: Callable[[], Any]) -> Any:
    """Run a collective; a dead or stuck peer becomes one clear :class:`~xmask_cli.engine.distributed.PeerFailedError`."""
    try:
        return fn()
    except (RuntimeError, ValueError) as exc:  # gloo/NCCL report a lost peer or a timeout as RuntimeError
        raise distributed.peer_failed(exc, w) from exc


def _ddp_backward(ddp: torch.nn.Module, task: Task, batch: Any, real: bool, w: distributed.World,
                  comm_device: torch.device, precision: str = "fp32", device: str = "cpu",
                  scaler: Any = None) -> tuple[Tensor, int, str | None]:
    """One rank's share of a global step: loss, backward through DDP, weighted to the step's item mean.

    Returns the rank's mean loss, its item count and ``"loss"`` when any rank's
    loss is non-finite (every rank then sees the same flag and acts alike).
    """
    with autocast(precision, device):
        loss, n = ddp(lambda net: task.loss(net, batch))
    weight = float(n) if real else 0.0
    finite = bool(torch.isfinite(loss.detach()).all())
    items, bad_ranks = _collective(w, lambda: distributed.all_sum([weight, 0.0 if finite else 1.0], comm_device))
    # DDP averages over ranks: scaled by size * n / N, the average is the mean over the step's N items.
    scale = w.size * weight / items if items > 0 and bad_ranks == 0 else 0.0
    weighted = torch.nan_to_num(loss) * scale
    # Always a backward (DDP expects one per forward); a zero scale trains nothing.
    _collective(w, lambda: (weighted if scaler is None else scaler.scale(weighted)).backward())
    return loss, int(n), ("loss" if bad_ranks else None)


def train_task(task: Any, model_cfg: ModelConfig, train_cfg: TrainConfig, run_dir: RunDir | str | os.PathLike,
               **fit_options: Any) -> dict[str, Any]:
    """Seed, build :class:`XMaskNet` from ``model_cfg`` and train it on ``task`` with :func:`fit`.

    ``fit_options``: :func:`fit`'s keywords but ``model_config`` (``extra_config``, ``resume``, ``overwrite``,
    ``log``, ``parts``).

    Raises:
        ValueError: ``model_cfg`` does not fit a task that states its
            ``(model_task, in_dim, out_dim)``, or anything :func:`fit` raises.
    """
    if hasattr(task, "model_task"):
        want = (task.model_task, task.in_dim, task.out_dim)
        got = (model_cfg.task, model_cfg.in_dim, model_cfg.out_dim)
        if want != got:
            raise ValueError(f"model config (task, in_dim, out_dim) = {got}, the task needs {want}")
    seed_everything(train_cfg.seed)
    model = XMaskNet(model_cfg).to(task.device)
    return fit(task, model, train_cfg, run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir),
               model_config=model_cfg.to_dict(), **fit_options)
