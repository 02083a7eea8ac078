"""Tuned dataset presets: each is its study's best configuration (the study files under benchmarks/out/tune_study,
the figures on benchmarks/tune.md), and the recipes it superseded resolve from benchmarks/presets/ with their old
values (``--preset benchmarks/presets/<name>-hand.yaml``, as the tune page runs them)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_helpers import run
from xmask_cli import config_resolve as R
from xmask_cli.config import Config
from xmask_cli.tune.space import check_space

REPO = Path(__file__).resolve().parents[1]
STUDY_OUT = REPO / "benchmarks" / "out" / "tune_study"
#: The superseded recipes the tune page cites, by path (they are not shipped).
KEPT = REPO / "benchmarks" / "presets"


def kept(name: str) -> str:
    """The path of a recipe kept in benchmarks/presets/, as ``--preset`` and ``resolve`` take it."""
    return str(KEPT / f"{name}.yaml")


#: tuned preset -> (hand preset, the study's best.yaml copy, the hand preset's old values of the searched keys,
#: as the replaced preset files and benchmarks/tune.md state them).
_NODE_HAND = {"model.hidden": 64, "model.layers": 1, "model.dropout": 0.5, "model.input_dropout": 0.6,
              "model.head_powers": None, "model.mask_scale": "none", "train.lr": 5.0e-3, "train.weight_decay": 0.1}
SWAPPED: dict[str, tuple[str, str, dict[str, Any]]] = {
    # the transformer-block configurations of the second Cora and CiteSeer studies (2026-12-02), kept under
    # these names when the GAT-shaped ones (RESHAPED) replaced them
    "cora-transformer": ("cora-hand", "cora-subgraph/Cora-xmask-best.yaml", _NODE_HAND),
    "citeseer-transformer": ("citeseer-hand", "citeseer-subgraph/CiteSeer-xmask-best.yaml", _NODE_HAND),
    "mutag": ("mutag-hand", "30x1/MUTAG-xmask-best.yaml",
                    {"model.hidden": 64, "model.layers": 2, "model.dropout": 0.1, "model.head_powers": None,
                     "model.mask_scale": "paper", "train.lr": 1.0e-3, "train.weight_decay": 1.0e-2,
                     "train.batch_size": 32}),
    # the 15-trial Computers study (2026-12-02); its space keeps node-level's one layer (model.layers not searched)
    "computers": ("computers-hand", "15x1/Computers-xmask-best.yaml", _NODE_HAND),
    # the wide Physics study (2026-12-07): node-level's shape switches at one layer, no plain heads
    "physics": ("physics-hand", "physics-wide/Physics-xmask-best.yaml", _NODE_HAND),
    "cora-link": ("cora-link-hand", "30x1/Cora-link-xmask-best.yaml",  # the 30-trial study (2026-12-02)
                  {"model.hidden": 64, "model.layers": 1, "model.dropout": 0.3, "model.head_powers": None,
                   "train.lr": 3.0e-3, "train.weight_decay": 5.0e-4}),
}


def _where(name: str) -> str:
    """A shipped preset's name, or the path of a recipe kept in benchmarks/presets/."""
    return name if name in R.list_presets() else kept(name)


def _powers(cfg: dict[str, Any]) -> None:
    """``head_powers: null`` means head h reads Â^h: the list a study's best.yaml writes for it."""
    if cfg.get("model.head_powers") is None:
        cfg["model.head_powers"] = list(range(1, cfg["model.heads"] + 1))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "tune":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return _new_spelling(out) if not prefix else out


def _new_spelling(flat: dict[str, Any]) -> dict[str, Any]:
    """A study's record in today's keys: ``model.ffn: false`` under ``model.arch: auto`` is ``model.arch: gat``
    (config_arch.MAPPED), so a preset that names the architecture compares equal to the study that did not."""
    if flat.get("model.ffn") is False and flat.get("model.arch", "auto") == "auto":
        return {**flat, "model.arch": "gat", "model.ffn": True}
    return flat


