"""The network's shape switches: residual, norm, feed-forward, activation, layer dropout, attention output.

Each switch is checked against a forward written out by hand in plain torch
(float64) on a small graph, and the dense and sparse paths are checked to give
the same outputs and gradients with every switch on full Cora (``Â^1, Â^2``)
with trained-scale logits (``q·k / sqrt(d_h)`` spread by several units), in
float64 so that any difference beyond round-off shows (float32 round-off through
two scaled layers alone reaches 1e-4).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.model.graphs import adjacency, norm_powers, union_pairs
from tests.model.semantics import LOGIT_STD, cora_union_pairs, rel, scale_qk
from xmask_cli.model.batches import SparseBatch
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import SparseStructure
from xmask_cli.model.network import ModelConfig, XMaskNet

#: Switch sets the tests run (each differs from the defaults in several keys).
SHAPES = {
    "gat": {"arch": "gat", "residual": False, "norm": "none", "activation": "elu", "output": "attention",
            "output_heads": 2, "output_powers": [1, 2]},
    "gat-pre-gelu": {"arch": "gat", "residual": True, "norm": "pre", "activation": "gelu"},
    "post-nores-out": {"residual": False, "norm": "post", "output": "attention"},
    "none-res": {"residual": True, "norm": "none"},
    # GAT's own shape: no encoder (the first attention reads the raw features), heads concatenated unprojected.
    "gat-direct": {"arch": "gat", "encoder": "none", "combine": "concat", "residual": False, "norm": "none",
                   "activation": "elu", "output": "attention"},
    "direct-post-ffn": {"encoder": "none", "residual": False, "norm": "post"},
}


def _ln(x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight.double() + ln.bias.double()


def _lin(x: torch.Tensor, lin: torch.nn.Linear) -> torch.Tensor:
    return x @ lin.weight.double().t() + lin.bias.double()


def _heads(attn, x: torch.Tensor, logmask: list[np.ndarray]) -> torch.Tensor:
    """``[N, H, d]`` per-head softmax(q·k/√d + M_h) v over a dense grid (M_h = -inf outside the support)."""
    n, H, d = x.shape[0], attn.num_heads, attn.head_dim
    q, k, v = (_lin(x, lin).view(n, H, d) for lin in (attn.q, attn.k, attn.v))
    out = []
    for h in range(H):
        logits = q[:, h] @ k[:, h].t() / math.sqrt(d) + torch.from_numpy(logmask[h])
        out.append(torch.softmax(logits, -1) @ v[:, h])
    return torch.stack(out, 1)


def _act(name: str, x: torch.Tensor) -> torch.Tensor:
    return {"none": lambda t: t, "elu": lambda t: torch.where(t > 0, t, torch.exp(t) - 1),
            "relu": lambda t: t.clamp_min(0), "gelu": lambda t: 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))}[name](x)


def _hand_block(block: TransformerBlock, x: torch.Tensor, logmask: list[np.ndarray], cfg: dict) -> torch.Tensor:
    """The block as documented: act(sublayers(x)), sublayer = [LN] f [+ x] [LN] by norm and residual."""
    def attend(h: torch.Tensor) -> torch.Tensor:
        joined = _heads(block.attn, h, logmask).reshape(h.shape[0], -1)
        return joined if cfg["combine"] == "concat" else _lin(joined, block.attn.out)

    def ffn(h: torch.Tensor) -> torch.Tensor:
        return _lin(_lin(h, block.ffn[0]).clamp_min(0), block.ffn[3])

    def sub(h: torch.Tensor, f, ln) -> torch.Tensor:
        y = f(_ln(h, ln)) if cfg["norm"] == "pre" else f(h)
        y = h + y if cfg["residual"] else y
        return _ln(y, ln) if cfg["norm"] == "post" else y

    h = sub(x, attend, block.norm1)
    if cfg["ffn"]:
        h = sub(h, ffn, block.norm2)
    return _act(cfg["activation"], h)


def _log_mask(a_k: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(a_k > 0, np.log(np.where(a_k > 0, a_k, 1.0)), -np.inf)


def _toy() -> tuple[torch.Tensor, np.ndarray]:
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (1, 6), (6, 7), (7, 8)]
    a = adjacency(9, edges)
    x = torch.randn(9, 5, generator=torch.Generator().manual_seed(3))
    return x, norm_powers(a, 2)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_network_equals_a_hand_written_forward(shape: str) -> None:
    """Encoder, two blocks, then the MLP head or the attention output (mean over heads), in float64 by hand."""
    kw = SHAPES[shape]
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, head_powers=(1, 2), layers=2, dropout=0.0,
                      task="node", mask_scale="none", **kw)
    model = XMaskNet(cfg).double().eval()
    x, powers = _toy()
    x = x.double()
    full = {"residual": cfg.residual, "norm": cfg.norm, "ffn": cfg.ffn, "activation": cfg.activation,
            "combine": cfg.combine}
    masks = [_log_mask(powers[k - 1]) for k in cfg.head_powers]
    h = x if cfg.encoder == "none" else _lin(x, model.encoder)
    for block in model.blocks:
        h = _hand_block(block, h, masks, full)
    if cfg.output == "attention":
        out_masks = [_log_mask(powers[k - 1]) for k in cfg.output_powers]
        want = _heads(model.out_block.attn, h, out_masks).mean(1)  # [N, out_dim]: each head emits the outputs
        assert model.head is None and model.out_block.attn.out is None  # no MLP, no output projection
    else:
        want = _lin(_lin(h, model.head[0]).clamp_min(0), model.head[3])
    with torch.no_grad():
        dense = model.forward_dense(x[None], torch.from_numpy(powers)[None])[0]
        ei, values = union_pairs(powers)
        sparse = model.forward_sparse(x, ei, values)
    torch.testing.assert_close(dense, want, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(sparse, want, rtol=1e-9, atol=1e-10)


def test_attention_output_layer_reads_its_own_powers_and_heads() -> None:
    """output_powers [2] vs [1]: different outputs; one head of width out_dim, each head's v of width out_dim."""
    x, powers = _toy()
    outs = []
    for p in ([1], [2]):
        torch.manual_seed(0)
        model = XMaskNet(ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, layers=1, task="node",
                                     output="attention", output_powers=p)).eval()
        assert model.out_block.attn.v.weight.shape == (3, 8)
        with torch.no_grad():
            outs.append(model.forward_dense(x[None], torch.from_numpy(powers).float()[None])[0])
    assert outs[0].shape == (9, 3)
    assert (outs[0] - outs[1]).abs().max() > 1e-3


