"""Seeds, devices, task levels and metrics as ``xmask train`` resolves them."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.plan import parse_seeds, resolve_device, resolve_level, resolve_metric
from xmask_cli.errors import ConfigError, UsageError


@pytest.mark.parametrize("text, seeds", [(None, [0]), (3, [3]), ("7", [7]), ("0-4", [0, 1, 2, 3, 4]),
                                         ("0,2,7", [0, 2, 7]), ("0-2,9", [0, 1, 2, 9]), (" 1 - 2 ", [1, 2])])
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "-1", "3-1", "0-2,1", "1.5"])
def test_parse_seeds_rejects(text):
    with pytest.raises(UsageError):
        parse_seeds(text)


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:x", "gpu0"):
        with pytest.raises(UsageError):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="not available"):
            resolve_device("cuda")


@pytest.mark.parametrize("preset, overrides, level, metric", [
    ("graph-level", [], "graph", "accuracy"),
    ("node-level", [], "node", "accuracy"),
    ("link-level", [], "link", "mrr"),
    ("ogbg-molhiv", [], "graph", "rocauc"),
    ("base", ["data.dataset=cora"], "node", "accuracy"),          # auto: the dataset's first level
    ("base", ["data.dataset=cora", "task.level=link"], "link", "mrr"),
    ("edge-regression", ["edge.file=x.csv"], "edge", "mae"),
    ("edge-regression", ["edge.file=x.csv", "task.metric=rmse"], "edge", "rmse"),
])
def test_level_and_metric(preset, overrides, level, metric):
    cfg = resolve(preset, overrides)
    assert resolve_level(cfg) == level
    assert resolve_metric(cfg, level) == metric


def test_level_and_metric_refusals():
    with pytest.raises(UsageError, match="no node-level task"):
        resolve_level(resolve("graph-level", ["task.level=node"]))
    with pytest.raises(UsageError, match="does not apply"):
        resolve_metric(resolve("node-level", ["task.metric=mrr"]), "node")
    with pytest.raises(ConfigError, match="one power per head"):
        resolve("graph-level", ["model.head_powers=[1,2]"])
    with pytest.raises(ConfigError, match="multiple of model.heads"):
        resolve("graph-level", ["model.hidden=10"])
    with pytest.raises(ConfigError, match="summing to 1"):
        resolve("link-level", ["link.fractions=[0.5,0.5,0.5]"])


def test_normalize_features_reaches_the_task(tmp_path):
    from xmask_cli.engine.experiment import Experiment

    fast = ["structure.spd.enabled=false", "structure.spectrum.enabled=false", "structure.partition.parts=0",
            "structure.powers.k=1", "model.heads=1", "model.hidden=8"]
    raw = Experiment.load(resolve("cora-transformer", fast), cache_dir=tmp_path).task(0, "cpu")
    norm = Experiment.load(resolve("cora-transformer", fast + ["data.normalize_features=true"]), cache_dir=tmp_path).task(0, "cpu")
    sums = raw.x.sum(1, keepdim=True)
    expected = torch.where(sums > 0, raw.x / sums.clamp(min=1e-12), raw.x)  # PyG: rows divided by their sum
    torch.testing.assert_close(norm.x, expected)
    assert not torch.equal(raw.x, norm.x)