#: Keys that name the run or describe the preset, not a hyper-parameter of the model or its training.
_NOT_COMPARED = ("description", "tune", "run.root", "run.name", "data.root")


@pytest.mark.parametrize("name", sorted(SWAPPED))
def test_tuned_preset_is_the_hand_preset_with_the_study_best_values(name: str):
    hand, best_file, _ = SWAPPED[name]
    tuned, old = _flat(R.resolve(_where(name)).to_dict()), _flat(R.resolve(kept(hand)).to_dict())
    best = _flat(yaml.safe_load((STUDY_OUT / best_file).read_text()))
    for c in (tuned, old, best):
        _powers(c)
    searched = {p.key for p in check_space(R.resolve(_where(name)))}
    assert searched, f"{name} lost its tune: section"
    for key in tuned:
        if key in _NOT_COMPARED:
            continue
        if key in searched:
            # A key added to xmask after the study ran took its default there (what the hand preset holds).
            assert tuned[key] == best.get(key, old[key]), key  # the study's best trial, value for value
        else:
            assert tuned[key] == old[key], key  # nothing else moved
    assert any(tuned[k] != old[k] for k in searched)  # a swap that changes nothing is no swap


@pytest.mark.parametrize("name", sorted(SWAPPED))
def test_hand_preset_resolves_to_the_replaced_values_through_the_cli(name: str):
    hand, _, old_values = SWAPPED[name]
    r = run("--format", "json", "presets", "show", kept(hand))
    assert r.exit_code == 0, r.stderr
    shown = _flat(json.loads(r.stdout))
    for key, value in old_values.items():
        assert shown[key] == value, key
    tuned = _flat(json.loads(run("--format", "json", "presets", "show", _where(name)).stdout))
    assert any(tuned[k] != v for k, v in old_values.items())
    assert shown["data.dataset"] == tuned["data.dataset"]


def test_mutag_tuned_alias_resolves_to_mutag():
    """``mutag-tuned`` (benchmarks/presets/) resolves to ``mutag`` through ``extends:``."""
    alias, tuned = R.resolve(kept("mutag-tuned")).to_dict(), R.resolve("mutag").to_dict()
    assert {k: v for k, v in alias.items() if k != "description"} == \
        {k: v for k, v in tuned.items() if k != "description"}


#: GAT-shaped presets (an attention-only block, an attention output layer) -> (hand preset, the study's
#: best.yaml copy, the keys the study searched beyond node-level's, as the preset's header states).
RESHAPED: dict[str, tuple[str, str]] = {
    "cora-residual": ("cora-hand", "cora-gat/Cora-xmask-best.yaml"),
    "citeseer-residual": ("citeseer-hand", "citeseer-gat/CiteSeer-xmask-best.yaml"),
}
#: The shape switches every such study searched.
SHAPE_KEYS = {"model.residual", "model.norm", "model.output_heads", "model.head_powers", "model.layer_dropout",
              "model.attn_dropout", "data.normalize_features", "train.decay"}


@pytest.mark.parametrize("name", sorted(RESHAPED))
def test_reshaped_preset_is_its_study_best_configuration(name: str):
    """Every setting of the preset is the study's best trial's (its space searched the shape switches)."""
    _, best_file = RESHAPED[name]
    tuned = _flat(R.resolve(kept(name)).to_dict())
    best = _flat(yaml.safe_load((STUDY_OUT / best_file).read_text()))
    searched = {p.key for p in check_space(R.resolve(_where(name)))}
    assert SHAPE_KEYS <= searched, f"{name}'s tune: section lost shape switches: {sorted(SHAPE_KEYS - searched)}"
    level = _flat(R.resolve("node-level").to_dict())
    for key in tuned:
        if key not in _NOT_COMPARED:
            # A key added to xmask after the study ran took its default there (node-level's value).
            assert tuned[key] == best.get(key, level[key]), key
    assert tuned["model.output"] == "attention" and tuned["node.attention"] == "sparse"


