"""The edge bias through the CLI: a MUTAG epoch trains it (its parameters leave zero, the run records the cache's
coding, eval reproduces the run), and a dataset without edge attributes is one ``error:`` line with exit 2 before
anything is written."""
from __future__ import annotations

import json

import pytest
import torch

from tests.cli_helpers import one_error_line, run

EDGE = "model.biases=[{type: edge}]"
TINY = ["--set", "model.hidden=8", "--set", "model.heads=2", "--set", "model.head_powers=[1,2]", "--set",
        "structure.powers.k=2", "--set", "model.layers=1", "--set", "train.epochs=1", "--set", "train.warmup_epochs=0"]


def test_one_mutag_epoch_trains_the_edge_bias_and_eval_reproduces(tmp_path, shared_data):
    r = run("train", "--preset", "graph-level", "--dataset", "MUTAG", "--set", EDGE, *TINY, "--seeds", "0",
            "--data-root", str(shared_data), "--cache-dir", str(tmp_path / "cache"), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 0, r.stderr
    (config,) = (tmp_path / "runs").rglob("config.json")
    model = json.loads(config.read_text())["model"]
    assert model["edge_encoding"] == "linear" and model["edge_dims"] == [4]  # MUTAG's one-hot bond labels
    state = torch.load(config.parent / "best.pt", map_location="cpu", weights_only=False)
    weights = {k: v for k, v in state["model"].items() if k.startswith("learned.") and k.endswith("linear.weight")}
    assert weights and all(w.shape == (2, 4) and w.abs().sum() > 0 for w in weights.values())  # trained off zero
    e = run("--format", "json", "eval", str(config.parent), "--cache-dir", str(tmp_path / "cache"),
            "--data-root", str(shared_data))
    assert e.exit_code == 0, e.stderr
    result = json.loads(e.stdout)
    assert result["metrics"]["test"] == pytest.approx(result["recorded"]["test"])


@pytest.mark.parametrize("command", ["train", "prepare"])
@pytest.mark.parametrize("dataset", ["NCI1", "PROTEINS"])
def test_a_dataset_without_edge_attributes_is_exit_2(command, dataset, tmp_path, shared_data):
    args = ["train", "--preset", "graph-level", "--dataset", dataset] if command == "train" else ["prepare", dataset]
    r = run(*args, "--set", EDGE, "--data-root", str(shared_data), "--cache-dir", str(tmp_path / "cache"),
            *(["--runs-dir", str(tmp_path / "runs")] if command == "train" else []))
    assert r.exit_code == 2, r.stderr
    if command == "train":  # refused before the dataset is reported: the error is all of stderr
        line = one_error_line(r)
    else:  # prepare reports the dataset it loaded, then the one error line
        (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert "Traceback" not in r.stderr + r.stdout
    assert "type 'edge'" in line and f"{dataset}'s loader gives no edge_attr" in line
    assert not (tmp_path / "runs").exists() and not list((tmp_path / "cache").rglob("*.h5"))
