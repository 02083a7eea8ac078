"""``xmask tune`` on a tiny MUTAG study, in-process: validation only, failures recorded, outputs, best.yaml."""
from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import optuna
import pytest
import torch
import yaml

from tests.cli_helpers import run
from tests.tune.conftest import TINY, db_trials
from xmask_cli import config_resolve as R
from xmask_cli.engine.batching.features import input_features
from xmask_cli.engine.batching.graph_store import GraphStore
from xmask_cli.engine.tasks.graph import GraphTask, _eval_stream, graph_labels
from xmask_cli.engine.training import loop as loop_mod
from xmask_cli.tune.study import TuneOptions, run_study

SEEDS = [0, 1]


def _study(root: Path, cache: Path, trials: int = 3, final: list[int] | None = None, extra: list[str] = (),
           seeds_: list[int] = SEEDS, **kw) -> dict:
    cfg = R.resolve("mutag", [*TINY, *extra])
    opts = TuneOptions(trials=trials, seeds=seeds_, final_seeds=final if final is not None else [0],
                       study="s", runs_dir=root, cache_dir=cache, offline=True, pruner="none", **kw)
    return run_study(cfg, opts)


def _spy_on_parts(monkeypatch) -> list[str]:
    """Record every part a graph task evaluates: per-epoch validation and the final scores (``score`` reads
    ``evaluate``)."""
    parts: list[str] = []
    real = GraphTask.evaluate

    def evaluate(self, model, part):
        parts.append(part)
        return real(self, model, part)

    monkeypatch.setattr(GraphTask, "evaluate", evaluate)
    return parts


def _poison_test_labels(monkeypatch) -> None:
    """Every graph task scores test against flipped labels (MUTAG is binary: 1 - y, so test ROC-AUC becomes 1 - AUC)."""
    real = GraphTask.__init__

    def init(self, cache_path, graphs, split, metric, batch_size, seed, device, loader_workers=0, needs=(),
             node_struct="none", log_mask=None, **kw):
        real(self, cache_path, graphs, split, metric, batch_size, seed, device, loader_workers, needs, node_struct,
             log_mask, **kw)
        y = graph_labels(graphs).clone()
        test = torch.as_tensor(split.test, dtype=torch.long)
        y[test] = 1 - y[test]
        features, _ = input_features(graphs, node_struct, cache_path)
        store = GraphStore(cache_path, features, y, log_mask)
        self.eval_streams["test"] = _eval_stream(cache_path, store, split.test, batch_size, needs)

    monkeypatch.setattr(GraphTask, "__init__", init)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, mutag_cache):
    """One tiny study (3 trials x 2 seeds, final seed 0), shared by the tests that only read it."""
    mp = pytest.MonkeyPatch()
    parts = _spy_on_parts(mp)
    root = tmp_path_factory.mktemp("clean")
    try:
        mp.setenv("XMASK_OFFLINE", "1")
        summary = _study(root, mutag_cache)
    finally:
        mp.undo()
    return summary, root / "s", list(parts)


def test_the_search_never_reads_test_and_poisoned_test_labels_change_nothing(clean, tmp_path, monkeypatch,
                                                                              mutag_cache):
    summary, folder, parts = clean
    # The search scored train and val only; test was scored only by the final seed, after the search.
    n_search = sum(len(SEEDS) for _ in range(summary["trials"]["complete"]))
    search_parts, final_parts = parts[:-3], parts[-3:]
    assert "test" not in search_parts and set(search_parts) == {"train", "val"}
    assert final_parts == ["train", "val", "test"] and summary["trials"]["complete"] == 3
    assert search_parts.count("train") == n_search  # one train score per trained seed (the restored best)

    _poison_test_labels(monkeypatch)
    poisoned = _study(tmp_path, mutag_cache, plots=False)
    clean_trials = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'study.db'}").trials
    poison_trials = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}").trials
    # Same sampler seed, same values drawn, same validation scores: test labels never entered the search.
    assert [t.params for t in poison_trials] == [t.params for t in clean_trials]
    assert [t.value for t in poison_trials] == [t.value for t in clean_trials]
    assert [t.user_attrs["val_values"] for t in poison_trials] == [t.user_attrs["val_values"] for t in clean_trials]
    assert len({t.value for t in clean_trials}) > 1  # the trials differ: equal values are no accident of a flat search
    # The poison did reach test: ROC-AUC on flipped binary labels is 1 - the clean one.
    clean_test = summary["final"]["test"]["values"][0]
    assert poisoned["final"]["test"]["values"][0] == pytest.approx(1 - clean_test, abs=1e-12)
    assert poisoned["final"]["val"] == summary["final"]["val"]


