"""The ``tune:`` section: parsing, validation before any trial (exit 2, key named), drawing values."""
from __future__ import annotations

import optuna
import pytest

from tests.cli_helpers import one_error_line, run
from tests.tune.conftest import TINY, tiny_args
from xmask_cli import config as C
from xmask_cli import config_resolve as R
from xmask_cli.engine.runs.experiment import check_config
from xmask_cli.errors import ConfigError
from xmask_cli.tune.space import Param, check_space, decode, parse_space, start_point, suggest, with_values


@pytest.mark.parametrize("entry, key, words", [
    ("tune.model.hiden={int: [16, 64]}", "tune.model.hiden", "did you mean 'model.hidden'"),
    ("tune.train.lr={float: [1.0e-2, 1.0e-4], log: true}", "tune.train.lr", "empty range"),
    ("tune.train.lr={float: [0.001, 0.001]}", "tune.train.lr", "empty range"),
    ("tune.train.lr={float: [0, 0.1], log: true}", "tune.train.lr", "log range needs low > 0"),
    ("tune.model.layers={int: [1, 4], step: 2}", "tune.model.layers", "divide high - low"),
    ("tune.model.layers={float: [1, 4]}", "tune.model.layers", "takes integers"),
    ("tune.model.layers={int: [0, 2]}", "tune.model.layers", "value 0 is not valid"),
    ("tune.model.dropout={float: [0.0, 1.5]}", "tune.model.dropout", "value 1.5 is not valid"),
    ("tune.model.norm={choice: [post, middle]}", "tune.model.norm", "'middle'"),
    ("tune.model.norm={choice: []}", "tune.model.norm", "non-empty list"),
    ("tune.model.hidden={int: [16, 64]}", "tune.model.hidden", "value 17 is not valid"),  # 4 heads: 17 fits no model
    ("tune.model.head_powers={choice: [[1, 2, 3, 8]]}", "tune.model.head_powers", "structure.powers.k"),
    ("tune.model.hidden={range: [16, 64]}", "tune.model.hidden", "unknown entry 'range'"),
    ("tune.run.name={choice: [a, b]}", "tune.run.name", "not a hyper-parameter"),
    ("tune.model={int: [1, 2]}", "tune.model", "is a section"),
])
def test_a_bad_space_fails_before_any_trial_with_the_key_named(tmp_path, entry, key, words):
    r = run("tune", "--preset", "mutag", *tiny_args(entry), "--trials", "3", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 2, r.stderr
    line = one_error_line(r)
    assert line.startswith(f"error: {key}:") and words in line, line
    assert r.stdout == ""
    # Before any trial: no study was created, no data was loaded into a cache.
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_every_shipped_graph_node_and_link_preset_has_a_valid_space():
    for name, _level in (("graph-level", "graph"), ("mutag", "graph"), ("proteins", "graph"), ("node-level", "node"),
                        ("cora", "node"), ("citeseer", "node"), ("computers", "node"), ("link-level", "link"),
                        ("cora-link", "link")):
        cfg = R.resolve(name)
        params = check_space(cfg, full=True)  # every value probed on top of the preset, training's checks too
        keys = {p.key for p in params}
        if name in ("cora", "citeseer"):
            # GAT's own shape fixes width and depth (8 heads x 8, two attention layers): its space is the
            # recipe's rates and dropouts and the heads' powers.
            assert {"train.lr", "train.weight_decay", "model.layer_dropout", "model.attn_dropout",
                    "model.head_powers"} <= keys and not {"model.hidden", "model.layers"} & keys, name
            continue
        assert {"train.lr", "model.hidden", "model.dropout"} <= keys, name
        # Depth is searched everywhere but on Computers, whose preset fixes one layer (an epoch costs seconds).
        assert ("model.layers" in keys) == (name != "computers"), name


def test_tune_null_clears_and_set_replaces_an_inherited_space():
    assert R.resolve("mutag", ["tune=null"]).tune == {}
    cfg = R.resolve("mutag", TINY)
    assert sorted(cfg.tune) == ["model.dropout", "train.lr"]  # dotted keys stay whole
    nested = R.build(C.Config, {"tune": {"model": {"hidden": {"choice": [16, 32]}}}})
    assert [p.key for p in parse_space(nested.tune)] == ["model.hidden"]
    with pytest.raises(ConfigError, match="given twice"):
        parse_space({"model.hidden": {"choice": [16]}, "model": {"hidden": {"choice": [32]}}})


def test_suggest_draws_within_the_space_and_decodes_list_choices():
    cfg = R.resolve("mutag", ["tune=null", "tune.model.hidden={int: [16, 64], step: 16}",
                              "tune.train.lr={float: [1.0e-4, 1.0e-2], log: true}",
                              "tune.model.dropout={float: [0.0, 0.5], step: 0.1}",
                              "tune.model.head_powers={choice: [[1, 2, 3, 4], [1, 1, 2, 2]]}"])
    params = check_space(cfg)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen_powers = set()
    for _ in range(30):
        trial = study.ask()
        values = suggest(trial, params)
        assert values["model.hidden"] in (16, 32, 48, 64)
        assert 1e-4 <= values["train.lr"] <= 1e-2
        assert any(abs(values["model.dropout"] - g) < 1e-9 for g in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5))
        assert values["model.head_powers"] in ([1, 2, 3, 4], [1, 1, 2, 2])
        seen_powers.add(tuple(values["model.head_powers"]))
        # What the storage keeps (a JSON label for a list) decodes back to the value the trial trained.
        assert decode(params, trial.params) == values
        study.tell(trial, 0.0)
    assert seen_powers == {(1, 2, 3, 4), (1, 1, 2, 2)}


