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


@pytest.fixture(scope="session")
def cora(tmp_path_factory) -> dict:
    """A tiny node-level run on Cora (one epoch, 2 heads, no METIS parts)."""
    root = tmp_path_factory.mktemp("explain-cora")
    cfg = resolve("node-level", ["model.hidden=8", "model.heads=2", "structure.powers.k=2", "train.epochs=1",
                                       "structure.spectrum.enabled=false", "structure.partition.parts=0"])
    train_seeds(cfg, [0], device="cpu", cache_dir=root / "cache", run_root=root / "runs")
    return {"root": root, "run": root / "runs" / "cora-node" / "0", "cfg": cfg}
