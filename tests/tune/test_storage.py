"""The study's storage: another program's SQLite file is refused and left as it was; a dead worker's running trial
is failed through Optuna's heartbeat while a live worker's is not."""
from __future__ import annotations

import sqlite3
import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import one_error_line, run
from tests.tune.conftest import TINY
from xmask_cli.errors import UsageError
from xmask_cli.tune import storage as storage_mod
from xmask_cli.tune.search import STALE_REASON, fail_reason, finished, interrupted, optimize


def _foreign_db(path: Path) -> bytes:
    """An SQLite file of another program: its own tables and rows, no Optuna schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    con.execute("CREATE TABLE trials (name TEXT)")  # a table name Optuna uses too: still not a study
    con.executemany("INSERT INTO invoices (amount) VALUES (?)", [(12.5,), (99.0,)])
    con.commit()
    con.close()
    return path.read_bytes()


def _tune(tmp_path: Path, cache: Path, *extra: str):
    return run("tune", "--preset", "mutag", *[x for s in TINY for x in ("--set", s)], "--trials", "1", "--seeds", "0",
               "--final-seeds", "none", "--no-plots", "--runs-dir", str(tmp_path), "--study", "s", "--cache-dir",
               str(cache), *extra)


def test_a_foreign_sqlite_file_at_study_db_is_refused_and_left_byte_identical(tmp_path, mutag_cache):
    db = tmp_path / "s" / "study.db"
    before = _foreign_db(db)
    r = _tune(tmp_path, mutag_cache)
    assert r.exit_code == 2
    line = one_error_line(r)
    assert f"{db} is an SQLite database of another program (tables invoices, trials), not an Optuna study" in line
    assert "--storage" not in line  # the user named no storage: the file is named
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == [".tune.lock", "study.db"]  # no trial ran
    # The same file named by --storage: refused, the option named.
    r = _tune(tmp_path, mutag_cache, "--storage", f"sqlite:///{db}", "--study", "s2")
    assert r.exit_code == 2 and f"--storage 'sqlite:///{db}' is an SQLite database of another program" \
        in one_error_line(r)
    assert db.read_bytes() == before


def test_an_empty_file_and_an_optuna_study_are_taken(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    storage_mod.refuse_foreign_sqlite(empty, "x")  # an empty database: a new study
    study_db = tmp_path / "study.db"
    optuna.create_study(study_name="s", storage=f"sqlite:///{study_db}")
    storage_mod.refuse_foreign_sqlite(study_db, "x")
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n")
    with pytest.raises(UsageError, match="notes.db is not an SQLite study"):
        storage_mod.refuse_foreign_sqlite(notes, str(notes))


def test_a_dead_workers_trial_is_failed_by_the_heartbeat_and_a_live_workers_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(storage_mod, "HEARTBEAT_S", 1)
    monkeypatch.setattr(storage_mod, "GRACE_S", 2)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    logs: list[str] = []
    storage = storage_mod.open_storage(url, log=logs.append)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    with warnings.catch_warnings():  # ask() outside optimize warns that the heartbeat is optimize's
        warnings.simplefilter("ignore")
        dead = study.ask()
    storage.record_heartbeat(dead._trial_id)  # the dead worker's last heartbeat
    time.sleep(3.5)  # older than the grace period (SQLite's clock has whole seconds)
    seen: dict[str, TrialState] = {}

    def objective(trial) -> float:
        # A second worker checks for stale trials while this one runs: the live trial keeps its heartbeat.
        time.sleep(3.5)
        other = optuna.load_study(study_name="s", storage=storage_mod.open_storage(url))
        storage_mod.fail_stale(other)
        seen["live"] = other.trials[trial.number].state
        return 1.0

    assert optimize(study, objective, trials=1) == 1
    trials = study.get_trials(deepcopy=False)
    assert trials[dead.number].state == TrialState.FAIL  # failed before the next trial was asked
    assert seen["live"] == TrialState.RUNNING and trials[1].state == TrialState.COMPLETE
    assert logs == [f"trial {dead.number}: no heartbeat from its process for over 2 s; recorded as failed "
                    f"(interrupted)"]
    # Failed without a reason of xmask's: interrupted, not counted against --trials under --resume.
    assert "fail_reason" not in trials[dead.number].user_attrs
    assert fail_reason(trials[dead.number]) == STALE_REASON and interrupted(trials[dead.number])
    assert finished(study) == 1