def test_a_key_the_drawn_architecture_does_not_read_is_not_drawn_and_stays_buildable():
    # A preset that sets ffn_mult=1 for its transformer: a gat trial drawing ffn_mult would be refused by the
    # architecture rule; instead the key is not drawn and goes back to its default, for trials and best.yaml.
    cfg = R.resolve("mutag", ["tune=null", "model.ffn_mult=1", "tune.model.arch={choice: [transformer, gat]}",
                              "tune.model.ffn_mult={choice: [1, 2, 4]}", "tune.model.layers={int: [1, 3]}"])
    params = check_space(cfg, full=True)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    archs = set()
    for _ in range(40):
        trial = study.ask()
        values = suggest(trial, params)
        archs.add(values["model.arch"])
        if values["model.arch"] == "gat":
            assert "model.ffn_mult" not in trial.params and values["model.ffn_mult"] == C.ModelSection().ffn_mult
        else:
            assert trial.params["model.ffn_mult"] == values["model.ffn_mult"] in (1, 2, 4)
        assert decode(params, trial.params) == values
        assert "model.ffn_mult" not in decode(params, trial.params, unread=False) or values["model.arch"] != "gat"
        built = with_values(cfg, values)  # the trial's config passes the architecture rule
        check_config(built)
        assert built.model.arch == values["model.arch"] and built.model.layers == values["model.layers"]
        study.tell(trial, 0.0)
    assert archs == {"transformer", "gat"}
    # Without model.arch in the space nothing is left out, as before.
    plain = check_space(R.resolve("mutag", ["tune=null", "tune.model.ffn_mult={choice: [1, 2]}"]))
    trial = optuna.create_study().ask()
    assert set(suggest(trial, plain)) == {"model.ffn_mult"} == set(trial.params)


def test_a_preset_without_a_space_is_refused(tmp_path):
    r = run("tune", "--preset", "mutag", "--set", "tune=null", "--trials", "2", "--runs-dir", str(tmp_path / "r"))
    assert r.exit_code == 2 and "no tune: section" in one_error_line(r)


@pytest.mark.parametrize("args, words", [
    (["--timeout", "soon"], "--timeout 'soon'"),
    (["--pruner", "hyperband"], "--pruner must be one of"),
    (["--study", "../x"], "--study '../x'"),
    (["--seeds", "2-1"], "--seeds '2-1'"),
])
def test_bad_options_are_one_error_line(tmp_path, args, words):
    r = run("tune", "--preset", "mutag", *tiny_args(), "--trials", "1", "--runs-dir", str(tmp_path / "runs"), *args)
    assert r.exit_code == 2 and words in one_error_line(r)
    assert not (tmp_path / "runs").exists()


