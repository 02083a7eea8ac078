"""``xmask train`` and ``xmask eval`` end to end on the bundled MUTAG (tiny model, few epochs)."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from tests.cli_helpers import full_disk_line, one_error_line, run
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.sweep import train_seeds

TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "train.epochs=4",
        "--set", "train.warmup_epochs=1", "--set", "train.lr=1e-2"]






@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, dict]:
    """A two-seed sweep, run once for the module."""
    root = tmp_path_factory.mktemp("train")
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--seeds", "0-1", "--device", "cpu",
            "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    return root, json.loads(r.stdout)


def _eval_reproduces_test(folder: Path, cache_dir: Path, out: dict) -> None:
    """`xmask eval` of the run recomputes the test metric `train` recorded and printed."""
    e = run("--format", "json", "eval", str(folder), "--split", "test", "--device", "cpu", "--cache-dir", str(cache_dir))
    assert e.exit_code == 0, e.stderr
    ev = json.loads(e.stdout)
    assert ev["metrics"]["test"] == ev["recorded"]["test"] == out["runs"][0]["metrics"]["test"]


def test_sweep_writes_runs_and_aggregate(sweep):
    root, result = sweep
    assert result["dataset"] == "MUTAG" and result["level"] == "graph" and result["metric"] == "accuracy"
    assert result["features"] == {"kind": "dataset", "dim": 7, "detail": "PyG TUDataset x: one-hot node labels (7)",
                                  "node_struct": {"kind": "degree", "dim": 5,
                                                  "detail": "one-hot degree (5, capped at 64)"}}
    assert [r["seed"] for r in result["runs"]] == [0, 1]
    run_root = root / "runs" / "mutag-graph"
    for seed in (0, 1):
        folder = run_root / str(seed)
        for name in ("config.json", "metrics.jsonl", "best.pt", "last.pt", "summary.json"):
            assert (folder / name).is_file(), name
        config = json.loads((folder / "config.json").read_text())
        # The resolved preset is saved with the run, and the split is recorded.
        assert config["config"]["model"]["hidden"] == 16 and config["train"]["seed"] == seed
        assert config["split"]["name"] == "random-8-1-1" and config["split"]["seed"] == seed
        assert len((folder / "metrics.jsonl").read_text().splitlines()) <= 4
    agg = json.loads((run_root / "aggregate.json").read_text())
    tests = [r["metrics"]["test"] for r in result["runs"]]
    mean = sum(tests) / 2
    assert agg["aggregate"]["test"]["mean"] == pytest.approx(mean)
    assert agg["aggregate"]["test"]["std"] == pytest.approx(abs(tests[0] - mean))
    # Seeds draw different splits: the recorded test sets differ.
    c0, c1 = (json.loads((run_root / s / "config.json").read_text()) for s in ("0", "1"))
    assert c0["split"]["test"] != c1["split"]["test"]


def test_eval_reproduces_the_recorded_metrics(sweep):
    root, result = sweep
    r = run("--format", "json", "eval", str(root / "runs" / "mutag-graph" / "1"), "--split", "all",
            "--device", "cpu", "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["seed"] == 1
    for part in ("train", "val", "test"):
        assert out["metrics"][part] == out["recorded"][part] == result["runs"][1]["metrics"][part]


def test_resume_of_a_finished_run_trains_nothing(sweep):
    root, result = sweep
    folder = root / "runs" / "mutag-graph" / "0"
    before = (folder / "metrics.jsonl").read_text()
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--seed", "0", "--resume", "--device", "cpu",
            "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["runs"][0]["metrics"] == result["runs"][0]["metrics"]
    assert (folder / "metrics.jsonl").read_text() == before


class Killed(RuntimeError):
    pass


def test_cli_resume_after_a_kill_equals_uninterrupted(sweep, tmp_path):
    root, result = sweep
    cfg = resolve("graph-level", [a for a in TINY if a != "--set"] + ["model.dropout=0.2"])

    def kill(seed: int, row: dict) -> None:
        if row["epoch"] == 1:
            raise Killed

    common = dict(device="cpu", cache_dir=root / "cache")
    full = train_seeds(cfg, [0], run_root=tmp_path / "a", **common)
    with pytest.raises(Killed):
        train_seeds(cfg, [0], run_root=tmp_path / "b", on_epoch=kill, **common)
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--set", "model.dropout=0.2", "--resume",
            "--device", "cpu", "--runs-dir", str(tmp_path / "b"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    resumed = json.loads(r.stdout)["runs"][0]
    assert resumed["metrics"] == full["runs"][0]["metrics"] and resumed["best_epoch"] == full["runs"][0]["best_epoch"]


def test_help_has_examples():
    for cmd in (["train"], ["eval"]):
        r = run(*cmd, "--help")
        assert r.exit_code == 0 and "Examples" in r.stdout and "xmask" in r.stdout


@pytest.mark.parametrize("args, code, needle", [
    (["train", "--dataset", "no-such-set"], 2, "unknown dataset"),
    (["train", "--preset", "no-such-preset"], 2, "unknown preset"),
    (["train", "--preset", "node-level", "--dataset", "MUTAG"], 2, "has no node-level task"),
    (["train", "--dataset", "cora", "--set", "task.level=graph"], 2, "has no graph-level task"),
    (["train", "--preset", "graph-level", "--set", "model.head_powers=[1,2,3,9]"], 2, "structure.powers.k"),
    (["train", "--preset", "graph-level", "--set", "model.hiden=8"], 2, "model.hidden"),
    (["train", "--preset", "graph-level", "--seeds", "4-1"], 2, "--seeds"),
    (["train", "--preset", "graph-level", "--seed", "1", "--seeds", "0-2"], 2, "not both"),
    (["train", "--preset", "graph-level", "--device", "tpu"], 2, "--device"),
    (["train", "--preset", "graph-level", "--set", "train.precision=fp8"], 2, "train.precision"),
    (["train", "--preset", "graph-level", "--set", "model.node_struct=spd"], 2, "model.node_struct"),
    (["train", "--preset", "graph-level", "--set", "model.node_struct=rwse"], 2, "structure.rrwp.enabled=true"),
    (["train", "--preset", "cora-link", "--set", "model.node_struct=degree"], 2, "model.node_struct"),
    (["train", "--preset", "edge-regression"], 2, "edge.file"),
    (["eval", "does/not/exist"], 6, "not a run directory"),
])
def test_bad_input_is_one_line_and_an_exit_code(args, code, needle, tmp_path):
    r = run(*args, "--cache-dir", str(tmp_path / "c")) if args[0] == "train" else run(*args)
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert needle in one_error_line(r)


def test_corrupt_cache_is_exit_4(sweep, tmp_path):
    root, _ = sweep
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(root / "cache", cache)
    (path,) = (cache / "mutag").glob("*.h5")
    with h5py.File(path, "r") as f:
        info = f["powers/values"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(b"\xff\x00\xff\x00")
    r = run("train", "--preset", "graph-level", *TINY, "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(cache))
    assert r.exit_code == 4
    assert "corrupt" in one_error_line(r)


# ------------------------------------------------------------- other levels
FAST_STRUCTURE = ["--set", "structure.spd.enabled=false", "--set", "structure.spectrum.enabled=false",
                  "--set", "structure.powers.k=2", "--set", "model.heads=2", "--set", "model.head_powers=[1,2]", "--set", "model.hidden=16",
                  "--set", "model.layers=1", "--set", "train.epochs=2", "--set", "train.warmup_epochs=1"]


def test_node_level_train_then_eval_reproduces(tmp_path):
    r = run("--format", "json", "train", "--dataset", "cora", *FAST_STRUCTURE, "--set", "structure.partition.parts=0",
            "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["dataset"], out["level"], out["metric"]) == ("Cora", "node", "accuracy")
    assert out["runs"][0]["split"]["train"] == 140 and out["runs"][0]["split"]["test"] == 1000  # Planetoid public
    assert "prepared" in r.stderr  # the missing cache was prepared first, and it said so
    folder = tmp_path / "runs" / "cora-node" / "0"
    _eval_reproduces_test(folder, tmp_path / "cache", out)


def test_node_level_with_structural_channels_trains_and_eval_reproduces(tmp_path):
    """model.node_struct at node level: Cora's 1433 columns + one-hot degree (65, capped) + RWSE (2 steps)."""
    r = run("--format", "json", "train", "--dataset", "cora", *FAST_STRUCTURE, "--set", "structure.partition.parts=0",
            "--set", "model.node_struct=degree+rwse", "--set", "structure.rrwp.enabled=true",
            "--set", "structure.rrwp.steps=2", "--set", "train.epochs=1", "--device", "cpu",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["features"]["node_struct"]["dim"] == 65 + 2  # Cora's largest degree, 168, passes the cap of 64
    folder = tmp_path / "runs" / "cora-node" / "0"
    saved = json.loads((folder / "config.json").read_text())
    assert (saved["model"]["in_dim"], saved["model"]["struct_dim"]) == (1433 + 67, 67)
    _eval_reproduces_test(folder, tmp_path / "cache", out)


def test_graph_level_with_structural_channels_trains_and_eval_reproduces(tmp_path):
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--set", "model.node_struct=degree+rwse",
            "--set", "structure.rrwp.enabled=true", "--set", "structure.rrwp.steps=4", "--device", "cpu",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["features"]["node_struct"] == {
        "kind": "degree+rwse", "dim": 5 + 4,
        "detail": "one-hot degree (5, capped at 64), RWSE diag(P^1..P^4) from the cached RRWP (4)"}
    folder = tmp_path / "runs" / "mutag-graph" / "0"
    saved = json.loads((folder / "config.json").read_text())
    assert (saved["model"]["in_dim"], saved["model"]["struct_dim"]) == (7 + 9, 9)
    e = run("--format", "json", "eval", str(folder), "--split", "all", "--device", "cpu",
            "--cache-dir", str(tmp_path / "cache"))
    assert e.exit_code == 0, e.stderr
    ev = json.loads(e.stdout)
    assert ev["metrics"] == ev["recorded"] == out["runs"][0]["metrics"]


def test_link_level_train_records_the_protocol(tmp_path):
    # cora-link states head_powers [0, 1, 2, 4] (its tuned value), which two heads over k = 2 cannot take: back to
    # the default one-power-per-head list for the small model.
    r = run("--format", "json", "train", "--preset", "cora-link", *FAST_STRUCTURE, "--set", "model.head_powers=null",
            "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["level"], out["metric"]) == ("link", "mrr")
    assert 0 < out["runs"][0]["metrics"]["test"] <= 1
    config = json.loads((tmp_path / "runs" / "cora-link" / "0" / "config.json").read_text())
    assert config["link"]["protocol"] == "shared" and config["split"]["seed"] == 0
    # The structure was prepared from training edges only, under its own cache folder.
    assert list((tmp_path / "cache" / "cora-train-edges").glob("*.h5"))
    assert not (tmp_path / "cache" / "cora").exists()


def test_edge_regression_from_a_file(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    n = 60
    u, v = rng.integers(0, n, 400), rng.integers(0, n, 400)
    keys = {}
    for a, b in zip(u, v):
        if a != b:
            keys.setdefault((min(a, b), max(a, b)), None)
    rows = ["src,dst,delay"] + [f"{a},{b},{(a % 7) + (b % 7) + 0.5}" for a, b in keys]
    path = tmp_path / "edges.csv"
    path.write_text("\n".join(rows) + "\n")
    r = run("--format", "json", "train", "--preset", "edge-regression", "--set", f"edge.file={path}",
            *FAST_STRUCTURE, "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["level"], out["metric"], out["dataset"]) == ("edge", "mae", "edges")
    assert out["runs"][0]["metrics"]["test"] > 0
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst,delay\n0,1,x\n")
    # Another runs dir: the default ./runs holds the run above, which a new run may not replace.
    r = run("train", "--preset", "edge-regression", "--set", f"edge.file={bad}", "--cache-dir", str(tmp_path / "c2"),
            "--runs-dir", str(tmp_path / "runs2"))
    assert r.exit_code == 2 and "bad.csv" in one_error_line(r)
    r = run("train", "--preset", "edge-regression", "--set", f"edge.file={tmp_path / 'missing.csv'}",
            "--cache-dir", str(tmp_path / "c2"), "--runs-dir", str(tmp_path / "runs2"))
    assert r.exit_code == 3 and "missing.csv" in one_error_line(r)


def test_edge_regression_file_with_repeated_rows_trains_as_the_merged_file(tmp_path):
    """Rows repeated with their targets merge: the same numbers as the file with each row once, one log line."""
    import numpy as np

    rng = np.random.default_rng(1)
    pairs = list(dict.fromkeys((min(a, b), max(a, b)) for a, b in rng.integers(0, 50, (300, 2)) if a != b))
    rows = [f"{a},{b},{(a % 5) + (b % 3) + 0.25}" for a, b in pairs]
    (tmp_path / "clean.csv").write_text("src,dst,delay\n" + "\n".join(rows) + "\n")
    (tmp_path / "repeats.csv").write_text("src,dst,delay\n" + "\n".join(rows[:20] + rows[:5] + rows[20:] + rows[-3:])
                                          + "\n")
    out = {}
    for name in ("clean", "repeats"):
        r = run("--format", "json", "train", "--preset", "edge-regression", "--set", f"edge.file={tmp_path / name}.csv",
                *FAST_STRUCTURE, "--device", "cpu", "--runs-dir", str(tmp_path / f"runs-{name}"),
                "--cache-dir", str(tmp_path / "cache"))
        assert r.exit_code == 0, r.stderr
        out[name] = json.loads(r.stdout)["runs"][0]["metrics"]
        merged = r.stderr.count("merged 8 repeated rows of repeats.csv; first: line 22 repeats line 2")
        assert merged == (1 if name == "repeats" else 0)
    assert "test" in out["clean"] and out["repeats"] == out["clean"]


def test_planted_processed_file_does_not_run_and_training_works(tmp_path):
    """a pickle planted as `_pyg/MUTAG/processed/data.pt` never runs; train re-processes."""
    import torch

    cache = tmp_path / "C"
    assert run("prepare", "mutag", "--cache-dir", str(cache)).exit_code == 0
    marker = tmp_path / "program-ran"

    class Planted:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save(Planted(), cache / "_pyg" / "MUTAG" / "processed" / "data.pt")
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--set", "train.epochs=1",
            "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(cache))
    assert r.exit_code == 0, r.stderr
    assert not marker.exists()
    assert json.loads(r.stdout)["runs"][0]["epochs_run"] == 1
    assert "re-processed from the raw files" in r.stderr


# ------------------------------------------------------ run-folder integrity
ONE = [*TINY, "--set", "train.epochs=1", "--device", "cpu"]


@pytest.fixture
def warm_cache(sweep, tmp_path) -> Path:
    """A copy of the sweep's MUTAG cache: no test here pays for prepare."""
    import shutil

    root, _ = sweep
    shutil.copytree(root / "cache", tmp_path / "cache")
    return tmp_path / "cache"


def _train(tmp_path: Path, cache: Path, *extra: str):
    return run("--format", "json", "train", "--preset", "graph-level", *ONE, "--name", "r",
               "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(cache), *extra)


def test_rerun_without_resume_or_overwrite_is_refused(tmp_path, warm_cache):
    assert _train(tmp_path, warm_cache).exit_code == 0
    folder = tmp_path / "runs" / "r" / "0"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".lock"}
    r = _train(tmp_path, warm_cache, "--set", "train.lr=3e-3")
    assert r.exit_code == 2
    assert "exists; use --resume to continue it or --overwrite to replace it" in one_error_line(r)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".lock"} == before
    r = _train(tmp_path, warm_cache, "--set", "train.lr=3e-3", "--overwrite")
    assert r.exit_code == 0, r.stderr
    assert json.loads((folder / "config.json").read_text())["train"]["lr"] == 3e-3
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 1


def test_resume_refuses_another_config_naming_the_keys(tmp_path, warm_cache):
    assert _train(tmp_path, warm_cache, "--set", "train.epochs=2").exit_code == 0
    folder = tmp_path / "runs" / "r" / "0"
    metrics = (folder / "metrics.jsonl").read_text()
    r = _train(tmp_path, warm_cache, "--set", "train.lr=0.003", "--set", "train.epochs=30", "--resume")
    assert r.exit_code == 2
    keys = one_error_line(r).split("differs from the run's in ")[1].split(";")[0].split(", ")
    assert keys == ["train.lr"]  # named once, as --set writes it; the epoch budget may differ
    r = _train(tmp_path, warm_cache, "--set", "model.hidden=8", "--resume")  # another model
    assert r.exit_code == 2 and "model.hidden" in one_error_line(r)
    assert (folder / "metrics.jsonl").read_text() == metrics
    # config.json rewritten behind the checkpoint's back (the old failure): the checkpoint's record disagrees with
    # it, a run folder whose files do not belong together (exit 6, both values named).
    good = (folder / "config.json").read_text()
    cfg = json.loads(good)
    cfg["train"]["lr"] = cfg["config"]["train"]["lr"] = 0.003
    (folder / "config.json").write_text(json.dumps(cfg))
    r = _train(tmp_path, warm_cache, "--set", "train.lr=0.003", "--set", "train.epochs=2", "--resume")
    assert r.exit_code == 6 and "last.pt is not this run's checkpoint" in one_error_line(r)
    assert "train.lr = 0.01" in one_error_line(r) and "says 0.003" in one_error_line(r)
    (folder / "config.json").write_text(good)
    # Only the epoch budget may change: more epochs continue the same run.
    r = _train(tmp_path, warm_cache, "--set", "train.epochs=3", "--set", "train.patience=50", "--resume")
    assert r.exit_code == 2 and "train.patience" in one_error_line(r)
    r = _train(tmp_path, warm_cache, "--set", "train.epochs=3", "--resume")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in rows] == [0, 1, 2] and rows[:2] == [json.loads(x) for x in metrics.splitlines()]


def test_overwrite_killed_after_its_config_cannot_resume_into_the_old_checkpoint(tmp_path, warm_cache, monkeypatch):
    """The issue's sequence: a finished lr 1e-3 run, a new lr 3e-3 start killed right after config.json, --resume."""
    from xmask_cli.engine.runs import RunDir

    assert _train(tmp_path, warm_cache, "--set", "train.epochs=2").exit_code == 0
    folder = tmp_path / "runs" / "r" / "0"
    real = RunDir.save_config

    def save_then_die(self, config):
        real(self, config)
        raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "save_config", save_then_die)
    r = _train(tmp_path, warm_cache, "--set", "train.lr=0.003", "--set", "train.epochs=3", "--overwrite")
    assert r.exit_code == 130
    monkeypatch.setattr(RunDir, "save_config", real)
    # The old checkpoints went before the new config was written.
    assert not (folder / "last.pt").exists() and not (folder / "best.pt").exists()
    r = _train(tmp_path, warm_cache, "--set", "train.epochs=2", "--resume")  # the old settings
    assert r.exit_code == 2 and "train.lr" in one_error_line(r)
    r = _train(tmp_path, warm_cache, "--set", "train.lr=0.003", "--set", "train.epochs=3", "--resume")
    assert r.exit_code == 0, r.stderr
    assert json.loads((folder / "config.json").read_text())["train"]["lr"] == 0.003
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 3


def test_a_second_train_into_a_locked_folder_fails_at_once(tmp_path, warm_cache):
    import os
    import subprocess
    import sys
    import textwrap

    folder = tmp_path / "runs" / "r" / "0"
    code = textwrap.dedent(f"""
        import time
        from xmask_cli.engine.runs import RunDir
        with RunDir({str(folder)!r}).lock():
            print("locked", flush=True)
            time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "locked"
        r = _train(tmp_path, warm_cache)
        assert r.exit_code == 2
        assert f"in use by another xmask process (pid {child.pid})" in one_error_line(r)
        assert not (folder / "metrics.jsonl").exists()
    finally:
        child.kill()
        child.wait(timeout=30)
    assert _train(tmp_path, warm_cache).exit_code == 0


@pytest.mark.parametrize("args", [["--name", "../../x"], ["--name", "ABS"], ["--set", "run.name=../../x"],
                                  ["--name", ".."], ["--name", "a/b"]])
def test_run_names_are_one_path_segment(tmp_path, warm_cache, args):
    (tmp_path / "deep" / "er").mkdir(parents=True)
    runs = tmp_path / "deep" / "er" / "runs"
    absolute = tmp_path / "abs" / "path"  # an absolute name, inside the test's folder
    args = [str(absolute) if a == "ABS" else a for a in args]
    r = run("train", "--preset", "graph-level", *ONE, *args, "--runs-dir", str(runs), "--cache-dir", str(warm_cache))
    assert r.exit_code == 2 and "not a run name" in one_error_line(r)
    assert not (tmp_path / "deep" / "x").exists() and not absolute.exists()
    assert not runs.exists()


# ------------------------------------------------------------ exit codes
def test_infinite_lr_is_exit_2_and_a_diverging_run_exit_7(tmp_path, warm_cache):
    r = _train(tmp_path, warm_cache, "--set", "train.lr=inf")
    assert r.exit_code == 2 and "train.lr: expected a finite number" in one_error_line(r)
    r = run("-q", "train", "--preset", "graph-level", *ONE, "--set", "train.epochs=2", "--set", "train.lr=1e30",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(warm_cache))
    assert r.exit_code == 7
    line = one_error_line(r)
    assert "training diverged: non-finite" in line and "train.skip_nonfinite=true" in line
    rows = [json.loads(x) for x in (tmp_path / "runs" / "mutag-graph" / "0" / "metrics.jsonl").read_text().splitlines()
            ] if (tmp_path / "runs" / "mutag-graph" / "0" / "metrics.jsonl").exists() else []
    assert all(r["loss"] == r["loss"] for r in rows)  # no NaN ever written


@pytest.mark.parametrize("args, needle", [
    (["--seed", str(2**32)], "2^32 - 1"),
    (["--seeds", "0-99999999999"], "2^32 - 1"),
    (["--seeds", "0-20000"], "more than 10000 seeds"),
    (["--set", "train.weight_decay=-1"], "train.weight_decay"),
])
def test_out_of_range_seeds_and_settings_are_exit_2(tmp_path, args, needle):
    r = run("train", "--preset", "graph-level", *args, "--cache-dir", str(tmp_path / "c"),
            "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2 and needle in one_error_line(r)
    assert not (tmp_path / "c").exists() and not (tmp_path / "runs").exists()


def test_an_edge_file_too_small_to_split_is_exit_2_before_any_work(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text("src,dst,delay\n0,1,1.0\n1,2,2.0\n2,3,0.5\n")
    r = run("train", "--preset", "edge-regression", "--set", f"edge.file={path}", "--cache-dir", str(tmp_path / "c"),
            "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2 and "too few for the edge.fractions" in one_error_line(r)
    assert not any((tmp_path / "c").rglob("*.h5"))


def test_damaged_run_files_are_exit_6_naming_the_file(tmp_path, warm_cache):
    import torch

    assert _train(tmp_path, warm_cache).exit_code == 0
    folder = tmp_path / "runs" / "r" / "0"
    good = (folder / "config.json").read_text()
    (folder / "config.json").write_text(good[: len(good) // 2])
    for cmd in (["eval", str(folder), "--cache-dir", str(warm_cache)],):
        r = run(*cmd)
        assert r.exit_code == 6 and f"{folder / 'config.json'} is damaged" in one_error_line(r)
    # --resume trusts the config recorded in last.pt, and writes config.json anew.
    r = _train(tmp_path, warm_cache, "--resume")
    assert r.exit_code == 0, r.stderr
    assert json.loads((folder / "config.json").read_text()) == json.loads(good)
    # A truncated checkpoint, and one holding a pickled object (never unpickled, torch's advice never repeated).
    best = (folder / "best.pt").read_bytes()
    (folder / "best.pt").write_bytes(best[: len(best) // 2])
    r = run("eval", str(folder), "--cache-dir", str(warm_cache))
    assert r.exit_code == 6 and f"checkpoint {folder / 'best.pt'} is damaged" in one_error_line(r)
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save({"model": Planted()}, folder / "best.pt")
    r = run("eval", str(folder), "--cache-dir", str(warm_cache))
    line = one_error_line(r)
    assert r.exit_code == 6 and "best.pt" in line and "weights_only" not in line and not marker.exists()
    # A checkpoint of another model.
    torch.save({"model": {"w": torch.zeros(2)}, "epoch": 0}, folder / "best.pt")
    r = run("eval", str(folder), "--cache-dir", str(warm_cache))
    assert r.exit_code == 6 and "does not fit the model" in one_error_line(r)


def test_explain_out_that_is_a_file_names_out_not_the_cache(tmp_path, warm_cache):
    assert _train(tmp_path, warm_cache).exit_code == 0
    f = tmp_path / "maps.txt"
    f.write_text("x")
    r = run("-q", "explain", str(tmp_path / "runs" / "r" / "0"), "--graph", "0", "--out", str(f), "--device", "cpu",
            "--cache-dir", str(warm_cache))
    line = one_error_line(r)
    assert r.exit_code == 5 and "output folder" in line and "--out" in line and "cache" not in line


def test_a_symlinked_lock_in_the_run_folder_is_exit_2_and_truncates_nothing(tmp_path, warm_cache):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    folder = tmp_path / "runs" / "r" / "0"
    folder.mkdir(parents=True)
    (folder / ".lock").symlink_to(notes)
    r = _train(tmp_path, warm_cache)
    assert r.exit_code == 2
    assert f"{folder / '.lock'} is a symbolic link" in one_error_line(r)
    assert notes.read_text() == "my notes\n"
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]


# ------------------------------------------------------------------ a full disk
def _full_disk_line(r) -> str:
    """The one `error:` line (the epochs logged before it aside), with no traceback."""
    return full_disk_line(r.exit_code, r.stderr, r.stdout)


def test_train_on_a_full_disk_is_exit_5_and_the_run_resumes_to_the_uninterrupted_result(tmp_path, warm_cache,
                                                                                          monkeypatch):
    """The disk fills while epoch 2's last.pt is written (fsync raising ENOSPC): one line, exit 5, the old
    last.pt kept, no temp file; with room again --resume ends where an uninterrupted run ends."""
    import errno
    import os

    from xmask_cli import fs

    three = ["--set", "train.epochs=3"]
    whole = run("--format", "json", "train", "--preset", "graph-level", *ONE, *three, "--name", "whole",
                "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(warm_cache))
    assert whole.exit_code == 0, whole.stderr
    real, calls = os.fsync, [0]

    def fsync(fd):
        if ".last.pt." in os.readlink(f"/proc/self/fd/{fd}"):
            calls[0] += 1
            if calls[0] == 3:  # epochs 0 and 1 written, epoch 2's fails
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(fs.os, "fsync", fsync)
    r = _train(tmp_path, warm_cache, *three)
    folder = tmp_path / "runs" / "r" / "0"
    assert f"writing {folder / 'last.pt'}" in _full_disk_line(r)
    monkeypatch.setattr(fs.os, "fsync", real)
    assert sorted(p.name for p in folder.iterdir() if p.name != "curves.png") == \
        [".lock", "best.pt", "config.json", "last.pt", "metrics.jsonl"]
    from xmask_cli.engine.runs import RunDir

    assert RunDir(folder).load_checkpoint()["epoch"] == 1  # the good file was never replaced
    r = _train(tmp_path, warm_cache, *three, "--resume")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["runs"][0]["metrics"] == json.loads(whole.stdout)["runs"][0]["metrics"]
    from xmask_cli.engine.runs import without_timing

    rows = without_timing(json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines())
    ref = without_timing(json.loads(x) for x in (tmp_path / "runs" / "whole" / "0" / "metrics.jsonl").read_text().splitlines())
    assert rows == ref and [x["epoch"] for x in rows] == [0, 1, 2]


def test_a_metrics_line_cut_by_a_full_disk_is_taken_back(tmp_path, monkeypatch):
    """A short write of a metrics row (the disk filled midway) leaves the file as it was: resume reads it."""
    import errno
    import os

    from xmask_cli.engine import runs
    from xmask_cli.engine.runs import RunDir
    from xmask_cli.errors import NotWritableError

    rd = RunDir(tmp_path / "r")
    rd.append_metrics({"epoch": 0, "loss": 1.0})
    real = os.write
    monkeypatch.setattr(runs.os, "write", lambda fd, data: real(fd, data[:7]))
    with pytest.raises(NotWritableError, match="no space left on device writing"):
        rd.append_metrics({"epoch": 1, "loss": 0.5})
    monkeypatch.setattr(runs.os, "write", real)
    assert rd.read_metrics() == [{"epoch": 0, "loss": 1.0}]
    assert errno.ENOSPC  # the errno the message stands for


def test_train_on_a_full_tmpfs_is_exit_5_and_resumes_once_there_is_room(small_tmpfs, warm_cache):
    """On a real 300 KB tmpfs."""
    import subprocess

    full = small_tmpfs("300k", "the simulated full disk test covers training")
    args = ["train", "--preset", "graph-level", *ONE, "--set", "model.hidden=64", "--set", "train.epochs=2",
            "--name", "r", "--runs-dir", str(full / "runs"), "--cache-dir", str(warm_cache)]
    r = run(*args)
    line = _full_disk_line(r)
    assert f"(file system at {full}," in line
    folder = full / "runs" / "r" / "0"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    subprocess.run(["mount", "-o", "remount,size=20m", str(full)], check=True)
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.stderr
    assert (folder / "summary.json").is_file() and (folder / "last.pt").is_file()


@pytest.mark.parametrize("dry", [False, True])
def test_options_reach_the_library_as_values_not_as_set_text(monkeypatch, tmp_path, dry):
    """--folds and --logger are passed as typed values after the user's --set texts, and resolve to the config
    their --set texts give."""
    import xmask_cli.api as api
    from xmask_cli.errors import UsageError

    seen: dict = {}

    def capture(config, overrides, **kwargs):
        seen.update(config=config, overrides=overrides, **kwargs)
        raise UsageError("captured")

    monkeypatch.setattr(api, "dry_run" if dry else "train", capture)
    r = run("train", "--preset", "graph-level", "--set", "model.hidden=16", "--folds", "3", "--logger", "tensorboard",
            "--seeds", "0-2", "--runs-dir", str(tmp_path), *(["--dry-run"] if dry else []))
    assert r.exit_code == 2 and one_error_line(r) == "error: captured"
    assert seen["overrides"] == ["model.hidden=16"]  # only what the user wrote as text
    assert (seen["data__folds"], seen["train__loggers"], seen["seeds"]) == (3, ["tensorboard"], [0, 1, 2])
    typed = [(k.replace("__", "."), seen[k]) for k in ("train__loggers", "data__folds")]
    cfg, _ = api._resolve_config("graph-level", None, None, [*seen["overrides"], *typed])
    texts = ["model.hidden=16", "train.loggers=[tensorboard]", "data.folds=3"]
    assert cfg == resolve("graph-level", texts) and (cfg.data.folds, cfg.train.loggers) == (3, ["tensorboard"])
