"""Shared set-up of the ``xmask tune`` tests: a tiny MUTAG search and its structure cache, prepared once."""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: A small model, a few epochs, a two-key space replacing the preset's: trials of about a second.
TINY = ["task.metric=rocauc", "model.hidden=16", "model.layers=1", "train.epochs=3", "train.warmup_epochs=1", "tune=null",
        "tune.train.lr={float: [1.0e-3, 3.0e-2], log: true}", "tune.model.dropout={float: [0.0, 0.5], step: 0.1}"]


def tiny_args(*extra: str) -> list[str]:
    """``--set`` arguments of :data:`TINY` (plus ``extra`` overrides) for the CLI."""
    out: list[str] = []
    for s in (*TINY, *extra):
        out += ["--set", s]
    return out


@pytest.fixture(scope="session")
def mutag_cache(tmp_path_factory) -> Path:
    """A prepared MUTAG structure cache (read only by the tests that use it)."""
    from xmask_cli import config_resolve as R
    from xmask_cli.prepare import prepare_dataset

    cache = tmp_path_factory.mktemp("tune-cache")
    prepare_dataset(R.resolve("mutag"), cache_dir=cache, offline=True)
    return cache


def subprocess_env() -> dict[str, str]:
    """Environment of an ``xmask`` child process: this checkout, offline, one thread."""
    return {**os.environ, "PYTHONPATH": str(REPO), "XMASK_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def xmask_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "xmask_cli", *args]


def db_trials(db: Path) -> list[tuple[int, str]]:
    """``(number, state)`` of every trial, read from the SQLite file directly (not through Optuna)."""
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute("SELECT number, state FROM trials").fetchall())
    finally:
        con.close()
