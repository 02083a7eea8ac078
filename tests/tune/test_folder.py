"""The study folder is checked before the first trial: a folder, FIFO or link at a file name xmask writes, a file
at one of its folders, a study folder that cannot be written."""
from __future__ import annotations

import os

import pytest

from tests.cli_helpers import one_error_line, run
from tests.tune.conftest import TINY
from xmask_cli.engine.training import loop as loop_mod
from xmask_cli.errors import NotWritableError, UsageError
from xmask_cli.tune.folder import STUDY_FILES, STUDY_FOLDERS, check_study_folder


def test_a_folder_planted_at_trials_csv_is_refused_before_any_trial(tmp_path, monkeypatch, mutag_cache):
    trained: list[str] = []
    monkeypatch.setattr(loop_mod, "train_task", lambda *a, **kw: trained.append("trial") or pytest.fail("trained"))
    (tmp_path / "s" / "trials.csv").mkdir(parents=True)
    r = run("tune", "--preset", "mutag", *[x for s in TINY for x in ("--set", s)], "--trials", "2", "--seeds", "0",
            "--final-seeds", "none", "--runs-dir", str(tmp_path), "--study", "s", "--cache-dir", str(mutag_cache))
    assert r.exit_code == 2
    assert f"{tmp_path / 's' / 'trials.csv'} is a folder, not a file" in one_error_line(r)
    assert trained == []
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["trials.csv"]  # no study.db, no trial folder


@pytest.mark.parametrize("name", [n for n in STUDY_FILES if n.endswith((".png", ".yaml", ".json", ".db"))])
def test_every_file_name_the_study_writes_refuses_a_folder(tmp_path, name):
    (tmp_path / name).mkdir()
    with pytest.raises(UsageError, match=f"{tmp_path / name} is a folder, not a file"):
        check_study_folder(tmp_path)


def test_a_fifo_at_summary_json_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "summary.json")
    with pytest.raises(UsageError, match=r"summary.json is a FIFO"):
        check_study_folder(tmp_path)


@pytest.mark.parametrize("name", STUDY_FOLDERS)
def test_a_file_or_dangling_link_at_a_folder_name_is_refused(tmp_path, name):
    (tmp_path / name).write_text("notes\n")
    with pytest.raises(UsageError, match=f"{tmp_path / name} is a file, not a folder"):
        check_study_folder(tmp_path)
    (tmp_path / name).unlink()
    (tmp_path / name).symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="is a link to nothing"):
        check_study_folder(tmp_path)


def test_a_folder_linked_to_another_disk_and_the_files_of_an_earlier_call_are_taken(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    study = tmp_path / "s"
    study.mkdir()
    (study / "trials").symlink_to(tmp_path / "elsewhere")
    for name in ("trials.csv", "summary.json", "study.db"):
        (study / name).write_text("")
    (study / "final").mkdir()
    check_study_folder(study)


def test_a_study_folder_that_is_a_file_exits_5(tmp_path):
    (tmp_path / "s").write_text("notes\n")
    with pytest.raises(NotWritableError, match="is a file, not a folder"):
        check_study_folder(tmp_path / "s")
    with pytest.raises(NotWritableError, match="is a file, not a folder"):
        check_study_folder(tmp_path / "s" / "deeper")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_study_folder_or_database_exits_5(tmp_path):
    (tmp_path / "trials").mkdir()
    (tmp_path / "trials").chmod(0o500)
    try:
        with pytest.raises(NotWritableError, match="trials is not writable"):
            check_study_folder(tmp_path)
    finally:
        (tmp_path / "trials").chmod(0o700)
    (tmp_path / "study.db").write_bytes(b"")
    (tmp_path / "study.db").chmod(0o400)
    with pytest.raises(NotWritableError, match="study.db is not writable"):
        check_study_folder(tmp_path)
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(NotWritableError, match="is not writable"):
            check_study_folder(tmp_path)
    finally:
        tmp_path.chmod(0o700)
