import pytest
import torch
import torch.nn.functional as F

from tests.model.graphs import PATH_TRIANGLE, TWO_PARTS, disjoint_union, norm_powers, padded, union_pairs
from xmask_cli.model.layers import TransformerBlock, transformer_blocks
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias

DIM, HEADS = 16, 2


def _block(norm="post", mask_scale="paper", seed=0, **kw):
    torch.manual_seed(seed)
    block = TransformerBlock(DIM, HEADS, norm=norm, mask_scale=mask_scale, **kw).double().eval()
    # Non-trivial LayerNorm affine so a swapped or skipped norm shows.
    with torch.no_grad():
        for ln in (block.norm1, block.norm2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
    return block


def _x(shape, seed=1):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _ffn(block, h):
    lin1, lin2 = block.ffn[0], block.ffn[3]
    return F.relu(h @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias


def _ln(ln, h):
    mu = h.mean(-1, keepdim=True)
    var = h.var(-1, unbiased=False, keepdim=True)
    return (h - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_block_composition(norm):
    block = _block(norm)
    powers, mask = padded([PATH_TRIANGLE, TWO_PARTS], HEADS)
    bias = XLogSMaskBias(HEADS)(DenseStructure(powers, mask))
    x = _x((2, 8, DIM))
    attn = lambda h: block.attn.forward_dense(h, bias, mask)  # noqa: E731
    if norm == "post":
        h = _ln(block.norm1, x + attn(x))
        want = _ln(block.norm2, h + _ffn(block, h))
    else:
        h = x + attn(_ln(block.norm1, x))
        want = h + _ffn(block, _ln(block.norm2, h))
    torch.testing.assert_close(block(x, bias, mask), want, rtol=1e-10, atol=1e-12)


@torch.no_grad()
def test_post_and_pre_differ():
    x = _x((1, 6, DIM))
    assert (_block("post")(x) - _block("pre")(x)).abs().max() > 1e-3


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("mask_scale,atol", [
    # See test_attention: with 'paper', pairs outside the union support keep ~e^-20 of the
    # weight in dense mode (1e-7 is a safe bound after one block); with 'none', ~e^-69.
    ("paper", 1e-7),
    ("none", 1e-11),
])
@torch.no_grad()
def test_block_dense_and_sparse_agree(norm, mask_scale, atol):
    block = _block(norm, mask_scale)
    graphs = [PATH_TRIANGLE, TWO_PARTS]
    powers, mask = padded(graphs, HEADS)
    x = _x((2, 8, DIM))
    dense = block(x, XLogSMaskBias(HEADS)(DenseStructure(powers, mask)), mask)
    edge_index, values = disjoint_union(graphs, HEADS)
    sparse = block(torch.cat([x[0, :6], x[1]]), XLogSMaskBias(HEADS)(SparseStructure(edge_index, values)),
                   edge_index=edge_index)
    torch.testing.assert_close(sparse, torch.cat([dense[0, :6], dense[1]]), rtol=0, atol=atol)


def _stack(norm):
    return [_block(norm, seed=s) for s in range(2)]


def _run(blocks, x, bias, mask=None, edge_index=None):
    for b in blocks:
        x = b(x, bias, mask, edge_index=edge_index)
    return x


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_stack_permutation_equivariance(norm):
    blocks = _stack(norm)
    perm = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(8)
    make = XLogSMaskBias(HEADS)
    powers, mask = padded([TWO_PARTS], HEADS)
    x = _x((1, 8, DIM))
    out = _run(blocks, x, make(DenseStructure(powers, mask)), mask)
    p_powers = powers[:, :, perm][:, :, :, perm]
    out_p = _run(blocks, x[:, perm], make(DenseStructure(p_powers, mask)), mask)
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-10, atol=1e-12)

    edge_index, values = union_pairs(norm_powers(TWO_PARTS, HEADS))
    bias = make(SparseStructure(edge_index, values))
    out = _run(blocks, x[0], bias, edge_index=edge_index)
    out_p = _run(blocks, x[0, perm], bias, edge_index=inv[edge_index])
    torch.testing.assert_close(out_p, out[perm], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_stack_padding_invariance(norm):
    blocks = _stack(norm)
    make = XLogSMaskBias(HEADS)
    x_alone = _x((1, 6, DIM))
    powers, mask = padded([PATH_TRIANGLE], HEADS)
    alone = _run(blocks, x_alone, make(DenseStructure(powers, mask)), mask)

    powers, mask = padded([PATH_TRIANGLE, TWO_PARTS], HEADS)
    x = _x((2, 8, DIM), seed=5)
    x[0, :6] = x_alone[0]
    x[0, 6:] = 1e3
    out = _run(blocks, x, make(DenseStructure(powers, mask)), mask)
    torch.testing.assert_close(out[0, :6], alone[0], rtol=1e-10, atol=1e-12)
    assert torch.isfinite(out).all()


def test_gradients_finite_with_padding():
    block = _block(dropout=0.1, attn_dropout=0.1).train()
    powers, mask = padded([PATH_TRIANGLE, TWO_PARTS], HEADS)
    x = _x((2, 8, DIM)).requires_grad_()
    out = block(x, XLogSMaskBias(HEADS)(DenseStructure(powers, mask)), mask)
    out[mask].square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters())
    assert torch.isfinite(x.grad).all()
    # Padded inputs influence no real output.
    assert (x.grad[0, 6:] == 0).all()


def test_dropout_only_in_training():
    block = _block(dropout=0.5)
    x = _x((1, 6, DIM))
    with torch.no_grad():
        ref = block(x)
        torch.testing.assert_close(block(x), ref)
        block.train()
        assert (block(x) - ref).abs().max() > 1e-6


def test_bad_norm_is_refused():
    with pytest.raises(ValueError):
        TransformerBlock(DIM, HEADS, norm="sandwich")


def test_transformer_blocks_keeps_order_and_refuses_another_module():
    a, b = _block(seed=0), _block(seed=1)
    got = transformer_blocks(torch.nn.ModuleList([a, b]))
    assert len(got) == 2 and got[0] is a and got[1] is b
    with pytest.raises(TypeError, match="got a Linear"):
        transformer_blocks(torch.nn.ModuleList([a, torch.nn.Linear(2, 2)]))
