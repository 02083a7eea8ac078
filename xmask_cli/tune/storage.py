"""Where a study is stored: Optuna's RDB storage (SQLite by default) with Optuna's own trial heartbeat.

Every process that runs trials records a heartbeat for its running trial every :data:`HEARTBEAT_S`
seconds (Optuna's ``RDBStorage(heartbeat_interval=...)``, run by ``Study.optimize``). Before each trial,
and when a study is opened, a running trial whose heartbeat is older than :data:`GRACE_S` seconds is
failed (``optuna.storages.fail_stale_trials``): its process was killed. So a worker can join a study that
others are running, and a dead worker's trial does not stay "running".

A storage file that is not an Optuna study (another program's SQLite database) is refused before Optuna
could create its tables in it.
"""
from __future__ import annotations

import inspect
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from xmask_cli.errors import UsageError, first_line

__all__ = ["HEARTBEAT_S", "GRACE_S", "open_storage", "fail_stale", "refuse_foreign_sqlite"]

#: A running trial's process records a heartbeat this often (seconds; Optuna takes whole seconds).
HEARTBEAT_S = 30
#: A running trial whose last heartbeat is older than this (seconds) is failed: its process is gone.
GRACE_S = 120
#: Tables every Optuna RDB storage has: a database with tables of its own and not these is another program's.
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})


def _sqlite_path(url: str) -> Path | None:
    """The file of an ``sqlite:///`` URL (None: another backend, or an in-memory database)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # malformed: RDBStorage says why
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def refuse_foreign_sqlite(path: Path, named: str) -> None:
    """Refuse (UsageError, exit 2) a file at ``path`` that is not an SQLite database, or one that holds tables
    but no Optuna study; read only (``mode=ro``): the file is left byte for byte as it was.

    ``named``: how the message names the file (the path, or the ``--storage`` URL the user passed).
    """
    try:
        if not path.is_file() or path.stat().st_size == 0:  # no file yet, or an empty database: a new study
            return
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except (sqlite3.Error, OSError) as exc:
        raise UsageError(f"{named} is not an SQLite study ({first_line(exc)}); move it away, or pick another "
                         f"--study or --runs-dir") from None
    if tables and not OPTUNA_TABLES <= tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise UsageError(f"{named} is an SQLite database of another program (tables {shown}), not an Optuna "
                         f"study; xmask does not write into it: move it away, or pick another --study or --runs-dir")


def _stale_callback_name() -> str:
    # Optuna 4.9 renamed failed_trial_callback; earlier versions know only the old name.
    names = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    return "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names else "failed_trial_callback"


def open_storage(url: str, db: Path | None = None, log: Callable[[str], None] = lambda m: None) -> Any:
    """Optuna's storage at ``url``, with the heartbeat; ``db``: the study folder's own ``study.db`` when no
    ``--storage`` was given (errors then name the file, not an option the user did not pass).

    Raises:
        UsageError: a malformed URL, an unreachable server, a missing driver, a file that is no Optuna study.
    """
    path = db if db is not None else _sqlite_path(url)
    if path is not None:
        refuse_foreign_sqlite(path, str(db) if db is not None else f"--storage '{url}'")

    def stale(study: Any, trial: Any) -> None:
        log(f"trial {trial.number}: no heartbeat from its process for over {GRACE_S} s; recorded as failed "
            f"(interrupted)")

    kwargs: dict[str, Any] = {"heartbeat_interval": HEARTBEAT_S, "grace_period": GRACE_S,
                              _stale_callback_name(): stale}
    if url.startswith("sqlite"):
        # Parallel writers wait for SQLite's lock instead of failing after the default 5 s.
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    try:
        with warnings.catch_warnings():  # the heartbeat arguments are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as exc:
        if db is not None:
            raise UsageError(f"{db} is not an SQLite study ({first_line(exc)}); move it away, or pick another "
                             f"--study or --runs-dir") from None
        raise UsageError(f"--storage '{url}': {first_line(exc)}") from None


def fail_stale(study: Any) -> None:
    """Fail the study's running trials whose heartbeat stopped (what ``Study.optimize`` does before each trial)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
