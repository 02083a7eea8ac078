"""One trial of ``xmask tune``: draw a configuration, train it on the search seeds, score validation.

The training is :func:`~xmask_cli.engine.runs.sweep.train_seeds`, the code behind
``xmask train``, with ``parts=("train", "val")``: the best epoch of each seed is
chosen on validation as in ``train``, and test is never scored. The trial's value
is the mean validation metric over the seeds (with ``--folds F``: over the inner
holdouts of the first F outer folds of every seed); the best trial is chosen by
:func:`best_trial` (ties broken by the mean validation loss, as epochs are).

Intermediate values: the runs of a trial (its seeds, each seed's folds) train one
after the other, and run ``i`` owns the steps ``i * stride`` to ``i * stride + stride - 1``
(``stride``: the largest epoch budget a trial of the study can have, :func:`epoch_stride`).
After every epoch of run ``i`` the trial reports, at step ``i * stride + epoch``, the mean over
runs ``0..i`` of each run's best validation score so far (finished runs at their best): a running
estimate of the trial's value that ends at it. Optuna's dashboard plots these as one curve
over the trial's runs, and the pruner compares trials at the same step, that is on the same
seeds up to the same epoch.
"""
from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmask_cli.config import Config
from xmask_cli.engine.runs.data import DatasetMemo
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.engine.scoring.metrics import HIGHER_IS_BETTER
from xmask_cli.engine.training import selection
from xmask_cli.errors import CacheError, DataNotFoundError, NotWritableError, first_line
from xmask_cli.tune.space import Param, suggest, with_values

if TYPE_CHECKING:  # optuna loads when a study runs
    import optuna
    from optuna.trial import FrozenTrial

__all__ = ["SEARCH_PARTS", "TrialFailed", "TrialSetup", "run_trial", "trial_config", "best_trial", "trial_value",
           "epoch_stride"]

#: What a search scores: never test.
SEARCH_PARTS = ("train", "val")
#: Errors that no other configuration would escape: they stop the study instead of failing each trial.
STUDY_ERRORS = (DataNotFoundError, CacheError, NotWritableError)


