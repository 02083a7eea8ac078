"""The result types: to_json() is the JSON the CLI prints and the run folder holds, from_json() reads it back
with every field checked, and the dict access of the older results still reads that JSON."""
from __future__ import annotations

import dataclasses
import json

import pytest

from xmask_cli.jsonfile import Damaged
from xmask_cli.results import (
    EvalResult,
    FoldsSummary,
    MetricStats,
    RunSummary,
    SweepResult,
    stats_of,
)

#: What the loop's summary holds, plus the sweep's keys (level, run_dir; fold, folds with data.folds).
SUMMARY = {"dataset": "MUTAG", "metric": "accuracy", "seed": 3, "best_epoch": 4, "epochs_run": 9,
           "stopped_early": True, "split": {"name": "random-80/10/10", "seed": 3, "train": 150, "val": 19, "test": 19},
           "metrics": {"train": 0.75, "val": 0.5, "test": 0.625},
           "selection": {"rule": "val metric, then val loss", "val_accuracy": 0.5, "val_loss": 0.69},
           "level": "graph", "run_dir": "runs/mutag-graph/3"}
AGG = {"train": {"mean": 0.75, "std": 0.0, "values": [0.75]}, "val": {"mean": 0.5, "std": 0.0, "values": [0.5]},
       "test": {"mean": 0.625, "std": 0.0, "values": [0.625]}}


def _sweep(**extra) -> dict:
    return {"name": "mutag-graph", "dataset": "MUTAG", "level": "graph", "metric": "accuracy",
            "features": {"detail": "7 one-hot atom types", "dim": 7}, "seeds": [3], "run_root": "runs/mutag-graph",
            "runs": [SUMMARY], "aggregate": AGG, **extra}


@pytest.mark.parametrize("data", [
    SUMMARY,
    {**SUMMARY, "fold": 1, "folds": 5, "processes": 2},
    {**SUMMARY, "dataset": None, "best_epoch": None},
])
def test_a_summary_reads_back_to_the_same_json(data):
    summary = RunSummary.from_json(json.loads(json.dumps(data)), strict=True)
    assert summary.to_json() == data
    assert summary.best_epoch == data["best_epoch"] and summary.metrics["test"] == 0.625
    assert summary["metrics"] == data["metrics"]  # dict access: compatibility


def test_an_older_summary_with_metrics_only_reads_back():
    summary = RunSummary.from_json({"metrics": {"test": 1.0}})
    assert summary.metrics == {"test": 1.0} and summary.seed is None and summary.run_dir is None
    assert "run_dir" not in summary.to_json() and "fold" not in summary.to_json()


@pytest.mark.parametrize("data, why", [
    ({k: v for k, v in SUMMARY.items() if k != "metrics"}, "no 'metrics' field"),
    ({**SUMMARY, "metrics": {"test": "0.5"}}, "'metrics' is an object"),
    ({**SUMMARY, "best_epoch": "4"}, "'best_epoch' is a string"),
    ({**SUMMARY, "stopped_early": 1}, "'stopped_early' is a number"),
    ({**SUMMARY, "seed": True}, "'seed' is a boolean"),
    ([SUMMARY], "a run summary is not a JSON object"),
])
def test_a_damaged_summary_is_refused_naming_the_field(data, why):
    with pytest.raises(Damaged, match=why):
        RunSummary.from_json(data)


def test_a_strict_read_refuses_a_key_the_type_does_not_hold():
    data = {**SUMMARY, "new_key": 1}
    assert RunSummary.from_json(data).to_json() == SUMMARY  # a file read back: extra keys are left
    with pytest.raises(Damaged, match="unknown field\\(s\\) 'new_key' for RunSummary"):
        RunSummary.from_json(data, strict=True)  # the loop's own summary: a new key would be dropped silently


@pytest.mark.parametrize("extra", [{}, {"folds": {"k": 5, "trained": 2, "holdout": 0.1, "per_seed": {"3": AGG}}}])
def test_a_sweep_reads_back_to_the_same_json_and_aggregate_json_leaves_out_runs(extra):
    data = _sweep(**extra)
    sweep = SweepResult.from_json(json.loads(json.dumps(data)))
    assert sweep.to_json() == data
    assert sweep.aggregate_json() == {k: v for k, v in data.items() if k != "runs"}
    assert sweep.aggregate is not None and sweep.aggregate["test"] == MetricStats(0.625, 0.0, (0.625,))
    assert sweep.runs[0].run_dir == "runs/mutag-graph/3" and sweep.seeds == (3,)
    assert (sweep.folds is None) == (not extra)
    # aggregate.json has no runs: it reads back with none
    assert SweepResult.from_json(sweep.aggregate_json()).runs == ()
    assert sweep["aggregate"]["test"]["mean"] == 0.625 and sweep["runs"][0]["seed"] == 3  # compatibility


def test_a_sweep_without_aggregate_or_features_writes_null():
    sweep = SweepResult.from_json({**_sweep(), "aggregate": None, "features": None})
    assert sweep.to_json()["aggregate"] is None and sweep.to_json()["features"] is None


@pytest.mark.parametrize("data, why", [
    ({**_sweep(), "seeds": ["3"]}, "'seeds' is an array"),
    ({**_sweep(), "aggregate": {"test": {"mean": 1.0, "std": 0.0}}}, "no 'values' field"),
    ({**_sweep(), "runs": [{"seed": 3}]}, "no 'metrics' field"),
    ({**_sweep(), "folds": {"k": 5}}, "no 'trained' field"),
    ({k: v for k, v in _sweep().items() if k != "run_root"}, "no 'run_root' field"),
])
def test_a_damaged_sweep_is_refused(data, why):
    with pytest.raises(Damaged, match=why):
        SweepResult.from_json(data)


def test_an_eval_result_reads_back_and_refuses_what_eval_does_not_print():
    data = {"run_dir": "runs/x/0", "dataset": "MUTAG", "level": "graph", "metric": "accuracy", "seed": 0,
            "metrics": {"test": 0.5}, "recorded": {"test": None}, "config_sha256": "0123456789abcdef"}
    result = EvalResult.from_json(data)
    assert result.to_json() == data and result.recorded["test"] is None and result["metrics"] == {"test": 0.5}
    with pytest.raises(Damaged, match="unknown field"):
        EvalResult.from_json({**data, "extra": 1})
    with pytest.raises(Damaged, match="'metrics' is an object"):
        EvalResult.from_json({**data, "metrics": {"test": None}})


def test_results_are_frozen():
    summary = RunSummary.from_json(SUMMARY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.best_epoch = 0  # type: ignore[misc]
    folds = FoldsSummary(2, 2, 0.1, {"0": stats_of(AGG)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        folds.k = 3  # type: ignore[misc]