def test_layer_dropout_drops_each_block_input() -> None:
    """Training, layer_dropout p: the block's output is its eval output on x * keep / (1 - p), keep ~ Bernoulli(1 - p)."""
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, dropout=0.0, residual=False, norm="none", ffn=False, layer_dropout=0.5)
    x = torch.randn(1, 9, 8, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    got = block.train()(x)
    torch.manual_seed(7)
    keep = torch.empty_like(x).bernoulli_(0.5)  # what CPU dropout draws
    want = block.eval()(x * keep / 0.5)
    torch.testing.assert_close(got, want)
    assert (keep == 0).any() and (keep == 1).any()
    assert (got - block.eval()(x)).abs().max() > 1e-3  # the dropout does act in training


def test_switches_drop_their_parameters_and_defaults_keep_them() -> None:
    """ffn=False has no FFN, norm='none' no LayerNorm; the default block keeps its parameter names."""
    default = TransformerBlock(8, 2)
    assert {n.split(".")[0] for n, _ in default.named_parameters()} == {"attn", "ffn", "norm1", "norm2"}
    bare = TransformerBlock(8, 2, residual=False, norm="none", ffn=False)
    assert {n.split(".")[0] for n, _ in bare.named_parameters()} == {"attn"}
    with pytest.raises(ValueError, match="norm"):
        TransformerBlock(8, 2, norm="middle")
    with pytest.raises(ValueError, match="activation"):
        TransformerBlock(8, 2, activation="tanh")


@pytest.mark.parametrize("task", ["graph", "link", "edge"])
def test_attention_output_is_refused_off_the_node_task(task: str) -> None:
    with pytest.raises(ValueError, match="node task"):
        ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, task=task, output="attention")


# ----------------------------------------------------------------- full Cora, dense = sparse
K = 2


class Cora:
    """Cora's features and ``Â^1, Â^2`` as a dense grid and as the union pairs."""

    def __init__(self, x: torch.Tensor, edge_index: torch.Tensor, values: torch.Tensor, n: int):
        self.x = x
        self.edge_index, self.values = edge_index, values
        dense = torch.zeros(K, n, n, dtype=values.dtype)
        dense[:, edge_index[0], edge_index[1]] = values.t()
        self.powers = dense[None]


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> Cora:
    data, edge_index, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), K)
    assert int(data.num_nodes) == 2708
    return Cora(data.x.double(), edge_index, values.double(), int(data.num_nodes))


def _cora_model(shape: str, **kw) -> XMaskNet:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=1433, out_dim=7, hidden=32, heads=4, head_powers=(1, 1, 2, 2), layers=2, dropout=0.0,
                      task="node", mask_scale="none", **{**SHAPES[shape], **kw})
    return XMaskNet(cfg).double()


