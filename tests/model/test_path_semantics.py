"""One meaning of "outside the support" on every attention path, at realistic size.

Full Cora (2708 nodes, ``Â^1, Â^2``), weights scaled so that the logits
``q·k / sqrt(d_h)`` spread by several units (as after training, not at
initialisation), ``d_h`` 16 and 32, both ``mask_scale`` settings:

- ``outside_support='hard'``: the dense grid path and the sparse pair path give
  the same outputs and gradients (w.r.t. the inputs and every parameter) to
  1e-4 relative, and both equal an independent float64 numpy masked softmax;
- ``'eps'``: the dense path equals the literal formula ``log(0 + eps)`` in
  numpy, and the sparse path refuses it;
- plain heads (``k_h = 0``, ``use_bias=False``): the sparse path gives the
  unmasked attention over the whole graph, as the dense one does; in a padded
  batch of PROTEINS graphs each graph's plain heads attend over that graph.

The partition path (Amazon Computers) and the subgraph path are in
``tests/engine/test_path_semantics.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.model.semantics import (
    LOGIT_STD,
    RTOL,
    aggregate,
    assert_same_grads,
    cora_union_pairs,
    log_mask,
    max_rel,
    numpy_heads,
    rel,
    run_with_grads,
    spread_logits,
)
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.structure.graph import adjacency
from xmask_cli.structure.powers import power_pairs

K = 2


class Cora:
    """Cora's features and ``Â^1, Â^2`` as both a dense grid and a pair list (the union support)."""

    def __init__(self, x: np.ndarray, row: np.ndarray, col: np.ndarray, values: np.ndarray):
        self.n = x.shape[0]
        self.x = torch.from_numpy(x).float()
        self.edge_index = torch.from_numpy(np.stack([row, col]).astype(np.int64))
        self.values = torch.from_numpy(values).float()  # [E, K]
        dense = np.zeros((K, self.n, self.n), dtype=np.float32)
        dense[:, row, col] = values.T
        self.powers = torch.from_numpy(dense)[None]  # [1, K, N, N]
        self.a = dense.astype(np.float64)

    def paths(self) -> dict[str, dict]:
        return {"dense": {"powers": self.powers}, "sparse": {"edge_index": self.edge_index, "values": self.values}}


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> Cora:
    data, edge_index, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), K)
    assert int(data.num_nodes) == 2708
    row, col = edge_index.numpy()
    return Cora(data.x.numpy().astype(np.float32), row, col, values.numpy())


def _model(d_h: int, mask_scale: str, in_dim: int = 1433, heads: int = 2, **kw) -> XMaskNet:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=in_dim, out_dim=7, hidden=heads * d_h, heads=heads, layers=1, dropout=0.0,
                      task="node", mask_scale=mask_scale, **{"head_powers": (1, 2)[:heads], **kw})
    return XMaskNet(cfg)


def _dense(model: XMaskNet, x: torch.Tensor, cora: Cora) -> torch.Tensor:
    return model.encode_dense(x[None], cora.powers)[0]


def _sparse(model: XMaskNet, x: torch.Tensor, cora: Cora) -> torch.Tensor:
    return model.encode_sparse(x, cora.edge_index, cora.values)


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
@pytest.mark.parametrize("d_h", [16, 32])
def test_hard_dense_equals_sparse_on_cora(cora: Cora, d_h: int, mask_scale: str) -> None:
    model = _model(d_h, mask_scale)
    assert spread_logits(model, cora.x) >= LOGIT_STD
    out_d, grad_d = run_with_grads(model, cora.x, lambda m, x: _dense(m, x, cora))
    out_s, grad_s = run_with_grads(model, cora.x, lambda m, x: _sparse(m, x, cora))
    assert rel(out_s, out_d) < RTOL
    assert_same_grads(grad_d, grad_s)


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_hard_both_paths_equal_numpy_reference(cora: Cora, mask_scale: str) -> None:
    """The pinned formula, float64: softmax(q·k/√d_h + s·log(Â^k + ε)) with -inf where Â^k = 0."""
    d_h = 16
    model = _model(d_h, mask_scale)
    assert spread_logits(model, cora.x) >= LOGIT_STD
    scale = 1 / math.sqrt(d_h) if mask_scale == "paper" else 1.0
    want = numpy_heads(model, cora.x, [log_mask(cora.a[0], scale), log_mask(cora.a[1], scale)])
    for path, kw in cora.paths().items():
        assert max_rel(aggregate(model, cora.x, path, **kw), want) < RTOL, path


