"""The trained MUTAG run every explain test reads (trained once per session)."""
from __future__ import annotations

import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.explain import ExplainRequest, explain_run


@pytest.fixture(scope="session")
def mutag(tmp_path_factory) -> dict:
    """A tiny trained graph-level run on the bundled MUTAG, explained on graphs 0 and 5."""
    root = tmp_path_factory.mktemp("explain")
    cfg = resolve("graph-level", ["model.hidden=16", "model.layers=2", "model.heads=2", "train.epochs=2"])
    train_seeds(cfg, [0], device="cpu", cache_dir=root / "cache", run_root=root / "runs")
    run = root / "runs" / "mutag-graph" / "0"
    result = explain_run(run, ExplainRequest(graphs=[0, 5]), out_dir=root / "out", cache_dir=root / "cache")
    return {"root": root, "run": run, "result": result}