def test_a_training_override_never_trips_on_the_space_but_tune_checks_it(tmp_path):
    # node-level leaves head_powers at its default: training with one head is fine although the inherited
    # space lists four-power head_powers ...
    cfg = R.resolve("node-level", ["model.heads=1", "model.hidden=8"])
    assert cfg.model.heads == 1 and "model.head_powers" in cfg.tune
    # ... while a search of that space on top of it is refused before any trial, naming the key.
    r = run("tune", "--preset", "node-level", "--set", "model.heads=1", "--set", "model.hidden=8", "--trials", "1",
            "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2
    assert one_error_line(r).startswith("error: tune.model.head_powers: value [1, 2, 3, 4] is not valid: ")
    assert not (tmp_path / "runs").exists()


def test_the_start_point_is_the_presets_own_values_inside_the_space():
    cfg = R.resolve("mutag", ["tune=null", "model.dropout=0.2", "train.lr=0.005", "model.layers=4",
                              "model.head_powers=[1, 1, 2, 2]", "model.hidden=32",
                              "tune.model.hidden={int: [16, 64], step: 16}",
                              "tune.train.lr={float: [1.0e-3, 3.0e-2], log: true}",
                              "tune.model.dropout={float: [0.0, 0.5], step: 0.1}",
                              "tune.model.layers={int: [1, 3]}",
                              "tune.model.head_powers={choice: [[1, 2, 3, 4], [1, 1, 2, 2]]}",
                              "tune.model.norm={choice: [pre, none]}"])
    start = start_point(cfg, check_space(cfg))
    # layers=4 lies outside [1, 3] and norm=post outside its choices: those two are left to the sampler.
    assert start == {"model.hidden": 32, "train.lr": 0.005, "model.dropout": 0.2,
                     "model.head_powers": "[1, 1, 2, 2]"}
    assert decode(check_space(cfg), start)["model.head_powers"] == [1, 1, 2, 2]
    off_grid = R.resolve("mutag", ["tune=null", "model.dropout=0.25", "tune.model.dropout={float: [0.0, 0.5], step: 0.1}"])
    assert start_point(off_grid, check_space(off_grid)) == {}


def _only(space: dict, *sets: str):
    return R.resolve("node-level", ["tune=null", *sets, *(f"tune.{k}={v}" for k, v in space.items())])


def test_a_value_is_left_to_the_trial_only_when_the_refusing_check_reads_another_searched_key():
    """Which keys a refusal involves comes from the check (its declared or named keys), not from the message:
    ``model.output`` is a prefix of ``model.output_heads`` in the text, yet the width check of
    ``model.output_powers`` never reads it, so ``output_heads: 2`` against a fixed one-power list is refused."""
    space = {"model.output_heads": "{choice: [1, 2]}", "model.output": "{choice: [mlp, attention]}"}
    cfg = _only(space, "model.output_powers=[1]")
    with pytest.raises(ConfigError, match=r"^tune\.model\.output_heads: value 2 is not valid: model\.output_powers"):
        check_space(cfg, full=True)
    # Searching the powers too, the same value is left to the trial: some combinations hold.
    space["model.output_powers"] = "{choice: [[1], [1, 1]]}"
    assert {p.key for p in check_space(_only(space, "model.output_powers=[1]"), full=True)} == set(space)
    # A rule's declared keys: model.heads drawn above structure.powers.k fails only with a searched k.
    rule_space = {"model.heads": "{choice: [2, 8]}", "model.hidden": "{choice: [16]}"}
    with pytest.raises(ConfigError, match=r"^tune\.model\.heads: value 8 is not valid: model\.head_powers reads"):
        check_space(_only(rule_space, "structure.powers.k=4", "model.hidden=16", "model.head_powers=null"), full=True)
    rule_space["structure.powers.k"] = "{int: [4, 8]}"
    check_space(_only(rule_space, "structure.powers.k=4", "model.hidden=16", "model.head_powers=null"), full=True)


def test_bounds_of_a_range_and_none_for_a_choice():
    assert Param("model.hidden", "int", low=16, high=64).bounds() == (16, 64)
    assert Param("train.lr", "float", low=0.1, high=0.5).bounds() == (0.1, 0.5)
    with pytest.raises(ValueError, match="tune.model.norm: a choice parameter has no range"):
        Param("model.norm", "choice", choices=("pre", "post")).bounds()