def test_eps_dense_is_literal_formula_and_sparse_refuses(cora: Cora) -> None:
    d_h = 16
    model = _model(d_h, "paper", outside_support="eps")
    assert spread_logits(model, cora.x) >= LOGIT_STD
    scale = 1 / math.sqrt(d_h)
    literal = numpy_heads(model, cora.x, [log_mask(cora.a[0], scale, "eps"), log_mask(cora.a[1], scale, "eps")])
    assert max_rel(aggregate(model, cora.x, "dense", powers=cora.powers), literal) < RTOL
    # The settings differ here (q·k spread makes log(eps)/sqrt(d_h) = -17 leak), so this test can fail.
    hard = numpy_heads(model, cora.x, [log_mask(cora.a[0], scale), log_mask(cora.a[1], scale)])
    assert max_rel(hard, literal) > 1e-2
    with pytest.raises(ValueError, match="model.outside_support=eps"):
        model.encode_sparse(cora.x, cora.edge_index, cora.values)


@pytest.mark.parametrize("kw", [{"use_bias": False}, {"head_powers": (0, 2)}], ids=["no-logmask", "mixed"])
def test_plain_heads_attend_over_the_whole_graph_on_both_paths(cora: Cora, kw: dict) -> None:
    """k_h = 0 / use_bias=False: unmasked attention over all 2708 nodes, dense and sparse alike."""
    d_h = 16
    model = _model(d_h, "paper", **kw)
    assert spread_logits(model, cora.x) >= LOGIT_STD
    masks = [None, None] if not model.cfg.use_bias else [None, log_mask(cora.a[1], 1 / math.sqrt(d_h))]
    want = numpy_heads(model, cora.x, masks)
    for path, paths_kw in cora.paths().items():
        assert max_rel(aggregate(model, cora.x, path, **paths_kw), want) < RTOL, path
    # and the full layer, with gradients, agrees between the paths
    out_d, grad_d = run_with_grads(model, cora.x, lambda m, x: _dense(m, x, cora))
    out_s, grad_s = run_with_grads(model, cora.x, lambda m, x: _sparse(m, x, cora))
    assert rel(out_s, out_d) < RTOL
    assert_same_grads(grad_d, grad_s)


def test_plain_heads_in_a_padded_batch_attend_over_their_own_graph(shared_data, tmp_path_factory) -> None:
    """Graph level: in a padded batch of PROTEINS graphs, each graph's heads see that graph (per-graph numpy)."""
    graphs = load_graphs(get_dataset("PROTEINS"), data_root=shared_data, cache_dir=tmp_path_factory.mktemp("prot"),
                         offline=True)
    ids = [0, 5, 20, 100, 300]  # sizes differ, so there is padding
    # Random features (the attention semantics do not depend on them): the logits get spread below anyway.
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(int(graphs.num_nodes[i]), 16, generator=gen) for i in ids]
    sizes = [x.size(0) for x in xs]
    assert len(set(sizes)) > 1
    n_max, in_dim, d_h = max(sizes), xs[0].size(1), 16
    x = torch.zeros(len(ids), n_max, in_dim)
    powers = torch.zeros(len(ids), K, n_max, n_max)
    mask = torch.zeros(len(ids), n_max, dtype=torch.bool)
    a_list = []
    for b, (i, xi) in enumerate(zip(ids, xs)):
        n = xi.size(0)
        r, c, v = power_pairs(adjacency(graphs.edge_index[i], n), K)
        a = np.zeros((K, n, n))
        a[:, r, c] = np.asarray(v).T
        a_list.append(a)
        x[b, :n], powers[b, :, :n, :n], mask[b, :n] = xi, torch.from_numpy(a).float(), True
    for kw in ({"use_bias": False}, {"head_powers": (0, 2)}):
        model = _model(d_h, "paper", in_dim=in_dim, **kw)
        assert spread_logits(model, torch.cat(xs)) >= LOGIT_STD
        with torch.no_grad():
            bias = None if model.bias is None else model.bias({"powers": powers, "mask": mask})
            _, terms = model.blocks[0].attn.forward_dense(model.encoder(x), bias, mask, return_terms=True)
        for b, (xi, a) in enumerate(zip(xs, a_list)):
            masks = [None, None] if not model.cfg.use_bias else [None, log_mask(a[1], 1 / math.sqrt(d_h))]
            want = numpy_heads(model, xi, masks)
            got = terms["aggregate"][b, :, : xi.size(0)].transpose(0, 1).double().numpy()
            assert max_rel(got, want) < RTOL, (kw, ids[b])
