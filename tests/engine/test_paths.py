"""The dense / sparse rule for full-graph attention."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.engine.paths import SPARSE_DENSITY, full_graph_attention


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
