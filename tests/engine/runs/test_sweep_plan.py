"""A sweep checks its counts before it writes anything, and makes each run's folder when that run starts."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.errors import UsageError

REPO = Path(__file__).resolve().parents[3]
TINY = ["--set", "model.hidden=8", "--set", "model.heads=2", "--set", "model.layers=1", "--set", "train.epochs=1",
        "--set", "train.warmup_epochs=0"]


def _entries(folder: Path) -> list[str]:
    """Every path under ``folder`` (relative), folders included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_the_fold_bomb_exits_2_at_once_and_creates_nothing(tmp_path):
    """``--folds 999999999``: before any folder (a separate process, killed if it ever hangs making folders)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "xmask_cli", "train", "--preset", "graph-level", "--folds", "999999999",
           "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: data.folds: must be at most 10000"), r.stderr
    assert _entries(tmp_path / "runs") == [] and not (tmp_path / "runs").exists()
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("k, needle", [
    (64, "the smallest class has 63 graphs, fewer than the 64 folds; use --folds 63 or fewer"),  # MUTAG: 125 / 63
    (189, "the dataset has 188 graphs, fewer than the 189 folds; use --folds 188 or fewer"),
])
def test_more_folds_than_the_data_holds_is_exit_2_before_prepare_and_any_folder(k, needle, tmp_path, monkeypatch):
    made: list[Path] = []
    mkdir = Path.mkdir

    def recording_mkdir(self, *args, **kwargs):  # a folder made and removed again would leave no trace on disk
        made.append(Path(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", recording_mkdir)
    runs = tmp_path / "runs"
    r = run("train", "--preset", "graph-level", *TINY, "--folds", str(k), "--runs-dir", str(runs),
            "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 2, r.stderr
    assert needle in one_error_line(r)
    assert [p for p in made if runs in (p, *p.parents)] == [] and not runs.exists()
    # Checked once the labels are read, before the structure is computed: no cache file.
    assert list((tmp_path / "cache").rglob("*.h5")) == []


def test_a_sweep_makes_each_run_folder_when_that_run_starts(tmp_path):
    import xmask_cli

    root = tmp_path / "runs" / "mutag-graph"
    seen: list[tuple[int, list[str]]] = []
    xmask_cli.train("graph-level", seeds=[0, 1, 2], device="cpu", runs_dir=tmp_path / "runs",
                    cache_dir=tmp_path / "cache", model__hidden=8, model__heads=2, model__layers=1,
                    train__epochs=1, train__warmup_epochs=0,
                    on_seed_start=lambda seed, epochs: seen.append((seed, sorted(p.name for p in root.iterdir()))))
    # When seed s starts, the folders of seeds 0..s exist and no later one does.
    assert seen == [(0, ["0"]), (1, ["0", "1"]), (2, ["0", "1", "2"])]


def test_a_locked_later_seed_refuses_the_sweep_at_once_and_nothing_is_made(tmp_path):
    """Another process holds seed 1's folder: a 0-1 sweep fails before it prepares or makes seed 0's folder."""
    folder = tmp_path / "runs" / "mutag-graph" / "1"
    code = textwrap.dedent(f"""
        import time
        from xmask_cli.engine.runs.folder import RunDir
        with RunDir({str(folder)!r}).lock():
            print("locked", flush=True)
            time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "locked"
        r = run("train", "--preset", "graph-level", *TINY, "--seeds", "0-1", "--runs-dir", str(tmp_path / "runs"),
                "--cache-dir", str(tmp_path / "cache"))
        assert r.exit_code == 2, r.stderr
        assert f"run folder {folder} is in use by another xmask process (pid {child.pid})" in one_error_line(r)
        assert sorted(p.name for p in folder.parent.iterdir()) == ["1"]  # seed 0's folder was never made
        assert list((tmp_path / "cache").rglob("*.h5")) == []
    finally:
        child.kill()
        child.wait(timeout=30)


def test_a_run_started_in_a_folder_another_sweep_holds_is_refused(tmp_path):
    """The lock taken when a run starts is held to the end of the sweep: a second holder is refused."""
    from xmask_cli.engine.runs.folder import RunDir

    first = RunDir(tmp_path / "r" / "0", create=False)
    assert not first.path.exists()
    with first.lock():
        with pytest.raises(UsageError, match="in use by another xmask process"):
            RunDir(tmp_path / "r" / "0", create=False).check_free()
        with pytest.raises(UsageError, match="in use by another xmask process"):
            with RunDir(tmp_path / "r" / "0").lock():
                pass
    RunDir(tmp_path / "r" / "0", create=False).check_free()  # released: free again
    assert not (tmp_path / "r").exists()  # a lock that wrote no run file leaves no folder behind


@pytest.mark.parametrize("max_folds", [0, -1, 2.5, True])
def test_max_folds_must_be_a_positive_int(max_folds, tmp_path):
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.sweep import train_seeds

    with pytest.raises(UsageError, match="max_folds: expected an int >= 1"):
        train_seeds(resolve("graph-level", ["data.folds=3"]), [0], cache_dir=tmp_path / "c",
                    run_root=tmp_path / "runs", max_folds=max_folds)
    assert not (tmp_path / "runs").exists()
