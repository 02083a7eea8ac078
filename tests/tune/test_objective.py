"""One trial: the intermediate values (the running mean of the seeds' best validation so far, per epoch), pruning,
folds, the best trial's choice."""
from __future__ import annotations

import json
import statistics

import optuna
import pytest

from tests.tune.conftest import TINY
from xmask_cli import config_resolve as R
from xmask_cli.tune.objective import TrialSetup, epoch_stride, run_trial, trial_value
from xmask_cli.tune.space import Param, check_space


class _PruneAtStep(optuna.pruners.BasePruner):
    """Prunes as soon as a trial has reported step ``at`` (a pruner with a known answer)."""

    def __init__(self, at: int):
        self.at = at

    def prune(self, study, trial) -> bool:
        return trial.last_step is not None and trial.last_step >= self.at


def _setup(tmp_path, cache, seeds) -> TrialSetup:
    cfg = R.resolve("mutag", TINY)
    return TrialSetup(cfg=cfg, params=check_space(cfg), seeds=seeds, metric="rocauc", study_dir=tmp_path,
                      cache_dir=cache, offline=True)


def _running_best(path) -> list[float]:
    vals = [json.loads(line)["val_rocauc"] for line in path.read_text().splitlines()]
    return [max(vals[: i + 1]) for i in range(len(vals))]


def test_reports_are_the_running_mean_of_the_seeds_best_validation_at_per_seed_steps(tmp_path, mutag_cache):
    setup = _setup(tmp_path, mutag_cache, [0, 1])
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    trial = study.ask()
    value = run_trial(trial, setup)
    study.tell(trial, value)
    reported = study.trials[0].intermediate_values
    run = tmp_path / "trials" / "trial-0000"
    stride = setup.cfg.train.epochs  # the space does not search train.epochs: the preset's budget
    seed0, seed1 = (_running_best(run / str(s) / "metrics.jsonl") for s in (0, 1))
    expected = {e: b for e, b in enumerate(seed0)}  # seed 0 alone
    expected.update({stride + e: (seed0[-1] + b) / 2 for e, b in enumerate(seed1)})  # seed 0's best and seed 1's so far
    assert reported == pytest.approx(expected, abs=1e-12)
    assert max(reported) < 2 * stride  # one block of steps per seed: a plot of a few epochs, not of 10^6 steps
    # The value is the mean over seeds of the val score of each restored best state (summary.json): the last report.
    vals = [json.loads((run / str(s) / "summary.json").read_text())["metrics"]["val"] for s in (0, 1)]
    assert value == pytest.approx(sum(vals) / 2, abs=1e-12)
    assert reported[max(reported)] == pytest.approx(value, abs=1e-12)
    assert "test" not in json.loads((run / "0" / "summary.json").read_text())["metrics"]
    assert not (run / "0" / "best.pt").exists() and not (run / "0" / "last.pt").exists()  # checkpoints dropped
    # Its cost beside its score: the median of the epochs' wall times, both seeds' epochs together.
    times = [json.loads(line)["epoch_s"] for s in (0, 1) for line in (run / str(s) / "metrics.jsonl").read_text().splitlines()]
    assert study.trials[0].user_attrs["epoch_s"] == pytest.approx(statistics.median(times), abs=1e-12)


def test_the_trials_of_a_study_read_the_dataset_once(tmp_path, mutag_cache, monkeypatch):
    from xmask_cli.engine.runs import data

    loads: list[str] = []
    real = data.load_graphs
    monkeypatch.setattr(data, "load_graphs", lambda spec, **kw: loads.append(spec.name) or real(spec, **kw))
    setup = _setup(tmp_path, mutag_cache, [0])
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    for _ in range(2):
        trial = study.ask()
        study.tell(trial, run_trial(trial, setup))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert study.trials[0].user_attrs["values"] != study.trials[1].user_attrs["values"]  # two configurations
    assert loads == ["MUTAG"] and setup.datasets.loads == 1


def test_epoch_stride_is_the_largest_epoch_budget_a_trial_can_draw():
    cfg = R.resolve("mutag", TINY)
    assert epoch_stride(cfg, check_space(cfg)) == cfg.train.epochs == 3
    assert epoch_stride(cfg, [Param("train.epochs", "int", low=2, high=50)]) == 50
    assert epoch_stride(cfg, [Param("train.epochs", "choice", choices=(1, 2))]) == 3  # the preset's is larger