def _spread(model: XMaskNet, cora: Cora) -> float:
    """Scale every attention's W_q, W_k so its logits spread as after training; the smallest spread reached."""
    def logit_std(attn, h: torch.Tensor) -> float:
        q, k, _ = attn.split_heads(h)
        return float((torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(attn.head_dim)).std(dim=(1, 2)).min())

    spreads = []
    with torch.no_grad():
        inputs = model.encoder(cora.x)
        attns = [b.attn for b in model.blocks] + ([model.out_block.attn] if model.out_block is not None else [])
        for i, attn in enumerate(attns):
            # Each layer's input, computed with the layers before it already scaled.
            h = inputs
            bias = model.bias(SparseStructure(cora.edge_index, cora.values))
            for block in model.blocks[:i]:
                h = block(h, bias, edge_index=cora.edge_index)
            spreads.append(scale_qk([attn], lambda a=attn, h=h: logit_std(a, h), 1.5 * LOGIT_STD))
    return min(spreads)


def _grads(model: XMaskNet, cora: Cora, forward) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    x = cora.x.clone().requires_grad_(True)
    out = forward(model, x)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    (out * weight).sum().backward()
    grads = {"x": x.grad.clone()}
    grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    return out.detach(), grads


def _dense(model: XMaskNet, x: torch.Tensor, cora: Cora) -> torch.Tensor:
    return model.forward_dense(x[None], cora.powers)[0]


def _sparse(model: XMaskNet, x: torch.Tensor, cora: Cora) -> torch.Tensor:
    return model.forward_sparse(x, cora.edge_index, cora.values)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_dense_equals_sparse_on_cora_with_every_switch(cora: Cora, shape: str) -> None:
    model = _cora_model(shape).eval()
    assert _spread(model, cora) >= LOGIT_STD
    out_d, grad_d = _grads(model, cora, lambda m, x: _dense(m, x, cora))
    out_s, grad_s = _grads(model, cora, lambda m, x: _sparse(m, x, cora))
    assert out_d.shape == (2708, 7)
    assert rel(out_s, out_d) < 1e-8
    assert grad_d.keys() == grad_s.keys() and ("encoder.weight" in grad_d) == (model.cfg.encoder != "none")
    for name in grad_d:
        if name.endswith("attn.k.bias"):  # q_i·b_k shifts a whole softmax row: analytically 0 on both paths
            top = float(grad_d[name.replace("k.bias", "k.weight")].abs().max())
            assert max(float(grad_d[name].abs().max()), float(grad_s[name].abs().max())) < 1e-3 * top
            continue
        assert rel(grad_s[name], grad_d[name]) < 1e-8, name


def test_dense_equals_sparse_in_training_with_layer_and_input_dropout(cora: Cora) -> None:
    """Layer and input dropout draw the same masks on both paths ([1, N, D] and [N, D] hold the same elements)."""
    model = _cora_model("gat", layer_dropout=0.6, input_dropout=0.5).train()
    assert _spread(model, cora) >= LOGIT_STD
    torch.manual_seed(11)
    out_d = _dense(model, cora.x, cora)
    torch.manual_seed(11)
    out_s = _sparse(model, cora.x, cora)
    assert rel(out_s, out_d) < 1e-8
    torch.manual_seed(12)
    assert rel(_sparse(model, cora.x, cora), out_d) > 1e-2  # the masks do change the outputs
    with torch.no_grad():
        assert rel(model.eval()(SparseBatch(x=cora.x, edge_index=cora.edge_index, values=cora.values)), out_d) > 1e-2


def test_sparse_bias_is_reused_and_refreshed() -> None:
    """The sparse path reuses the X-LogSMask bias while the pairs and values are the same tensors, unmodified."""
    x, powers = _toy()
    ei, values = union_pairs(powers)
    values = values.float()
    torch.manual_seed(0)
    model = XMaskNet(ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, layers=1, task="node",
                                 output="attention")).eval()
    with torch.no_grad():
        first = model.forward_sparse(x, ei, values)
        again = model.forward_sparse(x, ei, values)
        torch.testing.assert_close(again, first)
        values[::3].mul_(0.2)  # the same tensor written in place (some pairs' Â^k): the bias must follow
        changed = model.forward_sparse(x, ei, values)
        fresh = XMaskNet(model.cfg).eval()
        fresh.load_state_dict(model.state_dict())
        torch.testing.assert_close(changed, fresh.forward_sparse(x, ei, values.clone()))
    assert (changed - first).abs().max() > 1e-4


def test_encoder_none_reads_the_raw_features_and_concat_has_no_projection() -> None:
    """encoder=none: no encoder parameters, the first block's q, k, v take in_dim inputs; combine=concat: no
    output projection. Residual, pre-norm, experts and other tasks are refused with it."""
    cfg = ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, head_powers=(1, 2), layers=2, task="node",
                      **SHAPES["gat-direct"])
    model = XMaskNet(cfg)
    assert not list(model.encoder.parameters())
    first, second = model.blocks
    assert first.attn.q.in_features == 5 and second.attn.q.in_features == 8
    assert first.attn.out is None and second.attn.out is None
    for bad in ({"residual": True}, {"norm": "pre"}, {"task": "graph", "output": "mlp"}):
        with pytest.raises(ValueError, match="encoder 'none'"):
            ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, **{**SHAPES["gat-direct"], "task": "node", **bad})
