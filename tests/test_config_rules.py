"""Every rule of the table: a config that breaks it is refused with exit 2 by the CLI and with the same
ConfigError message by the Python paths (resolve, or check_config for a run's rules; ``xmask_cli.train``),
in this process and in a fresh interpreter that imported nothing else first; each rule declares the keys
it reads."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.config import Config, ModelSection
from xmask_cli.config_resolve import apply_overrides, build, load_preset_dict, resolve
from xmask_cli.config_rules import RULES, Rule, RunFacts
from xmask_cli.engine.runs.experiment import check_config
from xmask_cli.errors import ConfigError
from xmask_cli.model.model_config import ModelConfig

REPO = Path(__file__).resolve().parents[1]
DIRECT = ["model.encoder=none", "model.residual=false", "model.norm=none", "node.sparse_features=false"]
LEVELS = {"node-level": "node", "graph-level": "graph", "link-level": "link", "image-level": "image"}
#: Rule -> a preset and the --set overrides that break it (and nothing before it).
BREAKS: dict[str, tuple[str, list[str]]] = {
    "arch_reads_its_keys": ("node-level", ["model.arch=transformer", "model.combine=concat"]),
    "encoder_none_takes_no_residual": ("node-level", ["model.encoder=none", "model.residual=true"]),
    "experts_need_full_node_mode": ("node-level", ["model.experts=[local]", "node.mode=query"]),
    "output_powers_within_head_powers": ("node-level", ["model.output_heads=2", "model.output_powers=[1,9]"]),
    "head_powers_within_structure_k": ("graph-level", ["structure.powers.k=1"]),
    "experts_take_hard_support": ("node-level", ["model.experts=[local]", "model.outside_support=eps"]),
    "cluster_expert_needs_partition": ("node-level", ["model.experts=[cluster]", "structure.partition.parts=0"]),
    "query_mode_takes_no_learned_biases": ("node-level", ["node.mode=query", "model.biases=[{type: spd}]"]),
    "image_switches_need_image_level": ("graph-level", ["model.readout=cls"]),
    "image_level_takes_patches_only": ("image-level", ["model.biases=[{type: spd}]"]),
    "experts_need_node_level": ("graph-level", ["model.experts=[local]"]),
    "encoder_none_needs_node_level": ("graph-level", DIRECT),
    "output_attention_needs_node_level": ("graph-level", ["model.output=attention"]),
    "node_struct_needs_node_features": ("link-level", ["model.node_struct=degree"]),
    "rwse_needs_rrwp": ("graph-level", ["model.node_struct=rwse", "structure.rrwp.enabled=false"]),
    "biases_need_their_structure": ("graph-level", ["model.biases=[{type: rrwp}]", "structure.rrwp.enabled=false"]),
    "gps_needs_graph_batches": ("node-level", ["model.arch=gps"]),
    "arch_needs_its_structure": ("graph-level", ["model.arch=gps", "structure.edge.enabled=false"]),
    "folds_need_graph_level": ("node-level", ["data.folds=5"]),
    "folds_keep_the_official_split": ("graph-level", ["data.dataset=ogbg-molhiv", "data.folds=5"]),
}
#: Checks outside the rule table that every entry point must run alike: the bias registry's names, the
#: ``tune:`` space, the dtype and width bounds of the sections.
OTHER_BREAKS: dict[str, tuple[str, list[str]]] = {
    "bias type": ("graph-level", ["model.biases=[{type: spdd}]"]),
    "tune range": ("graph-level", ["tune.model.hidden={int: [5, 1]}"]),
    "tune key": ("graph-level", ["tune.model.hiden={int: [16, 32]}"]),
    "float32 lr": ("graph-level", ["train.lr=1e39"]),
    "float32 weight decay": ("graph-level", ["train.optimizer=adam", "train.weight_decay=1e300"]),
    "width": ("graph-level", ["model.hidden=1048576"]),
}
ALL_BREAKS = {**BREAKS, **OTHER_BREAKS}


def test_every_rule_has_a_config_that_breaks_it() -> None:
    assert [r.name for r in RULES] == list(BREAKS)
    assert all(r.check.__doc__ for r in RULES)  # each rule says why it holds


def _python_refusal(rule: Rule, preset: str, sets: list[str]) -> ConfigError:
    """The ConfigError of the Python path, checked to come from ``rule``'s own function."""
    with pytest.raises(ConfigError) as err:
        cfg = resolve(preset, sets)
        assert rule.stage == "run", f"resolve took a config that breaks {rule.name}"
        check_config(cfg)
    assert any(entry.name == rule.name for entry in err.traceback), (rule.name, str(err.value))
    return err.value


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_a_broken_rule_is_exit_2_with_the_python_message(rule: Rule, tmp_path: Path) -> None:
    preset, sets = BREAKS[rule.name]
    error = _python_refusal(rule, preset, sets)
    assert set(rule.keys) <= error.keys  # the refusal names what the rule reads
    r = run("train", "--preset", preset, *[a for kv in sets for a in ("--set", kv)], "--runs-dir",
            str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu")
    assert r.exit_code == 2 and one_error_line(r) == f"error: {error}"
    assert not (tmp_path / "runs").exists()  # refused before any run folder


@pytest.mark.parametrize("rule", [r for r in RULES if r.model], ids=lambda r: r.name)
def test_the_model_alone_is_refused_by_the_same_rule(rule: Rule) -> None:
    """A ModelConfig built in Python (the preset's model section, the breaking keys, its level as the task)
    meets the rule with the message of the CLI."""
    preset, sets = BREAKS[rule.name]
    message = str(_python_refusal(rule, preset, sets))
    section = build(ModelSection, apply_overrides(load_preset_dict(preset), sets).get("model", {}), "model")
    image = {"image_size": (8, 8), "patch_size": 2} if LEVELS[preset] == "image" else {}
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_section(section, in_dim=4, out_dim=2, task=LEVELS[preset], **image)
    assert str(err.value) == message


class _Reads:
    """A config (or a section of it) that records every dotted key read through it."""

    def __init__(self, value: Any, path: str, log: set[str]) -> None:
        self._value, self._path, self._log = value, path, log

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._value, name)
        path = f"{self._path}.{name}" if self._path else name
        if dataclasses.is_dataclass(value):
            return _Reads(value, path, self._log)
        self._log.add(path)
        return value


