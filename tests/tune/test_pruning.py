"""The median pruner over a trial's runs: a warm-up in every run, the median of completed trials at the same step."""
from __future__ import annotations

import statistics

import optuna

from xmask_cli.tune.pruning import PRUNE_STARTUP_TRIALS, RunMedianPruner, make_pruner

STRIDE = 40  # steps per run: two runs (seeds) of up to 40 epochs


def _study(finished: list[float], direction: str = "maximize") -> optuna.Study:
    """Completed trials each reporting one flat value on every step of two runs."""
    study = optuna.create_study(direction=direction, pruner=make_pruner("median", stride=STRIDE, warmup_epochs=20))
    for v in finished:
        t = study.ask()
        for step in range(2 * STRIDE):
            t.report(v, step)
        study.tell(t, v)
    return study


def test_no_pruning_in_any_runs_warmup_then_the_median_rule():
    study = _study([0.8] * PRUNE_STARTUP_TRIALS)
    low = study.ask()
    verdicts = {}
    for step in (0, 19, 20, STRIDE, STRIDE + 19, STRIDE + 20):
        low.report(0.1, step)
        verdicts[step] = low.should_prune()
    assert verdicts == {0: False, 19: False, 20: True, STRIDE: False, STRIDE + 19: False, STRIDE + 20: True}
    assert isinstance(make_pruner("none", stride=STRIDE), optuna.pruners.NopPruner)


def test_no_pruning_before_enough_completed_trials():
    study = _study([0.8] * (PRUNE_STARTUP_TRIALS - 1))
    low = study.ask()
    low.report(0.1, 30)
    assert not low.should_prune()


def test_the_value_at_the_step_is_compared_not_the_trials_best_over_earlier_runs():
    """A trial whose first run was good and whose second is below the median at its step is pruned there
    (Optuna's MedianPruner would compare the trial's best over all steps: 0.99 from the first run)."""
    finished = [0.5, 0.6, 0.7, 0.8, 0.9]
    study = _study(finished)
    t = study.ask()
    t.report(0.99, 25)  # run 0, epoch 25: above every finished trial
    assert not t.should_prune()
    median = statistics.median(finished)
    t.report(median - 0.01, STRIDE + 25)  # run 1, epoch 25: just below the median there
    assert t.should_prune()
    again = study.ask()
    again.report(median + 0.01, STRIDE + 25)
    assert not again.should_prune()


def test_minimize_prunes_above_the_median_and_steps_no_one_reported_never_prune():
    study = _study([1.0, 2.0, 3.0, 4.0, 5.0], direction="minimize")
    t = study.ask()
    t.report(3.5, 30)
    assert t.should_prune()
    t2 = study.ask()
    t2.report(2.5, 30)
    assert not t2.should_prune()
    t3 = study.ask()
    t3.report(99.0, 5 * STRIDE + 30)  # a step no completed trial has: nothing to compare with
    assert not t3.should_prune()
    assert RunMedianPruner(STRIDE, 20).stride == STRIDE
