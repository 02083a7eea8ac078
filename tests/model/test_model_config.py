"""The model's hyper-parameters: defaults filled in and normalised, the saved dict, what the config implies
(largest power, cache sections, plain heads, head labels, sparse refusals), and the refused combinations."""
from __future__ import annotations

import dataclasses

import pytest

from xmask_cli.config import ModelSection
from xmask_cli.model.model_config import (
    ModelConfig,
    bias_needs,
    effective_powers,
    head_labels,
    head_powers,
    plain_heads,
    sparse_refusal,
)


def _cfg(**kw) -> ModelConfig:
    return ModelConfig(**{"in_dim": 3, "out_dim": 2, "hidden": 16, "heads": 4, "layers": 2, **kw})


def test_defaults_are_filled_in_as_tuples_and_the_saved_dict_rebuilds_the_config():
    cfg = _cfg(output_heads=3, biases=({"type": "spd", "heads": [2]},))
    assert cfg.head_powers == (1, 2, 3, 4) and cfg.output_powers == (1, 1, 1)  # head h reads Â^h by default
    assert cfg.encoder == "linear" and _cfg(task="image", image_size=[8, 8], patch_size=4).encoder == "patch"
    assert _cfg(head_powers=[2, 0, 1, 1]).head_powers == (2, 0, 1, 1)
    assert hash(cfg) == hash(_cfg(output_heads=3, biases=({"type": "spd", "heads": [2]},)))  # hashable, equal
    saved = cfg.to_dict()
    assert "readout_norm" not in saved and saved["in_dim"] == 3 and saved["task"] == "graph"
    assert ModelConfig(**saved) == cfg


def test_from_section_takes_the_section_and_what_the_run_adds():
    section = dataclasses.replace(ModelSection(), hidden=24, heads=3, layers=1)
    cfg = ModelConfig.from_section(section, in_dim=7, out_dim=5, task="node", encoder="atom")
    assert (cfg.hidden, cfg.heads, cfg.layers, cfg.in_dim, cfg.out_dim, cfg.task) == (24, 3, 1, 7, 5, "node")
    assert cfg.encoder == "atom" and cfg.head_powers == (1, 2, 3)


def test_largest_power_and_cache_sections():
    assert _cfg(head_powers=(2, 0, 3, 1)).max_power == 3
    # The attention output layer's powers count too, on the node task only (where it exists).
    assert _cfg(task="node", output="attention", output_heads=2, output_powers=(5, 1), head_powers=(1, 1, 2, 1)
                ).max_power == 5
    cfg = _cfg(biases=({"type": "spd"}, {"type": "eigen"}, {"type": "rrwp"}))
    assert cfg.needs == {"spd", "spectrum", "rrwp"} and bias_needs(cfg) == cfg.needs
    assert bias_needs({"biases": [{"type": "magnetic"}]}) == {"magnetic"} and _cfg().needs == frozenset()


def test_plain_heads_and_effective_powers_of_a_config_or_a_raw_section():
    raw = {"heads": 4, "head_powers": [2, 0, 1, 0], "use_bias": True}
    assert head_powers(raw) == (2, 0, 1, 0) and plain_heads(raw) == (1, 3)
    assert head_powers({"heads": 3, "head_powers": None}) == (1, 2, 3)
    assert plain_heads({**raw, "use_bias": False}) == (0, 1, 2, 3)  # every head attends over every pair
    cfg = _cfg(head_powers=(2, 0, 1, 3))
    assert cfg.plain_heads == (1,) and effective_powers(cfg) == [2, 0, 1, 3]
    assert effective_powers(_cfg(head_powers=(2, 0, 1, 3), use_bias=False)) == [0, 0, 0, 0]


def test_head_labels_by_hand():
    cfg = _cfg(head_powers=(1, 0, 2, 3), biases=({"type": "rrwp", "heads": [2, 3], "layers": [1]},
                                                   {"type": "magnetic", "heads": [3]}))
    assert head_labels(cfg) == [["Â^1", "RRWP", "Â^2 + RRWP + MagLap", "Â^3"], ["Â^1", "none", "Â^2 + MagLap", "Â^3"]]
    assert head_labels(_cfg(use_bias=False, layers=1)) == [["none"] * 4]


def test_sparse_refusal_names_what_needs_a_dense_path():
    base = {"heads": 4, "head_powers": [1, 0, 2, 3], "use_bias": True, "outside_support": "hard", "biases": []}
    assert sparse_refusal(base) is None  # a plain head alone is fine: plain attention is computed sparse
    assert "model.outside_support=eps" in sparse_refusal({**base, "outside_support": "eps"})
    assert sparse_refusal({**base, "outside_support": "eps", "use_bias": False}) is None  # no log mask at all
    on_plain = sparse_refusal({**base, "biases": [{"type": "spd", "heads": [1, 2]}]})
    assert "spd bias" in on_plain and "plain head(s) [2]" in on_plain
    assert sparse_refusal({**base, "biases": [{"type": "spd", "heads": [1, 3]}]}) is None
    assert "plain head(s) [1, 2, 3, 4]" in sparse_refusal({**base, "use_bias": False, "biases": [{"type": "eigen"}]})


@pytest.mark.parametrize("kw, needle", [
    ({"hidden": 18}, "multiple of heads"),
    ({"layers": 0}, "layers must be >= 1"),
    ({"struct_dim": 3}, "struct_dim must be in [0, in_dim)"),
    ({"head_powers": (1, 2, 3)}, "head_powers must be 4 powers"),
    ({"head_powers": (0, 0, 0, 0)}, "at least one >= 1"),
    ({"output_heads": 2, "output_powers": (1, 0)}, "output_powers must be 2 powers >= 1"),
    ({"output": "attention"}, "for the node task"),
    ({"norm": "batch"}, "norm must be one of"),
    # the rules a preset meets (config_rules, model=True), with the preset's message
    ({"readout": "cls"}, "model.readout=cls and model.positional are for image datasets"),
    ({"encoder": "patch"}, "model.encoder=patch, model.readout=cls and model.positional are for image datasets"),
    ({"task": "image", "encoder": "linear"}, "model.encoder=linear: image datasets take the patch encoder"),
    ({"task": "image"}, "needs image_size (H, W) and patch_size >= 1"),  # 'auto' is the patch encoder there
    ({"experts": ("local",)}, "for node tasks"),
    ({"task": "node", "experts": ("local", "local")}, "distinct names"),
    ({"task": "node", "experts": ("local",), "biases": ({"type": "spd"},)}, "not learned biases"),
    ({"layer_dropout": 1.0}, "layer_dropout must lie in [0, 1)"),
    ({"eps": 0.0}, "eps must be > 0"),
    ({"readout_scale": float("inf")}, "readout_scale inf is not finite in float32"),
    ({"readout_scale": 0.0}, "readout_scale must be a finite number > 0"),
    ({"hidden": 2**20, "heads": 4}, "hidden must be <= 65536"),
])
def test_refused_combinations_name_the_setting(kw, needle):
    with pytest.raises(ValueError) as err:
        _cfg(**kw)
    assert needle in str(err.value)
