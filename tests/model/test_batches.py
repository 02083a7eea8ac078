"""Each batch type runs the path it names, with its fields' defaults meaning what they say (no mask: every node
real; per-graph log-powers: the same numbers as the dense powers they were taken from)."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.model.graphs import adjacency, norm_powers, padded, union_pairs
from xmask_cli.model.batches import DenseBatch, PackedBatch, SparseBatch
from xmask_cli.model.logsmask import log_powers
from xmask_cli.model.network import ModelConfig, XMaskNet

GRAPHS = [adjacency(5, [(0, 1), (1, 2), (2, 3), (3, 4)]), adjacency(3, [(0, 1), (1, 2), (0, 2)])]


def _model(**kw: Any) -> XMaskNet:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=2, dropout=0.0, **kw)
    return XMaskNet(cfg).double().eval()


def test_dense_and_sparse_batches_of_one_graph_give_its_node_outputs() -> None:
    """No mask is every node real, and the sparse batch over the union support gives the same rows."""
    model = _model(task="node")
    powers = torch.from_numpy(norm_powers(GRAPHS[0], 2))
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        dense = model(DenseBatch(x=x[None], powers=powers[None]))
        assert dense.shape == (1, 5, 2)
        torch.testing.assert_close(model(DenseBatch(x=x[None], powers=powers[None],
                                                    mask=torch.ones(1, 5, dtype=torch.bool))), dense)
        ei, values = union_pairs(powers.numpy())
        torch.testing.assert_close(model(SparseBatch(x=x, edge_index=ei, values=values)), dense[0])


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    powers, mask = padded(GRAPHS, 2)
    x = torch.randn(*mask.shape, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    return x, powers, mask


def test_a_packed_batch_of_log_powers_equals_the_padded_dense_batch() -> None:
    """Per-graph ``log_powers`` on the packed path give the padded layout's graph outputs on its dense powers."""
    packed, plain = _model(graph_layout="packed"), _model(graph_layout="padded")
    x, powers, mask = _padded_batch()
    eps, outside = packed.cfg.eps, packed.cfg.outside_support
    logp = tuple(log_powers(powers[b, :, :n, :n], eps, outside, off_diagonal=~torch.eye(n, dtype=torch.bool))
                 for b, n in enumerate(mask.sum(1).tolist()))
    with torch.no_grad():
        expected = plain(DenseBatch(x=x, powers=powers, mask=mask))
        assert expected.shape == (2, 2)
        torch.testing.assert_close(packed(PackedBatch(x=x, mask=mask, log_powers=logp, log_spec=(eps, outside))),
                                   expected)
        torch.testing.assert_close(packed(DenseBatch(x=x, powers=powers, mask=mask)), expected)
        with pytest.raises(ValueError, match="log-powers were taken with"):
            packed(PackedBatch(x=x, mask=mask, log_powers=logp, log_spec=(eps * 10, outside)))
        with pytest.raises(ValueError, match="needs `powers`"):
            plain(PackedBatch(x=x, mask=mask, log_powers=logp, log_spec=(eps, outside)))


def test_anything_else_is_refused_naming_the_batch_types() -> None:
    x, powers, mask = _padded_batch()
    with pytest.raises(TypeError, match="takes a DenseBatch, PackedBatch, SparseBatch or TokenBatch.*got dict"):
        _model()({"x": x, "powers": powers, "mask": mask})  # type: ignore[arg-type]
