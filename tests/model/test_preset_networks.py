"""Every shipped preset builds the network it built when the fixture was written: the same state-dict names
and shapes, and the same outputs at the same (name-keyed) weights. The fixture and how it is written:
``tests/model/preset_networks.py``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.model.preset_networks import FIXTURE_JSON, FIXTURE_NPZ, build, forward_fixed

FIXTURE = json.loads(FIXTURE_JSON.read_text())["presets"]
OUTPUTS = np.load(FIXTURE_NPZ)


def test_fixture_covers_presets_with_distinct_outputs():
    # 57 presets at the fixture's commit (presets/ and benchmarks/presets/); every output finite and not constant.
    assert len(FIXTURE) == 57 and set(FIXTURE) == set(OUTPUTS.files)
    for name in FIXTURE:
        out = OUTPUTS[name]
        assert np.isfinite(out).all() and np.ptp(out) > 0, name


@pytest.mark.parametrize("name", sorted(FIXTURE))
def test_preset_builds_the_same_network(name: str):
    want = FIXTURE[name]
    model = build(name, want["fields"])
    assert model.cfg.task == want["level"]
    got = {k: list(v.shape) for k, v in model.state_dict().items()}
    assert got == want["state"]
    out = forward_fixed(model)
    tol = 1e-5 if out.dtype == torch.float32 else 1e-10
    np.testing.assert_allclose(out.numpy(), OUTPUTS[name], rtol=tol, atol=tol)