def test_a_pruned_trial_stops_training_where_the_pruner_says(tmp_path, mutag_cache):
    setup = _setup(tmp_path, mutag_cache, [0, 1])
    study = optuna.create_study(direction="maximize", pruner=_PruneAtStep(1))
    trial = study.ask()
    with pytest.raises(optuna.TrialPruned, match="seed 0, epoch 1"):
        run_trial(trial, setup)
    metrics = tmp_path / "trials" / "trial-0000" / "0" / "metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == 2  # epochs 0 and 1, then stopped (budget: 3)
    assert not (tmp_path / "trials" / "trial-0000" / "1").exists()  # the second seed never started
    times = [json.loads(line)["epoch_s"] for line in metrics.read_text().splitlines()]
    assert trial.user_attrs["epoch_s"] == pytest.approx(statistics.median(times), abs=1e-12)  # pruned: cost kept


@pytest.mark.parametrize("direction, values, losses, want", [
    # Equal mean validation accuracy: the lower mean validation loss wins, whatever the trial order.
    ("maximize", [0.9, 0.95, 0.95, 0.95], [0.1, 0.5, 0.3, 0.4], 2),
    ("maximize", [0.95, 0.95], [0.3, 0.3], 0),  # a full tie keeps the earlier trial
    ("maximize", [0.95, 0.9], [0.9, 0.1], 0),  # a better value wins over any loss
    ("minimize", [0.2, 0.2, 0.3], [0.5, 0.4, 0.0], 1),
    ("maximize", [0.95, 0.95], [None, 0.3], 1),  # a trial with a known loss beats one without
])
def test_best_trial_breaks_value_ties_by_the_mean_validation_loss(direction, values, losses, want):
    import optuna

    from xmask_cli.tune.objective import best_trial

    study = optuna.create_study(direction=direction)
    for v, loss in zip(values, losses):
        study.add_trial(optuna.trial.create_trial(value=v, user_attrs={"val_loss_mean": loss}))
    assert best_trial(study).number == want


def test_a_trial_on_folds_scores_the_inner_holdouts_of_the_first_folds(tmp_path, mutag_cache):
    """``tune --folds 2`` over a 3-fold protocol: each trial trains folds 0 and 1 (never 2), selects and is
    scored on their inner holdouts, and never scores a test fold."""
    from dataclasses import replace

    import numpy as np

    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.engine.scoring.folds import outer_folds
    from xmask_cli.engine.tasks.graph import graph_labels

    setup = replace(_setup(tmp_path, mutag_cache, [0]), cfg=R.resolve("mutag", [*TINY, "data.folds=3"]), folds=2)
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    trial = study.ask()
    value = run_trial(trial, setup)
    run = tmp_path / "trials" / "trial-0000" / "0"
    assert sorted(p.name for p in run.iterdir()) == ["fold-0", "fold-1", "folds"]
    folds = outer_folds(graph_labels(load_graphs(get_dataset("mutag"), data_root=None, cache_dir=mutag_cache,
                                                 offline=True)), 3, seed=0)
    vals = []
    for i in (0, 1):
        saved = json.loads((run / f"fold-{i}" / "config.json").read_text())
        assert saved["split"]["val"] == folds[i].val.tolist()  # selection read fold i's inner holdout
        summary = json.loads((run / f"fold-{i}" / "summary.json").read_text())
        assert "test" not in summary["metrics"]
        vals.append(summary["metrics"]["val"])
    assert value == pytest.approx(np.mean(vals), abs=1e-12)
    # Pruning steps: one block of train.epochs steps per (seed, fold) run.
    steps = study.trials[0].intermediate_values
    assert {s // setup.cfg.train.epochs for s in steps} == {0, 1}


def test_trial_value_reads_a_complete_trial_and_refuses_one_without_value():
    assert trial_value(optuna.trial.create_trial(value=0.75)) == 0.75
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL)
    with pytest.raises(ValueError, match="has no value: it is fail"):
        trial_value(failed)
