"""The study folder ``<runs>/<study>/``: checked before the first trial, and locked while a study is opened.

xmask writes the files of :data:`STUDY_FILES` there (through a temp name, never through a link) and the
trial and final runs under :data:`STUDY_FOLDERS`. Anything else at one of those names was put there by
someone else; refusing it up front costs nothing, where finding it after the first trial costs a trial.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from xmask_cli.errors import NotWritableError, UsageError
from xmask_cli.fs import ensure_writable_dir, open_nofollow, refuse_links
from xmask_cli.tune.outputs import PLOTS

__all__ = ["STUDY_FILES", "STUDY_FOLDERS", "check_study_folder", "folder_lock"]

#: The files a study folder holds (SQLite's side files included): plain files, never written through a link.
STUDY_FILES = (".tune.lock", "study.db", "study.db-journal", "study.db-wal", "study.db-shm", "best.yaml",
               "trials.csv", "summary.json", *PLOTS)
#: The folders of a study: one run folder per trial, and the best configuration's final runs.
STUDY_FOLDERS = ("trials", "final")

_HINT = "pick another --study or --runs-dir"


def check_study_folder(folder: Path) -> None:
    """Make ``folder`` and check everything the study will write there, before any trial runs.

    Raises:
        NotWritableError: the folder (or a parent) is a file, the folder, a run folder or ``study.db``
            cannot be written (exit 5).
        UsageError: one of :data:`STUDY_FILES` is a link, a folder or anything but a plain file, or one of
            :data:`STUDY_FOLDERS` is not a folder (exit 2); each names the path.
    """
    ensure_writable_dir(folder, "study folder", _HINT)
    refuse_links(folder, STUDY_FILES, "study folder")  # links and anything but a plain file at a file's name
    for name in STUDY_FOLDERS:
        path = folder / name
        if path.is_symlink() and not path.exists():
            raise UsageError(f"{path} is a link to nothing, not a folder: xmask writes its {name} runs there; "
                             f"remove it, or {_HINT}")
        if path.exists() and not path.is_dir():  # a link to a folder (on another disk) is fine
            raise UsageError(f"{path} is a file, not a folder: xmask writes its {name} runs there; move it away, "
                             f"or {_HINT}")
        if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
            raise NotWritableError(f"study folder {path} is not writable; {_HINT}")
    db = folder / "study.db"
    if db.is_file() and not os.access(db, os.R_OK | os.W_OK):
        raise NotWritableError(f"{db} is not writable (the study is recorded there); {_HINT}")


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Serialise opening a study: two processes creating one SQLite file at once race on its tables."""
    folder.mkdir(parents=True, exist_ok=True)
    refuse_links(folder, STUDY_FILES, "study folder")
    fd = open_nofollow(folder / ".tune.lock", os.O_RDWR | os.O_CREAT, "study folder")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