def test_trial_0_runs_the_presets_own_values(clean):
    _, folder, _ = clean
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'study.db'}")
    cfg = R.resolve("mutag", TINY)
    first = min(study.trials, key=lambda t: t.number)
    assert first.params == {"train.lr": cfg.train.lr, "model.dropout": cfg.model.dropout}
    assert any(t.params != first.params for t in study.trials[1:])  # the others are drawn


def test_trial_0_is_the_preset_also_when_resume_makes_the_study(tmp_path, mutag_cache):
    """``--resume`` on a study that does not exist yet (how a worker joins): trial 0 is still the preset's."""
    _study(tmp_path, mutag_cache, trials=2, final=[], plots=False, resume=True)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}")
    cfg = R.resolve("mutag", TINY)
    first, second = sorted(study.trials, key=lambda t: t.number)
    assert first.params == {"train.lr": cfg.train.lr, "model.dropout": cfg.model.dropout}
    assert second.params != first.params
    # Resumed again with trials in the study: no second copy of the preset is queued.
    _study(tmp_path, mutag_cache, trials=3, final=[], plots=False, resume=True)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}")
    assert len(study.trials) == 3 and sum(t.params == first.params for t in study.trials) == 1


def test_outputs_agree_with_the_study_database(clean):
    summary, folder, _ = clean
    states = db_trials(folder / "study.db")  # read with sqlite3, not through Optuna
    assert [n for n, _ in states] == [0, 1, 2] and {s for _, s in states} == {"COMPLETE"}
    con = sqlite3.connect(folder / "study.db")
    values = dict(con.execute("SELECT t.number, v.value FROM trials t JOIN trial_values v USING (trial_id)"))
    losses = {n: json.loads(v) for n, v in con.execute(
        "SELECT t.number, a.value_json FROM trials t JOIN trial_user_attributes a USING (trial_id) "
        "WHERE a.key = 'val_loss_mean'")}
    con.close()
    with open(folder / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["number"]) for r in rows] == [0, 1, 2]
    for r in rows:
        per_seed = json.loads(r["val_values"])
        assert len(per_seed) == len(SEEDS)
        assert float(r["value"]) == pytest.approx(values[int(r["number"])], abs=1e-12)
        assert float(r["value"]) == pytest.approx(sum(per_seed) / len(per_seed), abs=1e-12)  # mean over seeds
        assert 1e-3 <= float(r["train.lr"]) <= 3e-2
    # The best value; equal values: the lower mean validation loss, then the earlier trial.
    best_number = max(values, key=lambda n: (values[n], -losses[n], -n))
    assert summary["best"]["number"] == best_number and summary["best"]["value"] == values[best_number]
    on_disk = json.loads((folder / "summary.json").read_text())
    assert on_disk["best"]["number"] == best_number and on_disk["trials"]["complete"] == 3
    final = summary["final"]
    import numpy as np

    test = np.asarray(final["test"]["values"])
    assert final["test"]["mean"] == pytest.approx(test.mean()) and final["test"]["std"] == pytest.approx(test.std())
    for png in ("optimization_history.png", "param_importances.png", "parallel_coordinate.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert not list(folder.glob(".*.tmp")) and not list(folder.glob(".*.png"))  # temp names all replaced


def test_best_yaml_reproduces_the_best_trials_validation_score(clean, tmp_path, mutag_cache):
    summary, folder, _ = clean
    best = summary["best"]
    data = yaml.safe_load((folder / "best.yaml").read_text())
    assert "tune" not in data
    assert data["train"]["lr"] == best["params"]["train.lr"] and data["model"]["dropout"] == best["params"]["model.dropout"]
    r = run("--format", "json", "train", "--preset", str(folder / "best.yaml"), "--seeds", "0-1",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(mutag_cache))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["name"] == "s-best"
    assert out["aggregate"]["val"]["values"] == best["val_values"]
    assert out["aggregate"]["val"]["mean"] == pytest.approx(best["value"], abs=1e-12)


def test_a_failing_trial_is_recorded_with_its_reason_and_the_study_goes_on(tmp_path, monkeypatch, mutag_cache):
    real, calls = loop_mod.train_task, []

    def out_of_memory_on_the_second_training(task, model_cfg, train_cfg, run_dir, **kw):
        calls.append(str(run_dir))
        if len(calls) == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(task, model_cfg, train_cfg, run_dir, **kw)

    monkeypatch.setattr(loop_mod, "train_task", out_of_memory_on_the_second_training)
    # 60 is a multiple of 3 and 4, 64 of 4 only: (64, 3) is a combination no model takes.
    space = ["model.hidden=64", "tune.model.hidden={choice: [60, 64]}", "tune.model.heads={choice: [3, 4]}"]
    summary = _study(tmp_path, mutag_cache, trials=5, final=[], extra=space, plots=False, seeds_=[0])
    trials = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}").trials
    assert len(trials) == 5 and summary["trials"]["total"] == 5
    trained = [t for t in trials if int(t.params["model.hidden"]) % int(t.params["model.heads"]) == 0]
    assert len(trained) >= 3 and len(trained) < 5  # the space does hit the bad pair, and the study went on
    oom = trained[1]
    assert f"trial-{oom.number:04d}" in calls[1]
    for t in trials:
        heads = int(t.params["model.heads"])
        if t is oom:
            assert t.state.name == "FAIL" and "OutOfMemoryError: CUDA out of memory" in t.user_attrs["fail_reason"]
        elif t not in trained:
            assert t.state.name == "FAIL"
            assert t.user_attrs["fail_reason"].startswith("configuration rejected: ")
            assert f"multiple of model.heads ({heads})" in t.user_attrs["fail_reason"]
        else:
            assert t.state.name == "COMPLETE" and t.value is not None, (t.number, t.user_attrs)
    assert summary["trials"]["fail"] == 5 - len(trained) + 1 and summary["trials"]["complete"] == len(trained) - 1
    with open(tmp_path / "s" / "trials.csv") as f:
        reasons = {int(r["number"]): r["fail_reason"] for r in csv.DictReader(f)}
    assert "OutOfMemoryError" in reasons[oom.number]


