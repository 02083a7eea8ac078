"""``xmask tune`` as separate processes: a study killed with SIGKILL resumes, two processes share one SQLite study."""
from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.tune.conftest import db_trials, subprocess_env, tiny_args, xmask_cmd


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


def test_a_study_killed_mid_trial_resumes_and_its_trial_count_continues(tmp_path, mutag_cache):
    db = tmp_path / "s" / "study.db"
    proc = subprocess.Popen(_tune(tmp_path, mutag_cache, "--trials", "8"), env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    try:
        # Kill it as soon as one trial has finished and the next one is running.
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                states = [s for _, s in db_trials(db)] if db.is_file() else []
            except sqlite3.OperationalError:  # the file exists before Optuna has created its tables
                states = []
            if "COMPLETE" in states and states[-1] == "RUNNING":
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

    r = subprocess.run(_tune(tmp_path, mutag_cache, "--trials", "8", "--resume"), env=subprocess_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    after = db_trials(db)
    # Up to --trials searched trials in all: the killed one is recorded failed with its reason, and does not
    # count (it says nothing of its configuration), so 8 complete trials follow.
    assert [n for n, _ in after] == list(range(9))
    assert dict(after)[running[0]] == "FAIL"
    assert all(s == "COMPLETE" for n, s in after if n != running[0])
    con = sqlite3.connect(db)
    reason = con.execute("SELECT a.value_json FROM trial_user_attributes a JOIN trials t USING (trial_id) "
                         "WHERE t.number = ? AND a.key = 'fail_reason'", (running[0],)).fetchone()[0]
    con.close()
    assert "interrupted" in reason
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


def test_resume_fails_only_trials_whose_process_is_gone(tmp_path, monkeypatch):
    """--resume records a RUNNING trial as failed only when nothing works on it any more: no heartbeat, a
    dead pid on this host, or a heartbeat older than STALE_AFTER_S; a live process's trial is left to it."""
    import socket

    import optuna
    from optuna.trial import TrialState

    from xmask_cli.tune import study as study_mod

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    st = optuna.create_study(study_name="s", storage=storage)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    here = socket.gethostname()
    records = {
        "no heartbeat": None,
        "dead pid here": {"host": here, "pid": dead.pid, "at": now},
        "live pid here": {"host": here, "pid": os.getppid(), "at": now},
        "old elsewhere": {"host": "another-host", "pid": 1, "at": now - study_mod.STALE_AFTER_S - 5},
        "fresh elsewhere": {"host": "another-host", "pid": 1, "at": now - 1},
    }
    numbers = {}
    for name, alive in records.items():
        trial = st.ask()
        if alive is not None:
            trial.set_user_attr("alive", alive)
        numbers[name] = trial.number
    logs: list[str] = []
    assert study_mod._fail_stale(st, storage, logs.append) == 3
    states = {t.number: t.state for t in st.get_trials(deepcopy=False)}
    for name in ("no heartbeat", "dead pid here", "old elsewhere"):
        assert states[numbers[name]] == TrialState.FAIL, name
        assert study_mod._interrupted(st.trials[numbers[name]])
    for name in ("live pid here", "fresh elsewhere"):
        assert states[numbers[name]] == TrialState.RUNNING, name
    assert any("left to it" in m for m in logs)


def test_heartbeat_refreshes_the_alive_record(tmp_path, monkeypatch):
    import optuna

    from xmask_cli.tune import study as study_mod

    monkeypatch.setattr(study_mod, "HEARTBEAT_S", 0.05)
    st = optuna.create_study(storage=optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}"))
    trial = st.ask()
    with study_mod._heartbeat(trial):
        first = st.trials[0].user_attrs["alive"]["at"]
        time.sleep(0.3)
        later = st.trials[0].user_attrs["alive"]["at"]
    assert first < later and st.trials[0].user_attrs["alive"]["pid"] == os.getpid()
