"""The config schema: its pinned defaults, the plain-dict and canonical-JSON views, a section's own fields."""
from __future__ import annotations

import dataclasses
import json

import pytest

from xmask_cli import config as C
from xmask_cli import config_resolve as R
from xmask_cli.config import Config, ModelSection, StructureSection, section_fields, to_json
from xmask_cli.errors import ConfigError


def test_schema_defaults_match_the_pinned_math():
    cfg = R.resolve(None)
    assert cfg.structure.powers.k == 4
    assert cfg.structure.powers.eps == 1e-30
    assert cfg.structure.powers.normalization == "sym"
    assert cfg.structure.spd.max_distance == 8
    assert cfg.structure.magnetic.q == 0.25
    assert cfg.structure.rrwp.steps == 16


def test_to_dict_is_nested_plain_data_and_to_json_its_canonical_text():
    cfg = R.resolve("graph-level", ["structure.powers.k=3", "model.heads=2", "model.hidden=8"])
    d = cfg.to_dict()
    assert set(d) == {f.name for f in dataclasses.fields(Config)}
    assert d["structure"]["powers"]["k"] == 3 and d["model"]["heads"] == 2 and isinstance(d["structure"]["spd"], dict)
    text = to_json(cfg)
    assert json.loads(text) == json.loads(json.dumps(d))  # the same content, JSON-typed
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))  # canonical: sorted, compact
    # Equal configs give equal text, whatever order their overrides came in; another value another text.
    same = R.resolve("graph-level", ["model.hidden=8", "model.heads=2", "structure.powers.k=3"])
    assert to_json(same) == text and to_json(R.resolve("graph-level", ["structure.powers.k=2"])) != text


def test_section_fields_keeps_nested_sections_as_objects():
    s = StructureSection()
    got = section_fields(s)
    assert list(got) == [f.name for f in dataclasses.fields(StructureSection)]
    assert got["powers"] is s.powers and dataclasses.is_dataclass(got["powers"])  # asdict would give a dict
    m = dataclasses.replace(ModelSection(), heads=8)
    assert section_fields(m)["heads"] == 8 and section_fields(m)["hidden"] == ModelSection.hidden


def test_the_training_memory_bound_is_a_lower_bound_of_the_models_weights(monkeypatch) -> None:
    """``ModelSection.training_bytes`` / 16 bytes (weight, gradient, Adam's two moments) is at most the blocks'
    parameter count of a real model, and within 10 % of it: a width it refuses is one training could not hold."""
    from xmask_cli.model.model_config import ModelConfig
    from xmask_cli.model.network import XMaskNet

    cfg = ModelConfig(in_dim=3, out_dim=2, hidden=32, heads=4, layers=3, ffn_mult=3, task="graph")
    params = sum(p.numel() for p in XMaskNet(cfg).blocks.parameters())
    estimate = C.ModelSection(hidden=32, heads=4, layers=3, ffn_mult=3).training_bytes() // 16
    assert 0.9 * params <= estimate <= params
    monkeypatch.setattr(C, "machine_memory_bytes", lambda: 2**30)
    C.ModelSection(hidden=1024, heads=4, layers=2, ffn_mult=2).check("model")  # 16 * 2 * 8 * 2^20 = 256 MiB
    with pytest.raises(ConfigError, match=r"^model\.hidden: 4096 with model\.layers=2 and model\.ffn_mult=2 needs "
                                          r"about 4 GiB .* more than this machine's 1 GiB"):
        C.ModelSection(hidden=4096, heads=4, layers=2, ffn_mult=2).check("model")


def test_the_mask_floor_eps_is_a_normal_float32(monkeypatch) -> None:
    """``structure.powers.eps`` is added in float32 where the log mask is formed: a value float32 holds as a normal
    number keeps ``log(eps)`` finite (the ``eps`` outside support); below it the sum is 0 and the log -inf."""
    import numpy as np

    tiny = float(np.finfo(np.float32).tiny)
    assert np.isfinite(np.log(np.float32(0) + np.float32(tiny)))
    assert np.float32(1e-50) == 0  # what a smaller eps becomes
    assert R.resolve(None, [f"structure.powers.eps={tiny!r}"]).structure.powers.eps == tiny
    with pytest.raises(ConfigError, match=r"^structure\.powers\.eps: must lie in \[1\.175e-38, 1\)"):
        R.resolve(None, ["structure.powers.eps=1e-50"])
