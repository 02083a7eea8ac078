"""The "Extending xmask" example of docs/extending.md, run as written: one bias file plus one registry line.

The two code blocks are read from docs/extending.md (so the documentation cannot drift from what
works), the bias is registered in :data:`xmask_cli.model.biases.BIASES` for the test, and the
logits of a forward pass are checked against numpy on hand-made graphs.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from xmask_cli.config import BIAS_NEEDS
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.model.biases import BIASES, BiasEntry
from xmask_cli.model.biases.stack import BiasSpec
from xmask_cli.model.network import ModelConfig, XMaskNet, head_labels
from xmask_cli.prepare.needs import model_needs

EXTENDING = Path(__file__).resolve().parents[3] / "docs" / "extending.md"


def readme_example() -> tuple[str, str, str]:
    """The bias file, the registry line and the schema's line of docs/extending.md (its text before the first
    ``##`` heading)."""
    section = EXTENDING.read_text().split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 3, "the section should hold the bias file, its registry line and its schema line"
    return blocks[0], blocks[1].strip(), blocks[2].strip()


@pytest.fixture
def neighbour(monkeypatch: pytest.MonkeyPatch) -> type:
    """Registers the documented bias under ``neighbour``; returns its class."""
    source, line, schema_line = readme_example()
    ns: dict = {"__name__": "neighbour_example"}
    exec(compile(source, "neighbour.py", "exec"), ns)
    entry = eval("{" + line.rstrip(",") + "}", {"BiasEntry": BiasEntry, "NeighbourBias": ns["NeighbourBias"]})
    assert list(entry) == ["neighbour"]
    monkeypatch.setitem(BIASES, "neighbour", entry["neighbour"])
    needs = eval("{" + schema_line.rstrip(",") + "}", {})
    assert needs == {"neighbour": entry["neighbour"].needs}
    monkeypatch.setitem(BIAS_NEEDS, "neighbour", needs["neighbour"])
    return ns["NeighbourBias"]


# Two graphs padded to 4 nodes: a path 0-1-2-3, and 0-1, 1-2 (3 nodes; node 3 is padding).
GRAPHS = [(4, [(0, 1), (1, 2), (2, 3)]), (3, [(0, 1), (1, 2)])]


def dense_inputs(n_max: int = 4, f: int = 3) -> tuple[torch.Tensor, torch.Tensor, dict, np.ndarray]:
    """Features, mask, SPD extras (-2: unreachable, as the cache writes) and the adjacency, from the edge lists."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(len(GRAPHS), n_max, f, generator=g)
    mask = torch.zeros(len(GRAPHS), n_max, dtype=torch.bool)
    adj = np.zeros((len(GRAPHS), n_max, n_max))
    spd = np.full((len(GRAPHS), n_max, n_max), -2, dtype=np.int64)
    for b, (n, edges) in enumerate(GRAPHS):
        mask[b, :n] = True
        for u, v in edges:
            adj[b, u, v] = adj[b, v, u] = 1.0
        # Hop distances by breadth-first search over the edge list.
        for s in range(n):
            spd[b, s, s], frontier, d = 0, [s], 0
            while frontier:
                d += 1
                nxt = [v for u in frontier for v in range(n) if adj[b, u, v] and spd[b, s, v] == -2]
                for v in nxt:
                    spd[b, s, v] = d
                frontier = nxt
    x[~mask] = 0.0
    return x, mask, {"spd": torch.from_numpy(spd)}, adj


def test_readme_bias_adds_its_term_to_the_logits(neighbour):
    """Logits of layer 1 = q·k/√d_h + w_h [i ~ j]: the term the toy bias promises, computed in numpy."""
    cfg = ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=1, task="node", use_bias=False,
                      biases=(BiasSpec("neighbour"),))
    model = XMaskNet(cfg).eval()
    modules = model.learned.layers[0]
    assert len(modules) == 1 and isinstance(modules[0], neighbour)
    w = np.array([0.7, -1.3])
    with torch.no_grad():
        modules[0].weight.copy_(torch.from_numpy(w))
    x, mask, extras, adj = dense_inputs()
    with torch.no_grad():
        _, layers = model.encode_dense(x, None, mask, return_terms=True, extras=extras)
    terms = layers[0]

    # Independent: the encoder and the q / k / v projections by hand, the bias from the edge lists.
    attn = model.blocks[0].attn
    p = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    h = x.double().numpy() @ p["encoder.weight"].T + p["encoder.bias"]
    heads, d_h = 2, 4

    def split(t: np.ndarray) -> np.ndarray:  # [B, N, D] -> [B, H, N, d_h]
        return t.reshape(*t.shape[:2], heads, d_h).transpose(0, 2, 1, 3)

    q = split(h @ p["blocks.0.attn.q.weight"].T + p["blocks.0.attn.q.bias"])
    k = split(h @ p["blocks.0.attn.k.weight"].T + p["blocks.0.attn.k.bias"])
    v = split(h @ p["blocks.0.attn.v.weight"].T + p["blocks.0.attn.v.bias"])
    assert attn.num_heads == heads and attn.head_dim == d_h
    want = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_h) + w[None, :, None, None] * adj[:, None]
    real = (mask[:, None, :, None] & mask[:, None, None, :]).expand(-1, heads, -1, -1).numpy()
    np.testing.assert_allclose(terms["logits"].double().numpy()[real], want[real], rtol=1e-5, atol=1e-5)
    assert np.abs(w[None, :, None, None] * adj[:, None])[real].max() > 0.5  # the term is really there

    # The attention the block computed with it (SDPA's own output) is the softmax of those logits over real keys.
    keys = mask[:, None, None, :].numpy()
    logits = np.where(keys, want, -np.inf)
    att = np.exp(logits - logits.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    rows = mask[:, None, :, None].expand(-1, heads, -1, d_h).numpy()
    np.testing.assert_allclose(terms["aggregate"].double().numpy()[rows], (att @ v)[rows], rtol=1e-5, atol=1e-5)
    assert head_labels(cfg) == [["Nbr", "Nbr"]]


def test_readme_bias_is_a_config_type_and_trains(neighbour, tmp_path):
    """The registry line is all the config, the engine (cache section) and training need."""
    cfg = resolve("graph-level", ["model.biases=[{type: neighbour}]", "model.hidden=8", "model.heads=2",
                                  "model.layers=1", "train.epochs=1"])
    assert model_needs(cfg) == frozenset({"spd"})
    result = train_seeds(cfg, [0], device="cpu", cache_dir=tmp_path / "cache", run_root=tmp_path / "runs")
    (summary,) = result["runs"]
    assert 0.0 <= summary["metrics"]["test"] <= 1.0
    saved = (tmp_path / "runs" / "mutag-graph" / "0" / "config.json").read_text()
    assert '"type": "neighbour"' in saved
