"""The ablation's table on hand-made rows: the paired difference only over the runs both rows have, ties
counted, ``full`` against itself nothing, and ``ablation.csv``'s rows."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from xmask_cli.ablate.table import CSV_COLUMNS, csv_text, mean_std, paired_delta, with_deltas
from xmask_cli.results_ablation import AblationResult, AblationRow


def _row(variant: str, tests: dict[str, float]) -> AblationRow:
    mean, std = mean_std(list(tests.values()))
    return AblationRow(variant=variant, description="", status="ok", error=None,
                       runs={k: {"val": 0.5, "test": v} for k, v in tests.items()}, reused=(), val_mean=0.5,
                       val_std=0.0, test_mean=mean, test_std=std)


FULL = {"0/fold-0": 0.70, "0/fold-1": 0.80, "0/fold-2": 0.60, "1/fold-0": 0.75}


def test_the_paired_difference_is_over_the_shared_runs_in_fulls_order():
    # The variant lacks 0/fold-2 (a killed run) and has an extra run full lacks: both are left out.
    variant = _row("no-logmask", {"1/fold-0": 0.75, "0/fold-1": 0.70, "0/fold-0": 0.90, "2/fold-0": 0.1})
    p = paired_delta(variant, _row("full", FULL))
    d = np.array([0.90 - 0.70, 0.70 - 0.80, 0.75 - 0.75])
    assert list(p.values) == ["0/fold-0", "0/fold-1", "1/fold-0"]
    assert list(p.values.values()) == pytest.approx(d, abs=1e-12)
    assert (p.mean, p.std) == pytest.approx((d.mean(), d.std()), abs=1e-12)
    assert (p.above, p.below, p.ties) == (1, 1, 1)


def test_paired_spread_is_smaller_than_the_rows_when_folds_differ_alike():
    """The folds move both rows by tenths; the variant is 0.02 above on each: the pairing shows it exactly."""
    variant = _row("no-symnorm", {k: v + 0.02 for k, v in FULL.items()})
    rows = with_deltas([_row("full", FULL), variant])
    p = rows[1].paired
    assert (p.mean, p.std, p.above, p.below) == (pytest.approx(0.02), pytest.approx(0.0, abs=1e-12), 4, 0)
    assert rows[1].test_std == pytest.approx(np.std(list(FULL.values()))) and rows[1].test_std > 0.05
    assert rows[0].paired is None and rows[0].delta_test == 0.0
    assert rows[1].delta_test == pytest.approx(0.02)


def test_no_full_or_no_shared_run_gives_no_paired_difference():
    assert paired_delta(_row("no-logmask", FULL), None) is None
    assert paired_delta(_row("no-logmask", {"9": 0.5}), _row("full", FULL)) is None
    failed = AblationRow(variant="one-layer", description="", status="failed", error="boom", runs={}, reused=(),
                         val_mean=None, val_std=None, test_mean=None, test_std=None)
    assert with_deltas([_row("full", FULL), failed])[1].paired is None


def test_csv_has_a_summary_row_then_a_row_per_run():
    rows = with_deltas([_row("full", FULL), _row("no-logmask", {k: v - 0.1 for k, v in FULL.items()})])
    result = AblationResult(dataset="MUTAG", level="graph", metric="accuracy", seeds=(0, 1), name="mutag-graph",
                            selection="val", preset=None, overrides=(), out_dir="abl", rows=rows, folds=3)
    table = list(csv.DictReader(io.StringIO(csv_text(result))))
    assert tuple(table[0]) == CSV_COLUMNS
    assert [(r["variant"], r["run"]) for r in table] == [(v, k) for v in ("full", "no-logmask")
                                                         for k in ("all", *FULL)]
    summary = table[len(FULL) + 1]
    assert (float(summary["paired_delta"]), summary["above"], summary["below"]) == (pytest.approx(-0.1), "0", "4")
    per_run = table[len(FULL) + 2:]
    assert [(r["seed"], r["fold"]) for r in per_run] == [("0", "0"), ("0", "1"), ("0", "2"), ("1", "0")]
    assert [float(r["paired_delta"]) for r in per_run] == pytest.approx([-0.1] * 4)
    assert all(r["paired_delta"] == "" for r in table[:len(FULL) + 1])  # full: no difference from itself
