"""Helpers of the explain tests: reload a run's model, rebuild a graph's batch independently of explain."""
from __future__ import annotations

import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.model.network import ModelConfig, XMaskNet


def reload_model(mutag: dict):
    from xmask_cli.engine.runs.folder import RunDir

    run = RunDir(mutag["run"])
    model = XMaskNet(ModelConfig(**run.load_config()["model"]))
    model.load_state_dict(run.load_checkpoint(RunDir.BEST)["model"])
    return model.eval()


def graph_batch(mutag: dict, g: int):
    from xmask_cli.cache import StructureCache
    from xmask_cli.engine.batching.stream import collate

    path = next((mutag["root"] / "cache").rglob("*.h5"))
    cache = StructureCache(path)
    n = cache.num_nodes(g)
    from xmask_cli.engine.batching.features import input_features
    from xmask_cli.engine.runs.experiment import Experiment

    exp = Experiment.load(resolve("graph-level", ["model.hidden=16", "model.layers=2", "model.heads=2"]),
                          cache_dir=mutag["root"] / "cache")
    x = input_features(exp.graphs, exp.cfg.model.node_struct, path)[0][g]  # the preset's structural channels too
    return collate(cache, [g], [x], [torch.tensor(0)]), cache, n
