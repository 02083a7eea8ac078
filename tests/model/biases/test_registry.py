"""The bias registry: one entry per bias type, and every reader of bias knowledge reads it."""
from __future__ import annotations

import pytest

from xmask_cli.ablate import BIAS_VARIANTS, variant_overrides
from xmask_cli.config import BIAS_NEEDS, Config
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.batching.extras import EXTRA_SECTIONS
from xmask_cli.errors import ConfigError
from xmask_cli.model.biases import BIASES, EdgeBias, EigenBias, LearnedBias, MagneticBias, RrwpBias, SpdBias
from xmask_cli.model.biases.stack import BiasSpec, BiasStack


def test_entries_are_consistent():
    assert list(BIASES) == ["spd", "rrwp", "magnetic", "eigen", "edge"]
    # The schema checks a config's bias types and their cache sections from its own table: the same entries.
    assert {name: e.needs for name, e in BIASES.items()} == BIAS_NEEDS
    assert [e.cls for e in BIASES.values()] == [SpdBias, RrwpBias, MagneticBias, EigenBias, EdgeBias]
    assert all(issubclass(e.cls, LearnedBias) for e in BIASES.values())
    structure = Config().structure
    for e in BIASES.values():
        assert e.needs in EXTRA_SECTIONS and hasattr(getattr(structure, e.needs), "enabled")
    for field in ("label", "title", "ablation"):
        values = [getattr(e, field) for e in BIASES.values()]
        assert len(set(values)) == len(values), field
    assert list(BIAS_VARIANTS) == [e.ablation for e in BIASES.values()]


def test_config_accepts_exactly_the_registered_types():
    for name in BIASES:
        assert resolve(None, [f"model.biases=[{{type: {name}}}]"]).model.biases[0].type == name
    with pytest.raises(ConfigError, match=r"model\.biases\[0\]\.type: expected one of 'spd', 'rrwp', 'magnetic', "
                                          r"'eigen', 'edge', got 'spdd'"):
        resolve(None, ["model.biases=[{type: spdd}]"])
    with pytest.raises(ValueError, match="bias type must be one of"):
        BiasSpec("spdd")


def test_stack_builds_each_type_with_its_settings():
    """from_spec passes what the old per-type construction passed: SPD buckets, walk channels, widths."""
    specs = [BiasSpec("spd", max_distance=5), BiasSpec("rrwp", width=7), BiasSpec("magnetic", width=6),
             BiasSpec("eigen", heads=(2,)), BiasSpec("edge", heads=(1, 3))]
    stack = BiasStack(specs, num_heads=3, num_layers=1, rrwp_dim=9, edge_encoding="index", edge_dims=(5, 6, 2))
    spd, rrwp, mag, eig, edge = stack.layers[0]
    assert isinstance(spd, SpdBias) and spd.table.num_embeddings == 5 + 3 and spd.num_heads == 3
    assert isinstance(rrwp, RrwpBias) and rrwp.mlp[0].in_features == 9 and rrwp.mlp[0].out_features == 7
    assert isinstance(mag, MagneticBias) and mag.mlp[0].out_features == 6 and mag.mlp[2].out_features == 3
    assert isinstance(eig, EigenBias) and eig.num_heads == 1
    assert isinstance(edge, EdgeBias) and edge.table is not None and edge.table.weight.shape == (5 + 6 + 2, 2)
    assert stack.head_types(0) == [["spd", "rrwp", "magnetic", "edge"], ["spd", "rrwp", "magnetic", "eigen"],
                                   ["spd", "rrwp", "magnetic", "edge"]]
    linear = BiasStack([BiasSpec("edge")], num_heads=3, num_layers=1, edge_encoding="linear", edge_dims=(4,))
    assert linear.layers[0][0].linear.weight.shape == (3, 4)
    with pytest.raises(ValueError, match="edge coding"):  # the cache's coding is a run field: it must be given
        BiasStack([BiasSpec("edge")], num_heads=3, num_layers=1)


def test_ablation_variant_removes_its_bias():
    base = resolve(None, ["model.biases=[{type: spd}, {type: eigen}]"])
    for name in ("spd", "eigen"):
        over = variant_overrides(BIASES[name].ablation, base)
        kept = resolve(None, ["model.biases=[{type: spd}, {type: eigen}]", *over]).model.biases
        assert [b.type for b in kept] == [n for n in ("spd", "eigen") if n != name]
