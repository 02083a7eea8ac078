"""Human renderers on hand-made results: every number shown as the result holds it, rows where they belong."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

from rich.console import Console

from xmask_cli.render import ablate, evaluate, explain, train
from xmask_cli.results import EvalResult, MetricStats, RunSummary, SweepResult
from xmask_cli.results_ablation import AblationResult, AblationRow


def _text(render, *args) -> str:
    buf = io.StringIO()
    render(Console(file=buf, width=200, soft_wrap=True, highlight=False), *args)
    return buf.getvalue()


def test_explain_prints_each_heads_hop_masses_and_the_files():
    result = {"targets": [{"name": "graph_0", "target": "graph 0: 3 nodes"}], "hop_buckets": ["0", "1", ">=2", "unreachable"],
              "hop_summary": {"layer_1": {"head_0": {"k": 2, "mass": {"0": 0.25, "1": 0.5, ">=2": 0.25, "unreachable": 0.0}}}},
              "files": {"maps": "out/maps.h5", "figures": {"graph_0": "out/graph_0.png"}}}
    lines = _text(explain.human, result, Path("out")).splitlines()
    assert lines[0] == "graph_0: graph 0: 3 nodes"
    assert "mean over every query row of 1 target(s) -> out" in lines[1]
    assert lines[2].split() == ["layer", "head", "k", "0", "1", ">=2", "unr"]
    assert lines[3].split() == ["L1", "h0", "2", "0.25", "0.50", "0.25", "0.00"]  # numbered from 0, as maps.h5
    assert lines[-2:] == ["maps: out/maps.h5", "figure: out/graph_0.png"]


def _run(seed: int, test: float) -> RunSummary:
    return RunSummary(seed=seed, best_epoch=3, epochs_run=5, metrics={"train": 1.0, "val": 0.5, "test": test})


def test_train_adds_the_mean_row_only_over_several_seeds():
    one = SweepResult(name="x", dataset="MUTAG", level="graph", metric="accuracy", features=None, seeds=(0,),
                      run_root="runs/x", runs=(_run(0, 0.75),), aggregate=None)
    text = _text(train.human, one)
    assert "0.7500" in text and "mean ± std" not in text
    agg = {p: MetricStats(mean=0.5, std=0.25, values=(0.75, 0.25)) for p in ("train", "val", "test")}
    two = dataclasses.replace(one, seeds=(0, 1), runs=(_run(0, 0.75), _run(1, 0.25)), aggregate=agg)
    assert "0.5000 ± 0.2500" in _text(train.human, two)


def test_eval_shows_the_recorded_value_or_a_dash():
    result = EvalResult(dataset="MUTAG", level="graph", seed=0, run_dir="runs/x/0", metric="accuracy",
                        metrics={"val": 0.5, "test": 0.625}, recorded={"val": 0.5, "test": None}, config_sha256="0" * 16)
    text = _text(evaluate.human, result, ("val", "test"))
    assert "0.5000 (recorded 0.5000)" in text and "0.6250 (recorded -)" in text


def test_ablate_reports_failed_variants_in_their_row():
    rows = (AblationRow(variant="full", description="the preset as is", val_mean=0.5, val_std=0.0, test_mean=0.75,
                        test_std=0.125, delta_test=0.0, status="ok", error=None, runs={}, reused=()),
            AblationRow(variant="no-logmask", description="no mask", val_mean=None, val_std=None, test_mean=None,
                        test_std=None, delta_test=None, status="failed", error="boom", runs={}, reused=()))
    result = AblationResult(dataset="MUTAG", level="graph", metric="accuracy", seeds=(0, 1), name="mutag-graph",
                            selection="val", preset="graph-level", overrides=(), out_dir="abl", rows=rows)
    text = _text(ablate.human, result, "0-1", Path("abl"))
    assert "0.7500 ± 0.1250" in text and "+0.0000" in text and "failed: boom" in text


def test_ablate_shows_the_folds_and_the_paired_difference():
    from xmask_cli.results_ablation import PairedDelta

    paired = PairedDelta(values={"0/fold-0": -0.25, "0/fold-1": 0.0}, mean=-0.125, std=0.125, above=0, below=1, ties=1)
    rows = (AblationRow(variant="full", description="", val_mean=0.5, val_std=0.0, test_mean=0.625, test_std=0.125,
                        delta_test=0.0, status="ok", error=None, runs={}, reused=()),
            AblationRow(variant="no-logmask", description="", val_mean=0.5, val_std=0.0, test_mean=0.5, test_std=0.0,
                        delta_test=-0.125, status="ok", error=None, runs={}, reused=(), paired=paired))
    result = AblationResult(dataset="MUTAG", level="graph", metric="accuracy", seeds=(0,), name="mutag-graph",
                            selection="val", preset="graph-level", overrides=(), out_dir="abl", rows=rows, folds=2)
    text = _text(ablate.human, result, "0", Path("abl"))
    assert "seeds 0, 2 folds" in text and "-0.1250 ± 0.1250 ↑0 ↓1 =1" in text
