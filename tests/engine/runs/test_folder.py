"""Run folders: locking and replacing a run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.errors import UsageError

REPO = Path(__file__).resolve().parents[3]


def test_a_second_lock_fails_at_once_naming_the_holder(tmp_path):
    run = RunDir(tmp_path / "r")
    with run.lock():
        with pytest.raises(UsageError, match=f"pid {os.getpid()}"):
            with RunDir(tmp_path / "r").lock():
                pass
    with run.lock():  # released at the end of the block
        pass


def test_a_killed_holder_releases_the_lock(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from xmask_cli.engine.runs.folder import RunDir
        with RunDir({str(tmp_path / 'r')!r}).lock():
            print("locked", flush=True)
            time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=f"pid {child.pid}"):
            with RunDir(tmp_path / "r").lock():
                pass
    finally:
        child.kill()
        child.wait(timeout=30)
    with RunDir(tmp_path / "r").lock():
        pass


def test_remove_run_files_takes_checkpoints_and_temp_files_only(tmp_path):
    run = RunDir(tmp_path / "r")
    for name in RunDir.FILES:
        (run.path / name).write_text("x")
    (run.path / ".last.pt.abc123.tmp").write_text("half")
    (run.path / "notes.md").write_text("mine")
    assert run.has_run_files()
    run.remove_run_files()
    assert not run.has_run_files()
    assert sorted(p.name for p in run.path.iterdir()) == ["notes.md"]


@pytest.mark.parametrize("name", [RunDir.LOCK, *RunDir.FILES])
def test_a_run_folder_whose_own_file_is_a_link_is_refused_and_the_target_untouched(tmp_path, name):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    folder = tmp_path / "runs" / "r" / "0"
    folder.mkdir(parents=True)
    (folder / name).symlink_to(notes)
    with pytest.raises(UsageError, match=f"{folder / name} is a symbolic link"):
        with RunDir(folder).lock():
            pass
    assert notes.read_text() == "my notes\n"
    assert (folder / name).is_symlink()  # the user's link is theirs to remove


def test_a_link_planted_after_the_check_is_still_never_followed(tmp_path):
    """The lock and the metrics are opened with O_NOFOLLOW: a link appearing between check and open is refused."""
    from xmask_cli.fs import open_nofollow

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    run = RunDir(tmp_path / "r")
    (run.path / RunDir.METRICS).symlink_to(notes)
    with pytest.raises(UsageError, match="is a symbolic link"):
        run.append_metrics({"epoch": 0})
    with pytest.raises(UsageError, match="is a symbolic link"):
        open_nofollow(run.path / RunDir.METRICS, os.O_RDWR | os.O_CREAT)
    assert notes.read_text() == "mine"
