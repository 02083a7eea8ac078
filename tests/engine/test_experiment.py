"""An experiment as loaded: the options it reads reach its task."""
from __future__ import annotations

import torch

from xmask_cli.config_resolve import resolve


def test_normalize_features_reaches_the_task(tmp_path):
    from xmask_cli.engine.experiment import Experiment

    fast = ["structure.spd.enabled=false", "structure.spectrum.enabled=false", "structure.partition.parts=0",
            "structure.powers.k=1", "model.heads=1", "model.hidden=8"]
    raw = Experiment.load(resolve("node-level", fast), cache_dir=tmp_path).task(0, "cpu")
    norm = Experiment.load(resolve("node-level", fast + ["data.normalize_features=true"]), cache_dir=tmp_path).task(0, "cpu")
    sums = raw.x.sum(1, keepdim=True)
    expected = torch.where(sums > 0, raw.x / sums.clamp(min=1e-12), raw.x)  # PyG: rows divided by their sum
    torch.testing.assert_close(norm.x, expected)
    assert not torch.equal(raw.x, norm.x)
