"""Helpers of the path-semantics tests: trained-scale logits, numpy references, comparisons."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmask_cli.model.logsmask import DenseStructure, SparseStructure
from xmask_cli.model.network import XMaskNet

EPS = 1e-30
#: Smallest standard deviation of the logits q·k/sqrt(d_h) the comparisons run at.
LOGIT_STD = 5.0
RTOL = 1e-4
#: The key projection's bias adds q_i·b_k to every logit of row i: the softmax ignores it, so its gradient
#: is 0 up to float round-off (~1e-6 of the others') on both paths and has no relative precision to compare.
ZERO_GRAD = "blocks.0.attn.k.bias"


def scale_qk(attns, std, target: float = 1.5 * LOGIT_STD, rounds: int = 3) -> float:
    """Scale W_q, W_k (and their biases) of every attention in ``attns`` alike until ``std()`` is about ``target``.

    ``std``: the logit spread to reach, measured on the caller's inputs. Returns its last value.
    """
    with torch.no_grad():
        for _ in range(rounds):
            factor = math.sqrt(target / std())
            for attn in attns:
                for lin in (attn.q, attn.k):
                    lin.weight.mul_(factor)
                    lin.bias.mul_(factor)
        return std()


def spread_logits(model: XMaskNet, x: torch.Tensor, target: float = 1.5 * LOGIT_STD) -> float:
    """Scale W_q, W_k of the first block so its logits q·k/sqrt(d_h) over all pairs of ``x`` have std ~``target``.

    As after training (not at initialisation). Returns the smallest per-head std reached.
    """
    attn = model.blocks[0].attn

    def std() -> float:
        q, k, _ = attn.split_heads(model.encoder(x))
        return float((torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(attn.head_dim)).std(dim=(1, 2)).min())

    return scale_qk([attn], std, target)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max|a - b| / max|b|``."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def run_with_grads(model: XMaskNet, x: torch.Tensor, forward) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``forward(model, x)`` and the gradients (w.r.t. ``x`` and every parameter) of a fixed random loss."""
    model.zero_grad()
    x = x.clone().requires_grad_(True)
    out = forward(model, x)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    (out * weight).sum().backward()
    grads = {"x": x.grad.clone()}
    grads.update({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    return out.detach(), grads


def assert_same_grads(grad_d: dict[str, torch.Tensor], grad_s: dict[str, torch.Tensor]) -> None:
    """Every gradient equal to :data:`RTOL` relative (the analytically zero key bias: both ~0)."""
    assert grad_d.keys() == grad_s.keys() and {"x", "blocks.0.attn.q.weight", "encoder.weight"} <= grad_d.keys()
    for name in grad_d:
        if name == ZERO_GRAD:
            scale = float(grad_d["blocks.0.attn.k.weight"].abs().max())
            assert max(float(grad_d[name].abs().max()), float(grad_s[name].abs().max())) < 1e-3 * scale
            continue
        assert rel(grad_s[name], grad_d[name]) < RTOL, name


def log_mask(a_k: np.ndarray, scale: float, outside: str = "hard") -> np.ndarray:
    """``scale · log(Â^k + eps)``, with ``-inf`` where ``Â^k = 0`` under ``'hard'``."""
    m = np.log(a_k.astype(np.float64) + EPS)
    if outside == "hard":
        m = np.where(a_k > 0, m, -np.inf)
    return m * scale


def numpy_heads(model: XMaskNet, x: torch.Tensor, masks: list[np.ndarray | None]) -> np.ndarray:
    """float64 ``[N, H, d_h]``: per head, ``softmax(q·k/sqrt(d_h) + masks[h]) v`` (None: no mask, plain attention)."""
    attn = model.blocks[0].attn
    W = {n: (getattr(attn, n).weight.detach().double().numpy(), getattr(attn, n).bias.detach().double().numpy())
         for n in ("q", "k", "v")}
    with torch.no_grad():
        h = model.encoder(x).double().numpy()
    H, d = attn.num_heads, attn.head_dim
    q, k, v = ((h @ W[n][0].T + W[n][1]).reshape(-1, H, d) for n in ("q", "k", "v"))
    out = np.empty_like(q)
    for hh in range(H):
        logits = q[:, hh] @ k[:, hh].T / math.sqrt(d)
        if masks[hh] is not None:
            logits = logits + masks[hh]
        w = np.exp(logits - logits.max(1, keepdims=True))
        out[:, hh] = (w / w.sum(1, keepdims=True)) @ v[:, hh]
    return out


def aggregate(model: XMaskNet, x: torch.Tensor, path: str, powers: torch.Tensor | None = None,
              edge_index: torch.Tensor | None = None, values: torch.Tensor | None = None) -> np.ndarray:
    """``[N, H, d_h]`` per-head aggregate (before the output projection) of the first block on one path.

    ``'dense'`` reads ``powers [1, K, N, N]``; ``'sparse'`` reads ``edge_index`` and ``values [E, K]``.
    """
    attn = model.blocks[0].attn
    with torch.no_grad():
        h = model.encoder(x)
        if path == "dense":
            bias = None if model.bias is None else model.bias(
                DenseStructure(powers, torch.ones(1, x.size(0), dtype=torch.bool)))
            _, terms = attn.forward_dense(h[None], bias, return_terms=True)
            return terms["aggregate"][0].transpose(0, 1).double().numpy()
        bias = None if model.bias is None else model.bias(SparseStructure(edge_index, values))
        _, terms = attn.forward_sparse(h, edge_index, bias, return_terms=True)
        return terms["aggregate"].double().numpy()


def max_rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def cora_union_pairs(cache_dir: Path, k: int) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Bundled Cora through the real loader: its PyG ``Data``, and the union support of ``Â^1..Â^k`` as
    ``[2, E]`` pairs with their ``[E, k]`` float32 values (``structure.powers.power_pairs``)."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.structure.graph import adjacency
    from xmask_cli.structure.powers import power_pairs

    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=cache_dir, offline=True)
    data = graphs.dataset[0]
    n = int(data.num_nodes)
    row, col, values = power_pairs(adjacency(graphs.edge_index[0], n), k)
    return (data, torch.from_numpy(np.stack([row, col]).astype(np.int64)),
            torch.from_numpy(np.asarray(values, dtype=np.float32)))
