"""The query-batch path with the shape switches and the attention output layer: the full-graph sparse numbers."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from tests.engine.batching.test_query import N, _full_sparse, _trained_scale, graph  # noqa: F401  (graph: the fixture)
from xmask_cli.engine.batching.query import Support, encode_queries
from xmask_cli.model.network import ModelConfig, XMaskNet


@pytest.mark.parametrize("direct, sparse_x", [(False, False), (True, False), (True, True)])
def test_attention_output_on_query_batches_equals_the_sparse_path(graph: Support, direct: bool,  # noqa: F811
                                                                  sparse_x: bool) -> None:
    """Also GAT's own shape (encoder none, heads concatenated), with the features as a scipy matrix (the query
    path's bag-of-words rows come as sparse blocks)."""
    torch.manual_seed(0)
    shape = {"encoder": "none", "combine": "concat"} if direct else {}
    cfg = ModelConfig(in_dim=12, out_dim=5, hidden=64, heads=4, head_powers=(1, 2, 3, 3), layers=2, task="node",
                      dropout=0.0, residual=False, norm="none", ffn=False, activation="elu", output="attention",
                      output_heads=2, output_powers=(1, 2), **shape)
    model = XMaskNet(cfg).eval()
    _trained_scale(model, 6.0)
    with torch.no_grad():
        model.out_block.attn.q.weight.mul_(6.0)
        model.out_block.attn.k.weight.mul_(6.0)
    x = torch.randn(N, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = _full_sparse(model, x, graph)
        q = np.sort(np.random.default_rng(2).choice(N, 300, replace=False))
        rows = sp.csr_matrix(x.numpy()) if sparse_x else x
        got = encode_queries(model, rows, graph, q, chunk_pairs=3_000, output=True)
        hidden = encode_queries(model, rows, graph, q, chunk_pairs=3_000)
    assert full.shape == (N, 5) and got.shape == (300, 5) and hidden.shape == (300, 64)
    torch.testing.assert_close(got, full[torch.from_numpy(q)], rtol=1e-4, atol=1e-5)
