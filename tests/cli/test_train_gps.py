"""``model.arch: gps`` through the CLI: a tiny model trains on MUTAG (GINEConv on its bond labels, eval reproduces
the run) and on PROTEINS (no edge attributes: GINConv); beyond the graph level, or without the edge section, it
is one ``error:`` line with exit 2 before anything is written."""
from __future__ import annotations

import json

import pytest
import torch

from tests.cli_helpers import one_error_line, run

TINY = ["--set", "model.arch=gps", "--set", "model.hidden=8", "--set", "model.heads=2", "--set",
        "model.head_powers=[1,2]", "--set", "structure.powers.k=2", "--set", "model.layers=2", "--set",
        "train.epochs=2", "--set", "train.warmup_epochs=0"]


@pytest.mark.parametrize(("dataset", "conv", "coding"), [("MUTAG", "GINEConv", ("linear", [4])),
                                                         ("PROTEINS", "GINConv", ("index", [1]))])
def test_a_tiny_gps_model_trains_and_eval_reproduces(dataset, conv, coding, tmp_path, shared_data):
    r = run("train", "--preset", "graph-level", "--dataset", dataset, *TINY, "--seeds", "0",
            "--data-root", str(shared_data), "--cache-dir", str(tmp_path / "cache"), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 0, r.stderr
    (config,) = (tmp_path / "runs").rglob("config.json")
    model = json.loads(config.read_text())["model"]
    assert model["arch"] == "gps" and (model["edge_encoding"], model["edge_dims"]) == coding
    state = torch.load(config.parent / "best.pt", map_location="cpu", weights_only=False)["model"]
    locals_ = [k for k in state if k.startswith("blocks.") and ".local.conv.nn." in k]
    assert len(locals_) == 2 * 4  # two layers, each with its GIN MLP (two linear maps)
    assert any(".local.edges." in k for k in state) == (conv == "GINEConv")
    from xmask_cli.api import load_run

    assert type(load_run(config.parent).model.blocks[0].local.conv).__name__ == conv
    e = run("--format", "json", "eval", str(config.parent), "--cache-dir", str(tmp_path / "cache"),
            "--data-root", str(shared_data))
    assert e.exit_code == 0, e.stderr
    result = json.loads(e.stdout)
    assert result["metrics"]["test"] == pytest.approx(result["recorded"]["test"])


@pytest.mark.parametrize(("args", "says"), [
    (["--preset", "node-level", "--dataset", "cora", "--set", "model.arch=gps"], "runs at the graph level, not node"),
    (["--preset", "graph-level", "--set", "model.arch=gps", "--set", "structure.edge.enabled=false"],
     "reads structure.edge"),
    (["--preset", "graph-level", "--set", "model.arch=gps", "--set", "model.combine=concat"],
     "model.combine is read by model.arch=gat"),
])
def test_gps_refusals_are_exit_2(args, says, tmp_path, shared_data):
    r = run("train", *args, "--data-root", str(shared_data), "--cache-dir", str(tmp_path / "cache"),
            "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2, r.stderr
    assert says in one_error_line(r)
    assert not (tmp_path / "runs").exists() and not list((tmp_path / "cache").rglob("*.h5"))
