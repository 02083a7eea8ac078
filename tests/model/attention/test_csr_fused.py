"""The fused CPU kernels of the CSR attention against a dense brute force and against ``torch.sparse``.

- a small stacked pattern with empty rows, attention dropout on: the output, the attention weights and
  every gradient equal a dense numpy computation written from the formulas, with the kept entries taken
  from :func:`keep_mask` (the kernels' own draws, checked on their own below);
- full Cora, ``Â^1..Â^3`` supports, trained-scale logits: the layer with the fused kernels and the layer
  with ``torch.sparse`` give the same output and gradients (float32, 1e-4 relative);
- the dropout mask: kept share ``1 - p`` within 0.2 % over 2 M entries, repeatable for a seed, another
  seed another mask, and the seed taken from torch's generator (``torch.manual_seed`` repeats a step);
- one thread and two give bit-identical results (rows and heads are split, never summed across threads).
"""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import torch

from tests.model.semantics import LOGIT_STD, cora_union_pairs, rel
from xmask_cli.model.attention.csr import csr_attention, csr_plan
from xmask_cli.model.attention.csr_fused import fused_backward, fused_forward, keep_mask
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias


def _pattern(n_heads: int = 3, nq: int = 6, nk: int = 5, seed: int = 0):
    """A stacked block-diagonal CSR pattern with a few empty rows (rows sorted, columns sorted per row)."""
    rng = np.random.default_rng(seed)
    dense = rng.random((n_heads, nq, nk)) < 0.5
    dense[:, 2] = False  # every head: query 2 has no entry
    rows, cols = [], []
    for h in range(n_heads):
        r, c = np.nonzero(dense[h])
        rows.append(h * nq + r)
        cols.append(h * nk + c)
    row, col = np.concatenate(rows), np.concatenate(cols)
    crow = np.zeros(n_heads * nq + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n_heads * nq), out=crow[1:])
    return torch.from_numpy(crow), torch.from_numpy(col.astype(np.int64)), row


def _dense_reference(crow, col, row, term, q, k, v, g, scale, keep, p):
    """Output, weights and gradients written densely from the formulas (numpy, float64)."""
    M, Nk = q.shape[0], k.shape[0]
    S = np.full((M, Nk), -np.inf)
    S[row, col] = term + scale * np.einsum("ed,ed->e", q[row], k[col])
    A = np.zeros((M, Nk))
    for r in range(M):
        if np.isfinite(S[r]).any():
            e = np.exp(S[r] - S[r].max())
            A[r] = e / e.sum()
    K = np.zeros((M, Nk))
    K[row, col] = keep / (1.0 - p)
    W = A * K
    out = W @ v
    dW = g @ v.T
    dA = dW * K
    dS = A * (dA - (A * dA).sum(1, keepdims=True))
    return out, A[row, col], scale * dS @ k, scale * dS.T @ q, W.T @ g, dS[row, col]


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_fused_equals_dense_brute_force(p: float) -> None:
    heads, nq, nk, d = 3, 6, 5, 4
    crow, col, row = _pattern(heads, nq, nk)
    rng = np.random.default_rng(1)
    q, k, v, g = (rng.normal(size=(heads * n, d)) for n in (nq, nk, nk, nq))
    term = rng.normal(size=col.numel())
    seed, scale = 1234, 0.7
    keep = keep_mask(col.numel(), p, seed).numpy()
    assert 0 < keep.sum() < col.numel() or p == 0
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    out, a = fused_forward(crow, col, t(term), t(q), t(k), t(v), scale, p, seed)
    dq, dk, dv, ds = fused_backward(crow, col, a, t(q), t(k), t(v), t(g), scale, p, seed, heads)
    want = _dense_reference(crow.numpy(), col.numpy(), row, term, q, k, v, g, scale, keep, p)
    for got, ref, name in zip((out, a, dq, dk, dv, ds), want, ("out", "a", "dq", "dk", "dv", "dterm")):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12, err_msg=name)
    assert torch.all(out.view(heads, nq, d)[:, 2] == 0)  # empty rows aggregate nothing


