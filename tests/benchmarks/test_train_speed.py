"""benchmarks/train_speed.py: the operator breakdown behind the PROTEINS ratio."""
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


def test_pass_marks_equal_the_readme_targets(train_speed) -> None:
    """Every figure row of benchmarks/train-speed.md's table shows the target the script passes or fails it on."""
    import re

    from tests.benchmarks import BENCHMARKS

    text = (BENCHMARKS / "train-speed.md").read_text()
    section = text.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    seen = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z_]+)`:", line)
        if m and m.group(1) in train_speed.TARGETS:
            seen[m.group(1)] = line.split("|")[8].strip()
    shown = {"min": "≥", "max": "≤"}
    want = {k: f"{shown[kind]} {t:g}x" for k, (kind, t) in train_speed.TARGETS.items()}
    assert set(seen) >= {"sparse_vs_transformerconv", "sparse_every_head_max_vs_transformerconv",
                         "dense_vs_transformerconv", "dense_vs_recompute", "engine_overhead", "proteins_epoch"}
    assert {k: seen[k] for k in seen} == {k: want[k] for k in seen}


def test_proteins_peer_is_the_standard_gin(train_speed) -> None:
    """The PROTEINS peer: 5 GIN layers, hidden 64, sum readout (a 3-node graph's output is the sum of its nodes')."""
    import torch
    from peers_gnn import _gin  # benchmarks/ is on the path once train_speed is loaded

    gin = _gin(7, 2, hidden=train_speed.GIN_HIDDEN, layers=train_speed.GIN_LAYERS)
    assert train_speed.GIN_LAYERS == 5 and train_speed.GIN_HIDDEN == 64 and len(gin.convs) == 5
    gin.eval()
    x, ei = torch.randn(3, 7), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    h = x
    for conv in gin.convs:
        h = conv(h, ei)
    out = gin(x, ei, torch.zeros(3, dtype=torch.long), 1)
    torch.testing.assert_close(out, gin.head(h.sum(0, keepdim=True)))
