"""``xmask tune`` as separate processes: a study killed with SIGKILL resumes (its running trial failed through
Optuna's heartbeat), two processes share one SQLite study."""
from __future__ import annotations

import csv
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.cli_helpers import run
from tests.tune.conftest import db_trials, subprocess_env, tiny_args, xmask_cmd
from xmask_cli.tune import storage as storage_mod


def _tune(root: Path, cache: Path, *extra: str) -> list[str]:
    return xmask_cmd("tune", "--preset", "mutag", *tiny_args(), "--seeds", "0", "--final-seeds", "none",
                     "--no-plots", "--study", "s", "--runs-dir", str(root), "--cache-dir", str(cache), "--device",
                     "cpu", *extra)


def _values(db: Path) -> dict[int, float]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT t.number, v.value FROM trials t JOIN trial_values v USING (trial_id)"))
    finally:
        con.close()


def _heartbeats(db, number: int) -> int:
    """Rows of Optuna's ``trial_heartbeats`` table for trial ``number``."""
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM trial_heartbeats h JOIN trials t USING (trial_id) "
                           "WHERE t.number = ?", (number,)).fetchone()[0]
    finally:
        con.close()


def test_a_study_killed_mid_trial_resumes_and_its_trial_count_continues(tmp_path, mutag_cache, monkeypatch):
    db = tmp_path / "s" / "study.db"
    proc = subprocess.Popen(_tune(tmp_path, mutag_cache, "--trials", "8"), env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    try:
        # Kill it as soon as one trial has finished and the next one is running with its first heartbeat written
        # (Optuna's heartbeat thread writes it just after the trial starts: killing before would test nothing).
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                trials = db_trials(db) if db.is_file() else []
                states = [s for _, s in trials]
                beating = bool(trials) and _heartbeats(db, trials[-1][0]) > 0
            except sqlite3.OperationalError:  # the file exists before Optuna has created its tables
                states, beating = [], False
            if "COMPLETE" in states and states[-1] == "RUNNING" and beating:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the study ended before it could be killed: " + proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    before = db_trials(db)
    done_before = {n: v for n, v in _values(db).items()}
    running = [n for n, s in before if s == "RUNNING"]
    assert done_before and len(running) == 1  # killed inside a trial
    assert _heartbeats(db, running[0]) == 1  # the killed process recorded Optuna's heartbeat for its trial

    # The resuming process takes a heartbeat older than 2 s for a dead process (xmask's default: 120 s).
    monkeypatch.setattr(storage_mod, "HEARTBEAT_S", 1)
    monkeypatch.setattr(storage_mod, "GRACE_S", 2)
    monkeypatch.setenv("XMASK_OFFLINE", "1")
    time.sleep(3.5)  # SQLite's clock has whole seconds
    r = run(*_tune(tmp_path, mutag_cache, "--trials", "8", "--resume")[3:])
    assert r.exit_code == 0, r.stderr
    after = db_trials(db)
    # Up to --trials searched trials in all: the killed one is recorded failed with its reason, and does not
    # count (it says nothing of its configuration), so 8 complete trials follow.
    assert [n for n, _ in after] == list(range(9))
    assert dict(after)[running[0]] == "FAIL"
    assert all(s == "COMPLETE" for n, s in after if n != running[0])
    assert f"trial {running[0]}: no heartbeat from its process for over 2 s; recorded as failed" in r.stderr
    with open(tmp_path / "s" / "trials.csv") as f:
        reason = {int(row["number"]): row["fail_reason"] for row in csv.DictReader(f)}[running[0]]
    assert reason.startswith("interrupted: its process stopped")
    # The trials of the killed process are kept as they were; the new ones continue the numbering.
    assert {n: v for n, v in _values(db).items() if n in done_before} == done_before
    resumed = [int(n) for n in re.findall(r"^trial (\d+): val", r.stderr, flags=re.M)]
    assert resumed == list(range(len(before), 9))
    assert f"{len(before) - 1} finished trial(s) and 1 interrupted (not counted); running {9 - len(before)} more" \
        in r.stderr


def test_two_processes_share_one_sqlite_study(tmp_path, mutag_cache):
    procs = [subprocess.Popen(_tune(tmp_path, mutag_cache, "--trials", "3"), env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    mine = [[int(n) for n in re.findall(r"^trial (\d+): val", err, flags=re.M)] for _, err in outs]
    # Each process ran its 3 trials; together the sum, every trial number once.
    assert [len(m) for m in mine] == [3, 3]
    assert sorted(mine[0] + mine[1]) == list(range(6))
    db = tmp_path / "s" / "study.db"
    assert db_trials(db) == [(n, "COMPLETE") for n in range(6)]
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        params = con.execute("SELECT t.number, p.param_name, p.param_value FROM trial_params p "
                             "JOIN trials t USING (trial_id)").fetchall()
    finally:
        con.close()
    assert len(params) == 6 * 2  # two searched keys per trial, none written twice
    lrs = [v for _, k, v in params if k == "train.lr"]
    assert len(set(lrs)) == 6  # the processes drew different configurations