@pytest.mark.parametrize("name", sorted(RESHAPED))
def test_reshaped_hand_preset_keeps_the_node_level_values(name: str):
    hand, _ = RESHAPED[name]
    r = run("--format", "json", "presets", "show", kept(hand))
    assert r.exit_code == 0, r.stderr
    shown = _flat(json.loads(r.stdout))
    for key, value in _NODE_HAND.items():
        assert shown[key] == value, key
    assert shown["model.output"] == "mlp" and shown["model.residual"] is True


#: X-LogSMask in GAT's own shape (no encoder, heads concatenated, an attention output layer) -> (its study's
#: folder, the trial the preset holds). Each study's trial 0 is the previous recipe (xmask tune runs the
#: preset's own values first); the study's best was then re-run on seeds 0-9 beside trial 0 and the higher
#: validation mean kept (benchmarks/tune.md).
DIRECT: dict[str, tuple[str, str, int]] = {
    "cora": ("cora-fast", "Cora", 19),
    "citeseer": ("citeseer-direct", "CiteSeer", 1),
}
#: Settings a preset holds apart from its study's, each one that cannot change a run: the study prepared
#: Â^1..Â^4 while no head read Â^4 (the preset computes Â^1..Â^3; seed 0 ran to the same metrics).
NOT_SEARCHED_BUT_SET: dict[str, dict[str, Any]] = {"cora": {"structure.powers.k": 3}}


def _trial_values(folder: Path, dataset: str, number: int) -> dict[str, Any]:
    """The searched values of one trial, from the study's trials.csv (lists and numbers as YAML reads them)."""
    import csv

    with open(folder / f"{dataset}-xmask-trials.csv", newline="") as f:
        rows = {int(r["number"]): r for r in csv.DictReader(f)}
    row = rows[number]
    assert row["state"] == "COMPLETE"
    return {k: yaml.safe_load(v) for k, v in row.items() if "." in k}


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_gat_shaped_preset_is_the_kept_trial_of_its_study(name: str):
    study, dataset, kept = DIRECT[name]
    folder = STUDY_OUT / study
    tuned = _flat(R.resolve(name).to_dict())
    values = _trial_values(folder, dataset, kept)
    searched = {p.key for p in check_space(R.resolve(_where(name)))}
    assert set(values) == searched  # the study searched the preset's own space
    best = _flat(yaml.safe_load((folder / f"{dataset}-xmask-best.yaml").read_text()))
    defaults = _flat(Config().to_dict())
    for key in tuned:
        if key in _NOT_COMPARED:
            continue
        if key in NOT_SEARCHED_BUT_SET.get(name, {}):
            assert tuned[key] == NOT_SEARCHED_BUT_SET[name][key], key
            continue
        # Searched keys: the kept trial's values; the rest: what every trial of the study ran with (a key added
        # to xmask after the study ran, absent from best.yaml, holds its default).
        assert tuned[key] == (values[key] if key in searched else best.get(key, defaults[key])), key
    assert max(tuned["model.head_powers"]) <= tuned["structure.powers.k"]  # every head's power is computed
    assert tuned["model.encoder"] == "none" and tuned["model.combine"] == "concat"
    assert tuned["model.output"] == "attention" and tuned["train.optimizer"] == "adam"


def test_computers_gat_is_its_study_best_configuration():
    """computers-gat holds every setting of the wide Computers study's best trial (its best.yaml copy)."""
    tuned = _flat(R.resolve(kept("computers-gat")).to_dict())
    best = _flat(yaml.safe_load((STUDY_OUT / "computers-wide" / "Computers-xmask-best.yaml").read_text()))
    assert {k for k in best if k not in _NOT_COMPARED} <= set(tuned)
    defaults = _flat(Config().to_dict())
    for key in tuned:
        if key not in _NOT_COMPARED:
            # A key added to xmask after the study ran (absent from best.yaml) holds its default.
            assert tuned[key] == best.get(key, defaults[key]), key
    assert tuned["model.output"] == "attention" and not tuned["model.residual"] and tuned["model.arch"] == "gat"
    assert tuned["node.mode"] == "full" and tuned["node.attention"] == "sparse"
