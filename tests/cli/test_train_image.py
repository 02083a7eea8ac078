"""The image level from the command line: prepare, train, eval, ablate, explain, and refusals."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from tests.engine.conftest import _one_torch_thread  # noqa: F401  (autouse: one torch thread)
from xmask_cli.ablate import variant_overrides
from xmask_cli.config_resolve import resolve
from xmask_cli.errors import UsageError

TINY = ["--set", "model.hidden=32", "--set", "model.layers=2", "--set", "train.epochs=2", "--set", "train.lr=3e-3"]






@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("img")
    r = run("--format", "json", "train", "--preset", "vit-digits", *TINY, "--device", "cpu",
            "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    return root, json.loads(r.stdout)


def test_prepare_caches_the_grid_once(tmp_path):
    first = run("--format", "json", "prepare", "digits", "--preset", "vit-digits", "--cache-dir", str(tmp_path))
    again = run("--format", "json", "prepare", "digits", "--preset", "vit-digits", "--cache-dir", str(tmp_path))
    assert first.exit_code == 0 and again.exit_code == 0, first.stderr + again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert not a["cached"] and b["cached"] and a["path"] == b["path"]
    assert (a["graphs"], a["nodes"], a["edges"]) == (1, 16, 24)  # a 4x4 grid has 2 * 4 * 3 edges


def test_train_then_eval_reproduces_the_recorded_metrics(trained):
    root, result = trained
    assert result["level"] == "image" and result["dataset"] == "digits"
    run_dir = Path(result["runs"][0]["run_dir"])
    r = run("--format", "json", "eval", str(run_dir), "--split", "all", "--device", "cpu",
            "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    for part in ("train", "val", "test"):
        assert out["metrics"][part] == pytest.approx(out["recorded"][part], abs=1e-12)


def test_explain_writes_the_image_beside_each_heads_grid_map(trained, tmp_path):
    root, result = trained
    run_dir = result["runs"][0]["run_dir"]
    r = run("--format", "json", "explain", run_dir, "--image", "2", "--out", str(tmp_path / "maps"),
            "--device", "cpu", "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert Path(out["files"]["figures"]["image_2"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with h5py.File(out["files"]["maps"]) as f:
        head = f["image_2/layer_0/head_1"]
        att, grid = head["attention"][()], head["grid"][()]
        assert att.shape == (17, 17) and grid.shape == (4, 4) and head.attrs["k"] == 2
    np.testing.assert_allclose(att.sum(1), 1.0, atol=1e-5)
    # The default map: what each patch receives, averaged over all 17 query tokens.
    np.testing.assert_allclose(grid.ravel(), att[:, 1:].mean(0), rtol=1e-5)
    # Head h reads Â^h: no attention mass beyond h grid hops (4-neighbour: |dr| + |dc|).
    for layer in out["hop_summary"].values():
        for info in layer.values():
            far = sum(v for b, v in info["mass"].items() if b != "cls" and int(b) > info["k"])
            assert far < 1e-6
    q = run("--format", "json", "explain", run_dir, "--image", "2", "--query-patch", "5", "--out",
            str(tmp_path / "q"), "--device", "cpu", "--cache-dir", str(root / "cache"))
    assert q.exit_code == 0, q.stderr
    with h5py.File(json.loads(q.stdout)["files"]["maps"]) as f:
        head = f["image_2/layer_0/head_0"]
        np.testing.assert_allclose(head["grid"][()].ravel(), head["attention"][()][1 + 5, 1:], rtol=1e-6)
    bad = run("explain", run_dir, "--graph", "0", "--cache-dir", str(root / "cache"))
    assert bad.exit_code == 2 and "--image I" in one_error_line(bad)
    out_of_range = run("explain", run_dir, "--image", "5000", "--cache-dir", str(root / "cache"))
    assert out_of_range.exit_code == 2 and "out of range" in one_error_line(out_of_range)


def test_ablate_compares_mask_positions_and_neither_in_one_table(tmp_path):
    r = run("--format", "json", "ablate", "--preset", "vit-digits", "--variants", "full,no-logmask,positional",
            "--seeds", "0", *TINY, "--set", "train.epochs=1", "--device", "cpu", "--out", str(tmp_path / "abl"),
            "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    rows = {row["variant"]: row for row in json.loads(r.stdout)["rows"]}
    assert list(rows) == ["full", "no-logmask", "positional"]
    assert all(row["status"] == "ok" for row in rows.values())
    cfg = json.loads((tmp_path / "abl/runs/digits-image-positional/0/config.json").read_text())
    assert cfg["model"]["positional"] == "learned" and cfg["model"]["use_bias"] is False
    full = json.loads((tmp_path / "abl/runs/digits-image-full/0/config.json").read_text())
    assert full["model"]["positional"] == "none" and full["model"]["use_bias"] is True
    # A graph preset has no position embeddings to switch to.
    with pytest.raises(UsageError, match="is for image datasets"):
        variant_overrides("positional", resolve("graph-level"))
    assert variant_overrides("positional", resolve("vit-digits")) == ["model.positional=learned",
                                                                       "model.use_bias=false"]


def test_a_patch_that_does_not_divide_the_image_is_refused(tmp_path):
    r = run("train", "--preset", "vit-digits", "--set", "image.patch=3", "--cache-dir", str(tmp_path))
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "image.patch=3" in line and "1, 2, 4, 8" in line
    p = run("prepare", "cifar10", "--set", "image.patch=5", "--cache-dir", str(tmp_path))
    assert p.exit_code == 2 and "32x32" in one_error_line(p)


def test_image_switches_on_a_graph_dataset_are_refused(tmp_path):
    r = run("train", "--preset", "graph-level", "--set", "model.positional=learned", "--cache-dir", str(tmp_path))
    assert r.exit_code == 2 and "for image datasets" in one_error_line(r)
