"""benchmarks/peers_tuned_speed.py: the alternated epochs of the tuned peers on a tiny graph (small settings
patched in): each side's epochs are timed, and the GCN's two paths draw the same dropout masks and give
the same validation logits epoch by epoch."""
from __future__ import annotations

import types

import torch

from tests.benchmarks import load_script


def test_alternated_sides_agree_and_are_timed(monkeypatch):
    from torch_geometric.data import Data

    speed = load_script("peers_tuned_speed")
    hp = {"hidden": 8, "layers": 3, "dropout": 0.5, "lr": 1e-2, "weight_decay": 0.0, "norm": "layer",
          "residual": False, "heads": 1, "epochs": 1000}
    table = speed.tuned_setup.__globals__["TUNED_HP"]["Computers"]
    for kind in table:
        monkeypatch.setitem(table, kind, hp)
    g = torch.Generator().manual_seed(0)
    ei = torch.unique(torch.randint(0, 50, (2, 200), generator=g), dim=1)
    data = Data(x=torch.rand(50, 6, generator=g), edge_index=ei, y=torch.arange(50) % 3, num_nodes=50)
    graphs = types.SimpleNamespace(spec=types.SimpleNamespace(name="Computers", split="random-60-20-20"),
                                   dataset=[data])
    res = speed.run("GCN-tuned", graphs, epochs=4, seed=0)
    assert set(res["sides"]) == {"plain", "one-graph"}
    assert res["val_logit_max_abs_diff"] == [0.0] * 4
    for s in res["sides"].values():
        assert len(s["epoch_seconds"]) == 4 and s["min"] <= s["median"] <= s["max"]
        assert s["recipe_hours"] == s["median"] * 5000 / 3600
    gat = speed.run("GAT-tuned", graphs, epochs=2, seed=0)
    assert list(gat["sides"]) == ["one-graph"] and gat["val_logit_max_abs_diff"] == []
