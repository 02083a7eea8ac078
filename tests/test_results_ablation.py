"""The ablation's result types: to_json() is ablation.json, from_json() reads it back with every field checked
(an older file without ``folds`` or ``paired`` included), and the dict access still reads that JSON."""
from __future__ import annotations

import json

import pytest

from xmask_cli.jsonfile import Damaged
from xmask_cli.results_ablation import AblationResult, PairedDelta

ROW = {"variant": "full", "description": "the preset as is", "status": "ok", "error": None,
       "runs": {"0/fold-0": {"train": 1.0, "val": 0.5, "test": 0.75}, "0/fold-1": {"train": 1.0, "val": 0.5, "test": 0.5}},
       "reused": [0], "val_mean": 0.5, "val_std": 0.0, "test_mean": 0.625, "test_std": 0.125, "delta_test": 0.0,
       "paired": None}
PAIRED = {"values": {"0/fold-0": -0.25, "0/fold-1": 0.0}, "mean": -0.125, "std": 0.125, "above": 0, "below": 1,
          "ties": 1}
ABLATION = {"dataset": "MUTAG", "level": "graph", "metric": "accuracy", "seeds": [0], "name": "mutag-graph",
            "selection": "val metric, then val loss", "preset": "graph-level", "overrides": ["train.epochs=2"],
            "out_dir": "ablations/mutag-graph", "folds": 2,
            "rows": [ROW, {**ROW, "variant": "no-symnorm", "runs": {"0/fold-0": {"val": 0.5, "test": 0.5},
                                                                   "0/fold-1": {"val": 0.5, "test": 0.5}},
                           "test_mean": 0.5, "test_std": 0.0, "delta_test": -0.125, "paired": PAIRED},
                     {**ROW, "variant": "no-logmask", "status": "failed", "error": "RuntimeError: boom",
                      "runs": {}, "reused": [], "val_mean": None, "val_std": None, "test_mean": None,
                      "test_std": None, "delta_test": None}]}


def test_an_ablation_reads_back_to_the_same_json():
    result = AblationResult.from_json(json.loads(json.dumps(ABLATION)))
    assert result.to_json() == ABLATION
    assert result.rows[0].runs["0/fold-0"]["test"] == 0.75 and result.rows[2].error == "RuntimeError: boom"
    assert result.rows[1].paired == PairedDelta(**PAIRED) and result.folds == 2
    assert result["rows"][2]["status"] == "failed"  # dict access: compatibility


def test_a_file_written_before_folds_and_paired_reads_back():
    old = {k: v for k, v in ABLATION.items() if k != "folds"}
    old["rows"] = [{k: v for k, v in row.items() if k != "paired"} for row in ABLATION["rows"]]
    result = AblationResult.from_json(old)
    assert result.folds == 0 and all(r.paired is None for r in result.rows)


@pytest.mark.parametrize("data, why", [
    ({**ABLATION, "rows": [{**ROW, "runs": {"0": {"test": "high"}}}]}, "'0' is an object"),
    ({**ABLATION, "rows": [{**ROW, "test_mean": "0.75"}]}, "'test_mean' is a string"),
    ({**ABLATION, "rows": [{**ROW, "paired": {**PAIRED, "above": "0"}}]}, "'above' is a string"),
    ({**ABLATION, "rows": [{**ROW, "paired": {**PAIRED, "extra": 1}}]}, "unknown field"),
    ({**ABLATION, "seeds": "0-1"}, "'seeds' is a string"),
    ({**ABLATION, "folds": 2.5}, "'folds' is a number"),
    ({**ABLATION, "extra": 1}, "unknown field"),
])
def test_a_damaged_ablation_is_refused(data, why):
    with pytest.raises(Damaged, match=why):
        AblationResult.from_json(data)
