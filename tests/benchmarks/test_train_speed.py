"""benchmarks/train_speed.py: the operator breakdown behind the PROTEINS ratio (issue 12 §3)."""
from __future__ import annotations


import pytest
import torch

from tests.benchmarks import load_script



@pytest.fixture(scope="module")
def train_speed():
    return load_script("train_speed")


def test_breakdown_counts_matmul_flops_and_dropout_draws(train_speed) -> None:
    a, b = torch.randn(512, 256), torch.randn(256, 128)
    x = torch.randn(1_000_000)

    def work() -> None:
        a @ b  # 2 * 512 * 256 * 128 flops
        torch.nn.functional.dropout(x, 0.5, True)

    parts = train_speed.op_breakdown(work)
    assert parts["matmul_gflop"] == pytest.approx(2 * 512 * 256 * 128 / 1e9, abs=1e-3)
    assert parts["matmul (linear layers)"] > 0 and parts["dropout draws (RNG)"] > 0
    assert parts["attention (SDPA)"] == 0
    named = sum(parts[k] for k in train_speed.OP_FAMILIES) + parts["other"]
    assert named == pytest.approx(parts["total_profiled_s"], abs=1e-3)
    table = train_speed.breakdown_table({"ours": parts, "peer": parts})
    assert "| matmul (linear layers) |" in table and "(1.00x)" in table