def _covered(key: str, declared: tuple[str, ...]) -> bool:
    return any(key == d or key.startswith(d + ".") for d in declared)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_each_rule_declares_every_key_it_reads(rule: Rule) -> None:
    """What the rule's function reads (recorded on the breaking config and on the defaults, at every level)
    lies within its declared keys: tune trusts them to know which searched keys a refusal involves."""
    preset, sets = BREAKS[rule.name]
    data = apply_overrides(load_preset_dict(preset), sets)
    sections = {name: build(tp, data.get(name, {}), name) for name, tp in typing.get_type_hints(Config).items()
                if dataclasses.is_dataclass(tp)}
    configs = [Config(), Config(**sections)]  # the breaking config, its sections built without the rules
    for cfg in configs:
        for level in (None, *LEVELS.values()):
            log: set[str] = set()
            try:
                rule.check(_Reads(cfg, "", log), RunFacts(level, "scaffold"))  # type: ignore[arg-type]
            except ConfigError:
                pass
            assert all(_covered(k, rule.keys) for k in log), (rule.name, sorted(log), rule.keys)


_FRESH = textwrap.dedent("""
    import json, sys
    cases = json.loads(sys.argv[1])
    out = {}
    if sys.argv[2] == "resolve":
        from xmask_cli.config_resolve import resolve
        built = {}
        for name, (preset, sets) in cases.items():
            try:
                built[name] = resolve(preset, sets)
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
        # Nothing above the schema was needed to refuse the config-stage breaks.
        loaded = sorted(m for m in sys.modules if m.startswith(("xmask_cli.model", "xmask_cli.tune", "torch")))
        out["modules above the schema"] = loaded
        from xmask_cli.engine.runs.experiment import check_config
        for name, cfg in built.items():
            try:
                check_config(cfg)
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
    elif sys.argv[2] == "cli":
        from typer.testing import CliRunner
        from xmask_cli.cli import app
        for name, (preset, sets) in cases.items():
            r = CliRunner().invoke(app, ["train", "--preset", preset, *[a for kv in sets for a in ("--set", kv)],
                                         "--runs-dir", sys.argv[3], "--cache-dir", sys.argv[4], "--device", "cpu"])
            out[name] = [r.exit_code, r.stderr]
    else:
        import xmask_cli
        for name, (preset, sets) in cases.items():
            try:
                xmask_cli.train(preset, sets, runs_dir=sys.argv[3], cache_dir=sys.argv[4], device="cpu")
                out[name] = "trained"
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
""")


def _fresh(entry: str, tmp_path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(ALL_BREAKS), entry, str(tmp_path / "runs"),
                        str(tmp_path / "cache")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_check_runs_alike_on_every_entry_point_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """Each breaking config (the rules, the bias type, the tune space, the dtype and width bounds) is refused
    with the same ConfigError by ``resolve`` (+ ``check_config``), by ``xmask_cli.train`` and, as that one
    ``error:`` line with exit 2, by ``xmask train``, each in a fresh interpreter; nothing is written."""
    by_resolve = _fresh("resolve", tmp_path)
    assert by_resolve.pop("modules above the schema") == []
    by_api = _fresh("train", tmp_path)
    by_cli = _fresh("cli", tmp_path)
    for name in ALL_BREAKS:
        assert by_resolve[name].startswith("ConfigError: "), (name, by_resolve[name])
        assert by_api[name] == by_resolve[name], name
        code, stderr = by_cli[name]
        assert code == 2 and stderr.strip() == "error: " + by_resolve[name].removeprefix("ConfigError: "), name
    assert not (tmp_path / "runs").exists()


def test_encoder_auto_is_resolved_in_one_place_for_the_engine_and_the_model() -> None:
    """``auto``: the patch encoder on images, the atom encoder on OGB molecules, else linear; the engine's model
    config and a ModelConfig built in Python agree wherever the dataset is not needed."""
    from xmask_cli.config_rules import resolve_encoder
    from xmask_cli.engine.runs.experiment import _model_config

    cases = {("auto", "image", "digits"): "patch", ("auto", "graph", "ogbg-molhiv"): "atom",
             ("auto", "graph", "OGBG-MOLPCBA"): "atom", ("auto", "graph", "MUTAG"): "linear",
             ("auto", "node", "cora"): "linear", ("linear", "graph", "ogbg-molhiv"): "linear",
             ("none", "node", "cora"): "none"}
    for (encoder, level, dataset), expected in cases.items():
        assert resolve_encoder(encoder, level, dataset) == expected
    cfg = resolve("graph-level", ["data.dataset=ogbg-molhiv"])
    assert _model_config(cfg, "graph", 9, 2, "ogbg-molhiv").encoder == "atom"
    assert _model_config(resolve("graph-level"), "graph", 9, 2, "MUTAG").encoder == "linear"
    assert ModelConfig(in_dim=4, out_dim=2, task="graph").encoder == "linear"
    assert ModelConfig(in_dim=3, out_dim=2, task="image", image_size=(8, 8), patch_size=2).encoder == "patch"
