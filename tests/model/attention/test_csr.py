"""The CSR kernel of the sparse path computes what the per-pair gather kernel computes.

``sparse_kernel='gather'`` is the per-pair ``[E, H, d_h]`` computation the
sparse path ran before (and still runs for ``return_terms``); ``'csr'`` runs
each head over its own support with ``sampled_addmm`` / segment softmax /
CSR @ dense and a hand-written backward. Checked:

- full Cora, ``Â^1..Â^3`` union (346,846 pairs), 4 heads with different
  supports, trained-scale logits (std >= 5), learned bias on / off, with and
  without a plain head: outputs and every gradient equal in float32 (1e-4
  relative), and in float64 to 1e-10;
- the hand-written backward against finite differences (``gradcheck``,
  float64), attention dropout included;
- unsorted and duplicated pairs, queries without a finite pair, a separate
  query set (``forward_pairs``), and the memoised plan being rebuilt when the
  support changes.
"""
from __future__ import annotations

import pytest
import torch

from tests.model.semantics import LOGIT_STD, cora_union_pairs, rel
from xmask_cli.model.attention.csr import csr_attention, csr_plan
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias

K = 3


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> dict:
    data, edge_index, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), K)
    return {"n": int(data.num_nodes), "edge_index": edge_index, "values": values}


def _pair(dim: int, heads: int, plain: tuple[int, ...], dtype: torch.dtype, seed: int = 0,
          attn_dropout: float = 0.0) -> tuple[StructuralAttention, StructuralAttention]:
    """Two layers with the same weights, one per kernel."""
    torch.manual_seed(seed)
    csr = StructuralAttention(dim, heads, plain_heads=plain, attn_dropout=attn_dropout).to(dtype)
    gather = StructuralAttention(dim, heads, plain_heads=plain, attn_dropout=attn_dropout).to(dtype)
    gather.load_state_dict(csr.state_dict())
    gather.sparse_kernel = "gather"
    return csr, gather


def _spread(layer: StructuralAttention, x: torch.Tensor, edge_index: torch.Tensor, target: float = 1.5 * LOGIT_STD):
    """Scale W_q, W_k so q·k/sqrt(d_h) over the pairs has std ~target (trained scale, not initialisation)."""
    with torch.no_grad():
        for _ in range(3):
            q, k, _ = layer.split_heads(x)
            std = float(((q[edge_index[0]] * k[edge_index[1]]).sum(-1) / layer.head_dim ** 0.5).std(0).min())
            for lin in (layer.q, layer.k):
                lin.weight.mul_((target / std) ** 0.5)
                lin.bias.mul_((target / std) ** 0.5)
    return std


def _run(layer: StructuralAttention, x: torch.Tensor, edge_index: torch.Tensor, bias, learned, **kw):
    """Output and the gradients (x, learned bias, every parameter) of a fixed random loss."""
    layer.zero_grad()
    x = x.clone().requires_grad_(True)
    learned = None if learned is None else learned.clone().requires_grad_(True)
    out = layer.forward_sparse(x, edge_index, bias, learned=learned, **kw)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    (out * weight).sum().backward()
    grads = {"x": x.grad}
    if learned is not None:
        grads["learned"] = learned.grad
    grads.update({n: p.grad for n, p in layer.named_parameters() if p.grad is not None})
    return out.detach(), grads


