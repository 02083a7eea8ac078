"""The dense / sparse rule for full-graph attention."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.model.attention.path import SPARSE_DENSITY, full_graph_attention


def test_auto_rule_by_size_device_and_density() -> None:
    cpu, n = torch.device("cpu"), 100
    below, above = int(SPARSE_DENSITY * n * n) - 1, int(SPARSE_DENSITY * n * n) + 1
    assert full_graph_attention("auto", n, below, cpu) == "sparse"
    assert full_graph_attention("auto", n, above, cpu) == "dense"
    assert full_graph_attention("auto", n, below, "cuda") == "dense"          # fused kernels: dense on GPU
    assert full_graph_attention("auto", n, n * n, cpu, dense_max_nodes=50) == "sparse"  # too big for a grid
    assert full_graph_attention("dense", n, 1, cpu) == "dense"                 # forced
    assert full_graph_attention("sparse", n, n * n, "cuda") == "sparse"
    with pytest.raises(ValueError):
        full_graph_attention("flash", n, 1, cpu)


def test_dense_only_models_get_dense_or_a_refusal() -> None:
    """outside_support=eps / a learned bias on a plain head: auto goes dense where the grid fits, else refuses."""
    from xmask_cli.model.attention.path import PathRefused

    cpu, n, why = torch.device("cpu"), 100, "model.outside_support=eps needs a dense grid"
    assert full_graph_attention("auto", n, 1, cpu, dense_only=why) == "dense"  # sparse by density otherwise
    assert full_graph_attention("dense", n, 1, cpu, dense_only=why) == "dense"
    with pytest.raises(PathRefused, match="outside_support=eps"):
        full_graph_attention("sparse", n, 1, cpu, dense_only=why)
    with pytest.raises(PathRefused, match="dense_max_nodes"):
        full_graph_attention("auto", n, n * n, cpu, dense_max_nodes=50, dense_only=why)


def test_sparse_refusal_names_the_setting() -> None:
    from xmask_cli.config_resolve import resolve
    from xmask_cli.model.model_config import plain_heads, sparse_refusal

    base = resolve("node-level", [])
    assert sparse_refusal(base.model) is None and plain_heads(base.model) == ()
    eps = resolve("node-level", ["model.outside_support=eps"])
    assert "model.outside_support=eps" in sparse_refusal(eps.model)
    # without the log mask, eps has nothing to act on: plain attention, sparse allowed
    assert sparse_refusal(resolve("node-level", ["model.outside_support=eps", "model.use_bias=false"]).model) is None
    mixed = resolve("node-level", ["model.head_powers=[0,1,2,3]"])
    assert plain_heads(mixed.model) == (0,) and sparse_refusal(mixed.model) is None
    spd_on_plain = resolve("node-level", ["model.head_powers=[0,1,2,3]", "model.biases=[{type: spd, heads: [1]}]"])
    assert "plain head(s) [1]" in sparse_refusal(spd_on_plain.model)
    spd_elsewhere = resolve("node-level", ["model.head_powers=[0,1,2,3]", "model.biases=[{type: spd, heads: [2]}]"])
    assert sparse_refusal(spd_elsewhere.model) is None


def test_experts_refuse_eps() -> None:
    """M3Dphormer's experts attend over sparse token masks: outside_support=eps is refused (exit 2 from train)."""
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.experiment import check_config
    from xmask_cli.errors import ConfigError
    from xmask_cli.model.model_config import ModelConfig

    with pytest.raises(ConfigError, match="model.outside_support=eps"):
        check_config(resolve("m3d-cora", ["model.outside_support=eps"]))
    check_config(resolve("m3d-cora", []))  # hard: fine
    with pytest.raises(ValueError, match="outside_support"):
        ModelConfig(in_dim=4, out_dim=2, task="node", experts=("local",), outside_support="eps")