def test_keep_mask_share_seed_and_torch_generator() -> None:
    n, p = 2_000_000, 0.6
    m = keep_mask(n, p, 7)
    assert abs(float(m.float().mean()) - (1 - p)) < 0.002
    assert torch.equal(m, keep_mask(n, p, 7))
    assert float((m != keep_mask(n, p, 8)).float().mean()) > 0.4  # another seed: an unrelated mask
    assert bool(keep_mask(1000, 0.0, 7).all())
    # Through csr_attention the seed comes from torch's generator: one manual_seed, one mask.
    edge_index = torch.randint(0, 40, (2, 600), generator=torch.Generator().manual_seed(3))
    plan = csr_plan(edge_index, 40, 40, (0, 1), 2, None)
    qkv = [torch.randn(40, 2, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    outs = []
    for s in (5, 5, 6):
        torch.manual_seed(s)
        outs.append(csr_attention(*qkv, None, plan, (0, 1), 0.5, dropout_p=0.5, impl="fused"))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> dict:
    data, edge_index, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), 3)
    return {"n": int(data.num_nodes), "edge_index": edge_index, "values": values}


def _layer_grads(layer: StructuralAttention, x: torch.Tensor, edge_index: torch.Tensor, bias: torch.Tensor):
    layer.zero_grad()
    x = x.clone().requires_grad_(True)
    out = layer.forward_sparse(x, edge_index, bias)
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(5))).sum().backward()
    return out.detach(), {"x": x.grad, **{n: p.grad for n, p in layer.named_parameters() if p.grad is not None}}


def test_fused_equals_torch_sparse_on_cora(cora: dict) -> None:
    """The layer's CSR kernel on the fused kernels and on torch.sparse: same numbers at trained scale."""
    n, edge_index = cora["n"], cora["edge_index"]
    heads, dim = 8, 64
    torch.manual_seed(0)
    fused = StructuralAttention(dim, heads)
    x = torch.randn(n, dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # q·k/sqrt(d_h) at trained scale (std >= LOGIT_STD), not initialisation's
        for lin in (fused.q, fused.k):
            lin.weight.mul_(math.sqrt(4 * LOGIT_STD))
    sparse = StructuralAttention(dim, heads)
    sparse.load_state_dict(fused.state_dict())
    fused.csr_impl, sparse.csr_impl = "fused", "sparse"
    bias = XLogSMaskBias(heads, (1, 1, 2, 2, 3, 3, 3, 3))(
        SparseStructure(edge_index=edge_index, values=cora["values"]))
    with torch.no_grad():
        q, k, _ = fused.split_heads(x)
    energy = (q[edge_index[0]] * k[edge_index[1]]).sum(-1) / math.sqrt(fused.head_dim)
    assert float(energy.std(0).min()) >= LOGIT_STD
    out_f, grad_f = _layer_grads(fused, x, edge_index, bias)
    out_s, grad_s = _layer_grads(sparse, x, edge_index, bias)
    assert rel(out_f, out_s) < 1e-4
    assert {"x", "q.weight", "k.weight", "v.weight"} <= grad_f.keys() == grad_s.keys()
    for name in grad_s:
        if name == "k.bias":  # 0 up to round-off on both: the softmax ignores q_i·b_k
            continue
        assert rel(grad_f[name], grad_s[name]) < 1e-4, name


def test_one_thread_and_two_are_bit_identical() -> None:
    heads, nq, nk, d = 4, 300, 300, 8
    crow, col, _ = _pattern(heads, nq, nk, seed=5)
    gen = torch.Generator().manual_seed(2)
    q, k, v, g = (torch.randn(heads * n, d, generator=gen) for n in (nq, nk, nk, nq))
    term = torch.randn(col.numel(), generator=gen)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            torch.set_num_threads(threads)
            out, a = fused_forward(crow, col, term, q, k, v, 0.3, 0.4, 99)
            results.append((out, a, *fused_backward(crow, col, a, q, k, v, g, 0.3, 0.4, 99, heads)))
    finally:
        torch.set_num_threads(before)
    for x, y in zip(*results):
        assert torch.equal(x, y)