@pytest.mark.parametrize("dtype,tol,with_learned,powers", [
    (torch.float32, 1e-4, False, (1, 2, 3, 3)),
    (torch.float32, 1e-4, True, (1, 2, 3, 3)),
    (torch.float32, 1e-4, True, (1, 0, 3, 2)),
    (torch.float64, 1e-10, True, (1, 0, 3, 2)),
], ids=["f32-xlog", "f32-xlog+learned", "f32-plain-head+learned", "f64-plain-head+learned"])
def test_csr_equals_gather_on_cora(cora: dict, dtype, tol: float, with_learned: bool, powers: tuple) -> None:
    n, edge_index = cora["n"], cora["edge_index"]
    heads, dim = 4, 64
    plain = tuple(h for h, p in enumerate(powers) if p == 0)
    csr, gather = _pair(dim, heads, plain, dtype)
    x = torch.randn(n, dim, generator=torch.Generator().manual_seed(1), dtype=dtype)
    assert _spread(csr, x, edge_index) >= LOGIT_STD
    gather.load_state_dict(csr.state_dict())
    bias = XLogSMaskBias(heads, powers)(SparseStructure(edge_index=edge_index, values=cora["values"])).to(dtype)
    # Heads really have different supports (the point of per-head patterns): Â^1 is a few % of the union.
    finite = torch.isfinite(bias).sum(0)
    assert finite[0] < 0.05 * edge_index.size(1) and finite[2] == edge_index.size(1)
    learned = (torch.randn(edge_index.size(1), heads, generator=torch.Generator().manual_seed(2), dtype=dtype)
               if with_learned else None)
    out_c, grad_c = _run(csr, x, edge_index, bias, learned)
    out_g, grad_g = _run(gather, x, edge_index, bias, learned)
    assert rel(out_c, out_g) < tol
    assert grad_c.keys() == grad_g.keys() and {"x", "q.weight", "k.weight", "v.weight"} <= grad_c.keys()
    for name in grad_g:
        if name == "k.bias":  # its gradient is 0 up to round-off on both (the softmax ignores q_i·b_k)
            assert float(grad_c[name].abs().max()) < 1e-3 * float(grad_g["k.weight"].abs().max())
            continue
        assert rel(grad_c[name], grad_g[name]) < tol, name


def _small(seed: int = 0, n: int = 7, e: int = 30, heads: int = 2):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    term = torch.randn(e, heads, generator=g, dtype=torch.float64)
    term[torch.rand(e, heads, generator=g) < 0.3] = float("-inf")
    return edge_index, term


@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_backward_matches_finite_differences(dropout: float) -> None:
    """gradcheck of q, k, v and the logit term (unsorted, duplicated pairs; some heads off some pairs)."""
    n, heads, d = 7, 2, 3
    edge_index, term = _small(n=n, heads=heads)
    edge_index = torch.cat([edge_index, edge_index[:, :5]], 1)  # duplicates
    term = torch.cat([term, term[:5]])
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n, heads, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    hs = (0, 1)
    plan = csr_plan(edge_index, n, n, hs, heads, torch.isfinite(term))
    finite_term = torch.where(torch.isfinite(term), term, torch.zeros((), dtype=term.dtype)).requires_grad_(True)

    def f(q, k, v, t):
        torch.manual_seed(11)  # the same dropout mask on every call
        t = torch.where(torch.isfinite(term), t, term)  # -inf stays outside the support
        return csr_attention(q, k, v, t, plan, hs, 0.5, dropout_p=dropout)

    assert torch.autograd.gradcheck(f, (q, k, v, finite_term))


def test_unsorted_duplicated_pairs_and_empty_rows() -> None:
    n, heads = 9, 2
    edge_index, term = _small(n=n, e=40, heads=heads, seed=4)
    edge_index = torch.cat([edge_index, edge_index[:, :6]], 1)
    term = torch.cat([term, term[:6]])
    term[edge_index[0] == 3] = float("-inf")  # query 3: no finite pair in any head
    keep = edge_index[0] != 5  # query 5: no pair at all
    edge_index, term = edge_index[:, keep], term[keep]
    csr, gather = _pair(8, heads, (), torch.float64)
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    with torch.no_grad():
        want = gather.forward_sparse(x, edge_index, learned=term)
        got = csr.forward_sparse(x, edge_index, learned=term)
        agg = csr._csr_aggregate(*csr.split_heads(x), edge_index, None, term, masked_only=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.all(agg[3] == 0) and torch.all(agg[5] == 0)


def test_separate_query_set_and_plan_rebuilt_when_support_changes() -> None:
    """forward_pairs with Nq != Nk; a second call with another support must not reuse the first plan."""
    nq, nk, heads, dim = 5, 11, 2, 8
    g = torch.Generator().manual_seed(7)
    edge_index = torch.stack([torch.randint(0, nq, (40,), generator=g), torch.randint(0, nk, (40,), generator=g)])
    xq = torch.randn(nq, dim, generator=g, dtype=torch.float64)
    xk = torch.randn(nk, dim, generator=g, dtype=torch.float64)
    csr, gather = _pair(dim, heads, (), torch.float64)
    for seed in (0, 1, 1):
        bias = torch.randn(40, heads, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        bias[torch.rand(40, heads, generator=torch.Generator().manual_seed(seed + 50)) < 0.4] = float("-inf")
        with torch.no_grad():
            got = csr.forward_pairs(xq, xk, edge_index, bias)
            want = gather.forward_pairs(xq, xk, edge_index, bias)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