def test_a_study_with_no_completed_trial_says_so(tmp_path, monkeypatch, mutag_cache):
    def always_oom(*a, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(loop_mod, "train_task", always_oom)
    r = run("tune", "--preset", "mutag", *[x for s in TINY for x in ("--set", s)], "--trials", "2", "--seeds", "0",
            "--runs-dir", str(tmp_path), "--study", "s", "--cache-dir", str(mutag_cache))
    assert r.exit_code == 1
    assert "no trial completed" in r.stderr and "OutOfMemoryError" in r.stderr
    assert [s for _, s in db_trials(tmp_path / "s" / "study.db")] == ["FAIL", "FAIL"]
    assert "skipped: needs 1 completed trial" in r.stderr  # plots that cannot be drawn are skipped with a note
    assert (tmp_path / "s" / "trials.csv").is_file() and not (tmp_path / "s" / "best.yaml").exists()


def test_joining_a_study_with_other_settings_is_refused_before_any_trial(clean, mutag_cache):
    from xmask_cli.errors import UsageError

    summary, folder, _ = clean
    before = db_trials(folder / "study.db")
    with pytest.raises(UsageError, match="was made with another seeds"):
        _study(folder.parent, mutag_cache, trials=1, seeds_=[0], plots=False)
    with pytest.raises(UsageError, match="was made with another space"):
        _study(folder.parent, mutag_cache, trials=1, plots=False,
               extra=["tune.model.dropout={float: [0.0, 0.4], step: 0.1}"])
    assert db_trials(folder / "study.db") == before  # nothing was added


def _open(folder: Path, overrides: list[str]):
    """Open (or create) study ``s`` in ``folder`` for the tiny MUTAG preset under ``overrides``: what ``run_study``
    does before its first trial."""
    from xmask_cli.tune.identity import earlier_digests, identity
    from xmask_cli.tune.space import check_space
    from xmask_cli.tune.study import _Search, open_study

    cfg = R.resolve("mutag", [*TINY, *overrides])
    opts = TuneOptions(trials=0, seeds=SEEDS, study="s", runs_dir=folder.parent)
    search = _Search(url=f"sqlite:///{folder / 'study.db'}", direction="maximize",
                     identity=identity(cfg, check_space(cfg, full=True), SEEDS, "accuracy"),
                     earlier=earlier_digests(cfg), start={}, stride=3, warmup=10)
    return open_study("s", folder, opts, search)


def _digest_before_2026_12_02(cfg, drop: tuple[str, ...]) -> str:
    """config_sha256 as xmask wrote it before 2026-12-02: a digest of the config less tune and run, and of the
    train keys less ``drop``."""
    import hashlib

    base = {k: v for k, v in cfg.to_dict().items() if k not in ("tune", "run")}
    # train.loggers came after every digest form: no earlier version's digest held it.
    base["train"] = {k: v for k, v in base["train"].items() if k not in (*drop, "loggers")}
    return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:16]


def test_a_study_goes_on_under_settings_that_do_not_change_numbers_and_names_those_that_do(tmp_path):
    from xmask_cli.errors import UsageError

    folder = tmp_path / "s"
    folder.mkdir()
    first = _open(folder, []).user_attrs["xmask"]
    # loader workers, the log-mask cache, where the data sits and the preset's own words change no trial's numbers
    same = ["train.loader_workers=2", "train.log_cache_mb=0", f"data.root={tmp_path}", "description=elsewhere"]
    assert _open(folder, same).user_attrs["xmask"] == first
    with pytest.raises(UsageError, match=r"was made with another train\.lr \("):
        _open(folder, ["train.lr=0.0123"])
    with pytest.raises(UsageError, match=r"was made with another model\.layers, train\.precision \("):
        _open(folder, ["train.precision=bf16", "model.layers=3"])


