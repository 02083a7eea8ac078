"""The architecture docs/extending.md adds, built as written: its blocks are the ones it says, and a network
of them runs on the dense and sparse paths with the same numbers."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from tests.model.graphs import PATH_TRIANGLE, norm_powers, union_pairs
from xmask_cli.model import network
from xmask_cli.model.archs import Architecture
from xmask_cli.model.network import ModelConfig, XMaskNet

DOC = Path(__file__).resolve().parents[3] / "docs" / "extending.md"


def _hybrid() -> type:
    text = DOC.read_text()
    code = re.search(r"```python\n(\"\"\"``model.arch: hybrid``.*?)```", text, re.S)
    assert code is not None, "docs/extending.md lost its architecture example"
    scope: dict = {}
    exec(compile(code.group(1), "hybrid.py", "exec"), scope)  # noqa: S102  the documented file, as written
    return scope["Hybrid"]


def test_the_documented_architecture_builds_and_runs(monkeypatch) -> None:
    hybrid = _hybrid()()
    assert isinstance(hybrid, Architecture) and hybrid.name == "hybrid"
    cfg = ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, head_powers=(1, 2), layers=3, dropout=0.0,
                      task="node", activation="elu")
    # The builder alone (a config naming "hybrid" needs the schema's lines of the doc too): the network asks it.
    monkeypatch.setattr(network, "get_arch", lambda name: hybrid)
    torch.manual_seed(0)
    model = XMaskNet(cfg).double().eval()
    first, *rest = model.blocks
    assert first.ffn is None and first.activation == "elu"
    assert all(b.ffn is not None and b.ffn[0].out_features == 8 * cfg.ffn_mult for b in rest)
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    powers = norm_powers(PATH_TRIANGLE, 2)
    edge_index, values = union_pairs(powers)
    with torch.no_grad():
        dense = model.forward_dense(x[None], torch.from_numpy(powers)[None])[0]
        sparse = model.forward_sparse(x, edge_index, values)
    torch.testing.assert_close(sparse, dense, rtol=1e-9, atol=1e-10)
    assert float(dense.std()) > 1e-3
