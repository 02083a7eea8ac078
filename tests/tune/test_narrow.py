"""``--set`` on a searched key takes it out of the space: every trial keeps the value set, with a note on stderr."""
from __future__ import annotations

import json

import optuna
import pytest

from tests.cli_helpers import run
from xmask_cli import config_resolve as R
from xmask_cli.errors import UsageError
from xmask_cli.tune.narrow import fixed_keys, fixed_note, narrow_space
from xmask_cli.tune.options import TuneOptions
from xmask_cli.tune.space import parse_space
from xmask_cli.tune.study import run_study


def test_fixed_keys_are_the_set_keys_less_those_whose_space_entry_is_given_too():
    assert fixed_keys(["model.hidden=16", "train.lr=0.01", "tune.train.lr={float: [1.0e-3, 1.0e-2]}"]) == \
        ("model.hidden",)
    assert fixed_keys(["model={heads: 2, dropout: 0.1}"]) == ("model", "model.heads", "model.dropout")
    assert fixed_keys([("model.hidden", 16), ("tune.model.hidden", {"choice": [16, 32]}), ("train.lr", 0.1)]) == \
        ("train.lr",)
    assert fixed_keys(["tune=null", "model.layers=2", "tune={model.layers: {int: [1, 2]}}"]) == ()
    assert fixed_keys([]) == ()


def test_narrow_space_drops_the_fixed_searched_keys_and_says_so():
    cfg = R.resolve("mutag", ["model.hidden=64", "train.lr=0.005"])
    searched = {p.key for p in parse_space(cfg.tune)}
    assert {"model.hidden", "train.lr", "model.layers"} <= searched
    narrowed, pinned = narrow_space(cfg, ("model.hidden", "train.lr", "data.folds"))
    assert pinned == ["model.hidden", "train.lr"]
    assert {p.key for p in parse_space(narrowed.tune)} == searched - {"model.hidden", "train.lr"}
    assert narrowed.model.hidden == 64 and narrowed.train.lr == 0.005
    assert [fixed_note(narrowed, k).split(" fixes")[0] for k in pinned] == \
        ["note: --set model.hidden=64", "note: --set train.lr=0.005"]
    assert narrow_space(cfg, ()) == (cfg, [])


def test_fixing_every_searched_key_is_refused(tmp_path):
    cfg = R.resolve("mutag", ["tune=null", "tune.train.lr={float: [1.0e-3, 1.0e-2]}", "train.lr=0.005"])
    with pytest.raises(UsageError, match=r"--set fixes every searched key \(train.lr\)"):
        run_study(cfg, TuneOptions(trials=1, runs_dir=tmp_path, fixed=("train.lr",)))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_tune_with_set_on_a_searched_key_trains_every_trial_with_that_value(tmp_path, mutag_cache):
    # A preset with its own two-key space (what --set tune.* would make explicit, and so keep searched).
    (tmp_path / "small.yaml").write_text("extends: mutag\ntask: {metric: rocauc}\nmodel: {hidden: 16, layers: 1}\n"
                                         "train: {epochs: 2, warmup_epochs: 1}\ntune: null\n")
    (tmp_path / "tiny.yaml").write_text("extends: small.yaml\ntune:\n  train.lr: {float: [1.0e-3, 3.0e-2], log: true}\n"
                                        "  model.dropout: {float: [0.0, 0.5], step: 0.1}\n")
    r = run("tune", "--preset", str(tmp_path / "tiny.yaml"), "--set", "model.dropout=0.3", "--trials", "2",
            "--seeds", "0", "--final-seeds", "none", "--no-plots", "--runs-dir", str(tmp_path / "runs"),
            "--study", "s", "--cache-dir", str(mutag_cache), env={"XMASK_OFFLINE": "1"})
    assert r.exit_code == 0, r.stderr
    assert "note: --set model.dropout=0.3 fixes a searched key: model.dropout is not searched" in r.stderr
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'runs' / 's' / 'study.db'}")
    assert [set(t.params) for t in study.trials] == [{"train.lr"}, {"train.lr"}]
    for t in study.trials:
        saved = json.loads((tmp_path / "runs" / "s" / "trials" / f"trial-{t.number:04d}" / "0" / "config.json")
                           .read_text())
        assert saved["model"]["dropout"] == 0.3
    assert set(study.user_attrs["xmask"]["space"]) == {"train.lr"}
