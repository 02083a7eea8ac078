"""The search loop: each trial's end recorded (value, pruned, failed with its reason, Ctrl-C), the sampler seeded by
trial number, and the counts ``--resume`` reads."""
from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from xmask_cli.tune.objective import TrialFailed
from xmask_cli.tune.search import finished, interrupted, optimize


def _objective(trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    if trial.number == 1:
        raise TrialFailed("configuration rejected: x does not fit")
    if trial.number == 2:
        trial.report(0.0, 0)
        raise optuna.TrialPruned("pruned at seed 0, epoch 0 (running mean val 0.0000)")
    return x


def test_each_trials_end_is_recorded_and_logged_and_the_loop_goes_on():
    study = optuna.create_study(direction="maximize")
    logs: list[str] = []
    assert optimize(study, _objective, trials=4, log=logs.append) == 4
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED, TrialState.COMPLETE]
    assert study.trials[1].user_attrs["fail_reason"] == "configuration rejected: x does not fit"
    assert logs[1] == "trial 1: failed: configuration rejected: x does not fit"
    assert logs[2].startswith("trial 2: pruned at seed 0, epoch 0")
    assert logs[3].startswith(f"trial 3: val value {study.trials[3].value:.4f}")
    assert finished(study) == 4 and not any(interrupted(t) for t in study.trials)


def test_the_sampler_is_seeded_by_trial_number_so_a_study_replays():
    draws = []
    for _ in range(2):
        study = optuna.create_study(direction="maximize")
        optimize(study, lambda t: t.suggest_float("x", 0.0, 1.0), trials=4, sampler_seed=3)
        draws.append([t.params["x"] for t in study.trials])
    assert draws[0] == draws[1] and len(set(draws[0])) == 4
    other = optuna.create_study(direction="maximize")
    optimize(other, lambda t: t.suggest_float("x", 0.0, 1.0), trials=4, sampler_seed=4)
    assert [t.params["x"] for t in other.trials] != draws[0]


def test_ctrl_c_records_the_running_trial_as_interrupted_and_stops():
    def stop_on_second(trial) -> float:
        if trial.number == 1:
            raise KeyboardInterrupt
        return 0.5

    study = optuna.create_study(direction="maximize")
    with pytest.raises(KeyboardInterrupt):
        optimize(study, stop_on_second, trials=5)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.FAIL]
    assert study.trials[1].user_attrs["fail_reason"].startswith("interrupted")
    assert interrupted(study.trials[1]) and finished(study) == 1


def test_no_trial_starts_after_the_timeout():
    import time

    study = optuna.create_study(direction="maximize")
    logs: list[str] = []
    t0 = time.monotonic()
    ran = optimize(study, lambda t: time.sleep(0.2) or 1.0, trials=50, timeout_s=0.5, log=logs.append)
    assert 1 <= ran < 50 and ran == len(study.trials)
    assert time.monotonic() - t0 < 0.5 + 0.2 + 5  # the last trial started before the timeout
    assert logs[-1] == f"timeout (0s) reached after {ran} trial(s): no new trial started"


def test_a_trials_line_shows_the_keys_it_drew_not_the_unread_defaults():
    """``values`` holds the whole configuration (keys the drawn architecture does not read at their defaults);
    the log line names only what the trial drew, as trials.csv leaves the others blank."""
    def objective(trial) -> float:
        arch = trial.suggest_categorical("model.arch", ["gat"])
        trial.set_user_attr("values", {"model.arch": arch, "model.ffn_mult": 2})  # ffn_mult: gat reads none
        return 0.5

    study = optuna.create_study(direction="maximize")
    logs: list[str] = []
    optimize(study, objective, trials=1, log=logs.append)
    assert "(model.arch=gat)" in logs[0] and "ffn_mult" not in logs[0]
