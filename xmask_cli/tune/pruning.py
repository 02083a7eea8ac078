"""The pruners of ``xmask tune``: ``median`` (the default) and ``none``.

A trial reports, at step ``run * stride + epoch``, the running mean of its runs' best validation scores
(:mod:`xmask_cli.tune.objective`). The median pruner stops a trial whose value at its last step is worse
than the median of the completed trials' values at that same step: the same seeds, up to the same epoch.
It waits for :data:`PRUNE_STARTUP_TRIALS` completed trials and, in every run, for its first
``warmup_epochs`` epochs: a run slow to start is not a bad run. Optuna's ``MedianPruner`` counts its
warm-up from the first step only and compares the trial's best value over all steps, which across runs
would mix one seed's best with another seed's median.
"""
from __future__ import annotations

import math
import statistics

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

__all__ = ["PRUNERS", "PRUNE_STARTUP_TRIALS", "PRUNE_WARMUP_EPOCHS", "RunMedianPruner", "make_pruner"]

PRUNERS = ("median", "none")
#: No pruning before this many completed trials, nor in each run's first epochs: at least this many, and the
#: preset's ``train.patience`` when longer (see :func:`xmask_cli.tune.study.run_study`).
PRUNE_STARTUP_TRIALS = 5
PRUNE_WARMUP_EPOCHS = 10


class RunMedianPruner(optuna.pruners.BasePruner):
    """Median rule at the trial's last step, with a warm-up of ``warmup_epochs`` in every run of ``stride`` steps."""

    def __init__(self, stride: int, warmup_epochs: int, startup_trials: int = PRUNE_STARTUP_TRIALS) -> None:
        self.stride, self.warmup_epochs, self.startup_trials = max(1, int(stride)), warmup_epochs, startup_trials

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step % self.stride < self.warmup_epochs:
            return False
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(done) < self.startup_trials:
            return False
        others = [float(t.intermediate_values[step]) for t in done if step in t.intermediate_values]
        others = [v for v in others if math.isfinite(v)]
        value = float(trial.intermediate_values[step])
        if not others or not math.isfinite(value):
            return False
        median = statistics.median(others)
        return value < median if study.direction == StudyDirection.MAXIMIZE else value > median


def make_pruner(name: str, *, stride: int, warmup_epochs: int = PRUNE_WARMUP_EPOCHS) -> optuna.pruners.BasePruner:
    """``median`` (:class:`RunMedianPruner` over runs of ``stride`` steps) or ``none``."""
    if name == "none":
        return optuna.pruners.NopPruner()
    return RunMedianPruner(stride, max(0, int(warmup_epochs)))
