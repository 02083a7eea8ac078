"""Every rule of the table: a config that breaks it is refused with exit 2 by the CLI and with the same
ConfigError message by the Python path (resolve, or check_config for a run's rules)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.config import ModelSection
from xmask_cli.config_resolve import apply_overrides, build, load_preset_dict, resolve
from xmask_cli.config_rules import RULES, Rule
from xmask_cli.engine.experiment import check_config
from xmask_cli.errors import ConfigError
from xmask_cli.model.model_config import ModelConfig

DIRECT = ["model.encoder=none", "model.residual=false", "model.norm=none", "node.sparse_features=false"]
LEVELS = {"node-level": "node", "graph-level": "graph", "link-level": "link", "image-level": "image"}
#: Rule -> a preset and the --set overrides that break it (and nothing before it).
BREAKS: dict[str, tuple[str, list[str]]] = {
    "experts_take_the_mlp_output": ("node-level", ["model.experts=[local]", "model.output=attention"]),
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
    "folds_need_graph_level": ("node-level", ["data.folds=5"]),
}


def test_every_rule_has_a_config_that_breaks_it() -> None:
    assert [r.name for r in RULES] == list(BREAKS)
    assert all(r.check.__doc__ for r in RULES)  # each rule says why it holds


def _python_refusal(rule: Rule, preset: str, sets: list[str]) -> str:
    """The ConfigError message of the Python path, checked to come from ``rule``'s own function."""
    with pytest.raises(ConfigError) as err:
        cfg = resolve(preset, sets)
        assert rule.stage == "run", f"resolve took a config that breaks {rule.name}"
        check_config(cfg)
    assert any(entry.name == rule.name for entry in err.traceback), (rule.name, str(err.value))
    return str(err.value)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_a_broken_rule_is_exit_2_with_the_python_message(rule: Rule, tmp_path: Path) -> None:
    preset, sets = BREAKS[rule.name]
    message = _python_refusal(rule, preset, sets)
    r = run("train", "--preset", preset, *[a for kv in sets for a in ("--set", kv)], "--runs-dir",
            str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu")
    assert r.exit_code == 2 and one_error_line(r) == f"error: {message}"
    assert not (tmp_path / "runs").exists()  # refused before any run folder


@pytest.mark.parametrize("rule", [r for r in RULES if r.model], ids=lambda r: r.name)
def test_the_model_alone_is_refused_by_the_same_rule(rule: Rule) -> None:
    """A ModelConfig built in Python (the preset's model section, the breaking keys, its level as the task)
    meets the rule with the message of the CLI."""
    preset, sets = BREAKS[rule.name]
    message = _python_refusal(rule, preset, sets)
    section = build(ModelSection, apply_overrides(load_preset_dict(preset), sets).get("model", {}), "model")
    image = {"image_size": (8, 8), "patch_size": 2} if LEVELS[preset] == "image" else {}
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_section(section, in_dim=4, out_dim=2, task=LEVELS[preset], **image)
    assert str(err.value) == message