class TrialFailed(Exception):
    """A trial that could not produce a value; ``str()`` is the reason recorded with it."""


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of one study shares (the study's resolved preset and training options)."""

    cfg: Config
    params: list[Param]
    seeds: list[int]
    metric: str
    study_dir: Path
    device: str = "cpu"
    cache_dir: Path = Path("cache")
    data_root: str | os.PathLike | None = None
    offline: bool | None = None
    folds: int = 0  # > 0: train the first F outer folds of data.folds per seed, score their inner holdouts
    stride: int = 0  # steps per run (its epochs); 0: the config's train.epochs (see epoch_stride)
    # The dataset read by the first trial, reused by the others (and the final runs)
    datasets: DatasetMemo = field(default_factory=DatasetMemo, compare=False, repr=False)


def epoch_stride(cfg: Config, params: list[Param]) -> int:
    """The steps each run of a trial owns: the largest ``train.epochs`` a trial can draw (the preset's when the
    space does not search it), so every trial of a study numbers its runs' epochs alike."""
    budgets = [int(cfg.train.epochs)]
    for p in params:
        if p.key == "train.epochs":
            budgets += [int(c) for c in p.choices] if p.kind == "choice" else [int(p.high or 0)]
    return max(1, *budgets)


def trial_config(setup: TrialSetup, values: dict[str, Any], number: int) -> Config:
    """The preset with the trial's values, writing its runs to ``<study>/trials/trial-<number>/<seed>/``.

    Raises:
        ConfigError: the values do not fit together (e.g. ``model.hidden`` not a multiple of ``model.heads``).
    """
    return with_values(setup.cfg, values, run={"root": str(setup.study_dir / "trials"), "name": f"trial-{number:04d}"})


def run_trial(trial: optuna.Trial, setup: TrialSetup, *, log: Callable[[str], None] = lambda m: None,
              prune: bool = True) -> float:
    """Draw the trial's values, train them on ``setup.seeds`` and return the mean validation metric.

    Records on the trial (user attributes): ``values`` (the drawn configuration),
    ``val_values`` / ``val_std`` (per seed, population std), ``train_mean``,
    ``best_epochs``, ``run_root`` and ``epoch_s`` (median wall seconds of its epochs, pruned trials too).

    Raises:
        optuna.TrialPruned: the pruner stopped it (its last report is the value Optuna keeps).
        TrialFailed: the configuration does not fit, training diverged, ran out of
            memory or raised; the message is the reason.
        DataNotFoundError, CacheError, NotWritableError: problems no configuration escapes.
    """
    import optuna

    values = suggest(trial, setup.params)
    trial.set_user_attr("values", values)
    try:
        cfg = trial_config(setup, values, trial.number)
    except Exception as exc:  # values that do not fit together: this trial fails, the study goes on
        raise TrialFailed(f"configuration rejected: {first_line(exc)}") from None
    report = _Reporter(trial, setup, prune)
    try:
        result = train_seeds(cfg, setup.seeds, device=setup.device, cache_dir=setup.cache_dir,
                             data_root=setup.data_root, offline=setup.offline, overwrite=True,
                             parts=SEARCH_PARTS, on_epoch=report.on_epoch, on_seed_start=report.on_seed_start, log=log,
                             max_folds=setup.folds or None, datasets=setup.datasets)
    except (optuna.TrialPruned, KeyboardInterrupt, *STUDY_ERRORS):
        raise
    except Exception as exc:  # out of memory, divergence, a bug in one corner of the space: record and go on
        _release_memory(setup.device)
        raise TrialFailed(f"{type(exc).__name__}: {first_line(exc)}") from None
    finally:
        _drop_checkpoints(setup.study_dir / "trials" / f"trial-{trial.number:04d}")
        if report.epoch_s:  # the trial's cost beside its score (pruned trials too): median seconds an epoch
            trial.set_user_attr("epoch_s", statistics.median(report.epoch_s))
    if result.aggregate is None:  # only a distributed run's other ranks have no aggregate; tune runs one process
        raise TrialFailed("the sweep returned no aggregate")
    val = result.aggregate["val"]
    if not all(math.isfinite(v) for v in val.values):
        raise TrialFailed(f"validation {setup.metric} is not finite on some seed: {list(val.values)}")
    trial.set_user_attr("val_values", list(val.values))
    trial.set_user_attr("val_std", val.std)
    # What breaks ties between trials (selection.TRIAL_RULE): each seed's validation loss at its kept epoch.
    losses = [(r.selection or {}).get("val_loss") for r in result.runs]
    known = [float(v) for v in losses if v is not None]
    trial.set_user_attr("val_loss_mean", sum(known) / len(known) if known and len(known) == len(losses) else None)
    trial.set_user_attr("train_mean", result.aggregate["train"].mean)
    trial.set_user_attr("best_epochs", [r.best_epoch for r in result.runs])
    trial.set_user_attr("run_root", result.run_root)
    return float(val.mean)


class _Reporter:
    """Reports a trial's running value per epoch (see the module's docstring) and asks the pruner."""

    def __init__(self, trial: optuna.Trial, setup: TrialSetup, prune: bool) -> None:
        self.trial, self.prune = trial, prune
        self.stride = setup.stride or epoch_stride(setup.cfg, setup.params)
        self.key, self.higher = f"val_{setup.metric}", HIGHER_IS_BETTER[setup.metric]
        self.best: dict[int, float] = {}  # run position -> its best validation score so far
        self.run = -1  # the position of the run (a seed, or a seed's fold) whose epochs arrive
        self.epoch_s: list[float] = []  # each epoch's wall time (training pass and validation)

    def on_seed_start(self, seed: int, epochs: int) -> None:
        self.run += 1  # train_seeds starts its runs one after the other, in order

    def on_epoch(self, seed: int, row: dict[str, Any]) -> None:
        import optuna

        i, epoch, v = self.run, int(row["epoch"]), float(row[self.key])
        if isinstance(row.get("epoch_s"), (int, float)):
            self.epoch_s.append(float(row["epoch_s"]))
        if math.isfinite(v) and (i not in self.best or (v > self.best[i] if self.higher else v < self.best[i])):
            self.best[i] = v
        if i not in self.best or not 0 <= epoch < self.stride:
            return
        running = sum(self.best.values()) / len(self.best)
        self.trial.report(running, i * self.stride + epoch)
        if self.prune and self.trial.should_prune():
            raise optuna.TrialPruned(f"pruned at seed {seed}, epoch {epoch} (running mean val {running:.4f})")


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The study's best complete trial under :data:`~xmask_cli.engine.training.selection.TRIAL_RULE`: the best value
    (the mean validation metric), ties broken by the lower mean validation loss, then the earlier trial.

    Optuna's own ``study.best_trial`` keeps the first of equal values; on small validation sets values tie
    often, and the loss tells such trials apart as it does epochs within a run. None without complete trials.
    """
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    higher = study.direction == StudyDirection.MAXIMIZE
    best: FrozenTrial | None = None
    for t in sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number):
        if best is None:
            best = t
            continue
        why = selection.compare(trial_value(t), t.user_attrs.get("val_loss_mean"), trial_value(best),
                                best.user_attrs.get("val_loss_mean"), higher)
        if why in ("metric", "loss"):  # a full tie keeps the earlier trial
            best = t
    return best


def trial_value(trial: FrozenTrial) -> float:
    """A complete trial's value (Optuna's ``FrozenTrial.value``, typed optional: None until it completes).

    Raises:
        ValueError: the trial has no value (it did not complete).
    """
    if trial.value is None:
        raise ValueError(f"trial {trial.number} has no value: it is {trial.state.name.lower()}")
    return float(trial.value)


def _drop_checkpoints(root: Path) -> None:
    # A trial never resumes (a new attempt is a new trial): its checkpoints only take disk space.
    # config.json, metrics.jsonl and summary.json stay as the trial's record.
    if root.is_dir():
        for seed_dir in (p for p in root.iterdir() if p.is_dir()):
            for name in (RunDir.LAST, RunDir.BEST):
                (seed_dir / name).unlink(missing_ok=True)


def _release_memory(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
