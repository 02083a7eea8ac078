"""``xmask prepare`` from the command line: JSON and human summaries, the cache a training run then reads,
the truncation report, data roots and presets, an unwritable cache dir."""
from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import one_error_line, run
from xmask_cli.cache import StructureCache


def test_prepare_embedded_mutag_json_then_cached(tmp_path):
    r = run("--format", "json", "prepare", "mutag", "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["graphs"] == 188 and first["nodes"] == 3371 and not first["cached"]
    # The bundled MUTAG's own features (7 one-hot atom types), said in the result.
    assert first["features"]["kind"] == "dataset" and first["features"]["dim"] == 7
    assert Path(first["path"]).is_file() and first["size_bytes"] > 0
    # Per-command --format and a second run: no work, same path.
    r2 = run("prepare", "MUTAG", "--cache-dir", str(tmp_path / "c"), "--format", "json")
    second = json.loads(r2.stdout)
    assert second["cached"] and second["path"] == first["path"] and second["edges"] == first["edges"]
    with StructureCache(first["path"]) as c:
        assert c.params["powers"]["k"] == 4 and c.num_graphs == 188


def test_prepare_dataset_builds_the_file_train_dataset_reads(tmp_path, monkeypatch):
    """``prepare DATASET`` resolves the preset ``train --dataset DATASET`` does (the dataset's own), so the
    training run finds its structure cached under its own key: nothing prepared again, nothing copied. The
    dataset's own preset here reads Â^1 and Â^2 only, where its level's preset reads up to Â^4."""
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mutag.yaml").write_text("extends: graph-level\nmodel:\n  head_powers: [1, 1, 2, 2]\n")
    monkeypatch.setenv("XMASK_PRESETS", str(tmp_path / "presets"))
    cache = str(tmp_path / "c")
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", cache)
    assert r.exit_code == 0, r.stderr
    path = json.loads(r.stdout)["path"]
    with StructureCache(path) as c:
        assert c.params["powers"]["k"] == 2
    t = run("-f", "json", "train", "--dataset", "mutag", "--set", "train.epochs=1", "--cache-dir", cache,
            "--runs-dir", str(tmp_path / "runs"))
    assert t.exit_code == 0, t.stderr
    assert "prepared" not in t.stderr and "served from" not in t.stderr
    assert sorted(str(p) for p in (tmp_path / "c" / "mutag").glob("*.h5")) == [path]


def test_prepare_human_summary_on_stdout_logs_on_stderr(tmp_path):
    r = run("prepare", "mutag", "--cache-dir", str(tmp_path / "c"), "--set", "structure.powers.k=2")
    assert r.exit_code == 0
    assert "graphs" in r.stdout and "188" in r.stdout
    assert "loaded MUTAG" in r.stderr and "loaded" not in r.stdout
    assert "one-hot node labels (7)" in r.stdout and "node features: " in r.stderr


def test_prepare_reports_the_truncated_mass_in_json_and_human(tmp_path, shared_data):
    # CiteSeer as a "large" graph with a small row budget: the report is the cache's record.
    args = ["prepare", "citeseer", "--cache-dir", str(tmp_path / "c"), "--data-root", str(shared_data),
            "--set", "structure.large.min_nodes=1000", "--set", "structure.large.topk=8",
            "--set", "structure.powers.k=2", "--set", "structure.spd.enabled=false",
            "--set", "structure.spectrum.enabled=false", "--set", "structure.partition.parts=0"]
    r = run("-f", "json", *args)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)["truncation"]
    with StructureCache(json.loads(r.stdout)["path"]) as c:
        rec = json.loads(c.file["powers"].attrs["dropped_mass"])
    assert out["large_graphs"] == 1 and out["topk"] == 8
    assert out["powers"]["k"] == [1, 2] and out["powers"]["mean"] == rec["mean"] and out["powers"]["max"] == rec["max"]
    assert rec["rows"] == 3327 and rec["mean"][0] == 0.0 and 0 < rec["mean"][1] < rec["max"][1] <= 1
    human = run(*args)  # cached now: the report is read back from the file
    assert human.exit_code == 0 and "dropped" in human.stdout and f"{rec['max'][1]:.2%}" in human.stdout
    small = run("-f", "json", "prepare", "mutag", "--cache-dir", str(tmp_path / "c"), "--set", "structure.powers.k=2")
    assert json.loads(small.stdout)["truncation"]["large_graphs"] == 0


def test_prepare_from_data_root_env(tmp_path, shared_data):
    r = run("-f", "json", "prepare", "citeseer", "--cache-dir", str(tmp_path / "c"), "--set", "node.mode=partition",
            env={"XMASK_DATA_ROOT": str(shared_data)})
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nodes"] == 3327
    with StructureCache(out["path"]) as c:
        part = c.partition(0)
        assert part.shape == (3327,) and part.max() == 31  # partition batches read node-level's 32 METIS parts


def test_prepare_with_preset_and_dataset_from_preset(tmp_path):
    r = run("-f", "json", "prepare", "--preset", "graph-level", "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["dataset"] == "mutag"


def test_unwritable_cache_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run("prepare", "mutag", "--cache-dir", str(blocker / "cache"))
    assert r.exit_code == 5
    assert "cache dir" in one_error_line(r)


def test_usage_errors_exit_2():
    r = run("prepare", "--workers", "0")
    assert r.exit_code == 2