def test_a_setting_added_to_xmask_since_a_study_was_made_is_no_difference_at_its_default(tmp_path):
    """As a run resumes: a study written before ``train.skip_nonfinite`` existed goes on when this process leaves
    it at its default, and is refused when it does not."""
    from xmask_cli.errors import UsageError

    folder = tmp_path / "s"
    folder.mkdir()
    url = f"sqlite:///{folder / 'study.db'}"
    now = _open(folder, []).user_attrs["xmask"]
    assert now["config"]["train"]["skip_nonfinite"] is False  # the schema's default
    older = json.loads(json.dumps(now))
    del older["config"]["train"]["skip_nonfinite"]
    optuna.load_study(study_name="s", storage=url).set_user_attr("xmask", older)
    with pytest.raises(UsageError, match=r"was made with another train\.skip_nonfinite \("):
        _open(folder, ["train.skip_nonfinite=true"])
    assert _open(folder, []).user_attrs["xmask"] == now  # written anew in today's form


@pytest.mark.parametrize("drop", [(), ("log_cache_mb",), ("loader_workers", "log_cache_mb")],
                         ids=["every-train-key", "before-log_cache_mb", "not-saved-keys-dropped"])
def test_a_study_made_by_an_earlier_version_resumes_and_is_restamped(tmp_path, drop):
    """Identities written before 2026-12-02 hold a digest of the config, in one of three forms: the same settings
    resume, and the identity is written anew; other settings are still refused."""
    from xmask_cli.errors import UsageError

    folder = tmp_path / "s"
    folder.mkdir()
    url = f"sqlite:///{folder / 'study.db'}"
    new = _open(folder, []).user_attrs["xmask"]
    old = {k: v for k, v in new.items() if k != "config"}
    old["config_sha256"] = _digest_before_2026_12_02(R.resolve("mutag", TINY), drop)
    optuna.load_study(study_name="s", storage=url).set_user_attr("xmask", old)
    with pytest.raises(UsageError, match="was made with another config_sha256"):  # not these settings
        _open(folder, ["train.lr=0.0123"])
    assert optuna.load_study(study_name="s", storage=url).user_attrs["xmask"] == old  # a refusal writes nothing
    assert _open(folder, []).user_attrs["xmask"] == new
    assert optuna.load_study(study_name="s", storage=url).user_attrs["xmask"] == new


def _tune_cli(tmp_path: Path, cache: Path, *extra: str):
    return run("tune", "--preset", "mutag", *[x for s in TINY for x in ("--set", s)], "--trials", "1", "--seeds", "0",
               "--final-seeds", "none", "--runs-dir", str(tmp_path), "--study", "s", "--cache-dir", str(cache), *extra)


@pytest.mark.parametrize("name", [".tune.lock", "study.db", "summary.json"])
def test_a_study_folder_whose_own_file_is_a_link_is_refused_and_the_target_untouched(tmp_path, mutag_cache, name):
    from tests.cli_helpers import one_error_line

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / name).symlink_to(notes)
    r = _tune_cli(tmp_path, mutag_cache)
    assert r.exit_code == 2
    assert f"{tmp_path / 's' / name} is a symbolic link" in one_error_line(r)
    assert notes.read_text() == "my notes\n"
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [name]


def test_a_study_db_that_is_no_database_names_the_file_not_storage(tmp_path, mutag_cache):
    from tests.cli_helpers import one_error_line

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.db").write_text("not a database, just notes\n")
    r = _tune_cli(tmp_path, mutag_cache)
    assert r.exit_code == 2
    line = one_error_line(r)
    assert f"{(tmp_path / 's' / 'study.db').resolve()} is not an SQLite study" in line or \
        f"{tmp_path / 's' / 'study.db'} is not an SQLite study" in line
    assert "--storage" not in line
    assert (tmp_path / "s" / "study.db").read_text() == "not a database, just notes\n"
    # A --storage the user did pass is still named as such.
    r = _tune_cli(tmp_path, mutag_cache, "--storage", f"sqlite:///{tmp_path / 's' / 'study.db'}")
    assert r.exit_code == 2 and "--storage" in one_error_line(r)


def test_tune_help_shows_the_default_storage_with_its_placeholders():
    r = run("tune", "--help", env={"COLUMNS": "300"})
    assert r.exit_code == 0
    assert "sqlite:///<runs-dir>/<study>/study.db" in r.stdout
    assert "runs//study.db" not in r.stdout
