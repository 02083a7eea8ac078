"""Link prediction and edge regression: no held-out edge in any structure, learning, MRR protocols, resume."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

from xmask_cli.config import PowersConfig, SpdConfig, SpectrumConfig, StructureConfig
from xmask_cli.cache import StructureCache
from xmask_cli.data.edgefile import EdgeData, load_edge_file
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine import pairs as pairs_mod
from xmask_cli.engine.loop import TrainConfig, fit
from xmask_cli.engine.metrics import mae
from xmask_cli.engine.train import train_task
from xmask_cli.engine.pairs import (EdgeTask, LinkTask, edge_regression_split, link_mrr,
                                    one_hot_degree, prepare_pair_structure, train_edge_index)
from xmask_cli.engine.runs import RunDir
from xmask_cli.errors import UsageError
from xmask_cli.engine.splits import edge_split
from xmask_cli.model.network import ModelConfig, XMaskNet

SPD_MAX = 8
#: Everything on, full spectrum for the small graphs: the leakage checks read every cached group.
FULL = StructureConfig(powers=PowersConfig(k=3), spd=SpdConfig(enabled=True, max_distance=SPD_MAX),
                       spectrum=SpectrumConfig(enabled=True, num_eigs=8, full_max_nodes=64))
#: Powers only: what training reads, and fast to prepare on Cora.
POWERS_ONLY = StructureConfig(powers=PowersConfig(k=2), spd=SpdConfig(enabled=False),
                              spectrum=SpectrumConfig(enabled=False))


def _random_graph(n: int, p: float, seed: int) -> np.ndarray:
    """``[2, 2E]`` undirected G(n, p) edges in both directions."""
    rng = np.random.default_rng(seed)
    u, v = np.triu_indices(n, 1)
    keep = rng.random(u.size) < p
    u, v = u[keep], v[keep]
    return np.stack([np.concatenate([u, v]), np.concatenate([v, u])]).astype(np.int64)


# ----------------------------------------------------------- independent math
def _adjacency(edge_index: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[edge_index[0], edge_index[1]] = 1.0
    a[edge_index[1], edge_index[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    return a


def _powers(edge_index: np.ndarray, n: int, k: int) -> np.ndarray:
    """``[k, n, n]`` Â^1..Â^k, Â = D^-1/2 (A + I) D^-1/2 (DESIGN.md)."""
    a = _adjacency(edge_index, n) + np.eye(n)
    d = 1.0 / np.sqrt(a.sum(1))
    ahat = d[:, None] * a * d[None, :]
    out, m = [], np.eye(n)
    for _ in range(k):
        m = m @ ahat
        out.append(m)
    return np.stack(out)


def _spd(edge_index: np.ndarray, n: int, cutoff: int) -> np.ndarray:
    """Hop distances by networkx: -1 beyond ``cutoff`` (same component), -2 unreachable."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edge_index.T.tolist())
    comp = np.empty(n, dtype=np.int64)
    for c, nodes in enumerate(nx.connected_components(g)):
        comp[list(nodes)] = c
    out = np.where(comp[:, None] == comp[None, :], -1, -2)
    for src, dist in nx.all_pairs_shortest_path_length(g, cutoff=cutoff):
        for dst, d in dist.items():
            out[src, dst] = d
    return out


def _laplacian_eigvals(edge_index: np.ndarray, n: int) -> np.ndarray:
    a = _adjacency(edge_index, n)
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
    return np.linalg.eigvalsh(np.eye(n) - d[:, None] * a * d[None, :])


def _check_no_leak(cache_path: Path, train_ei: np.ndarray, full_ei: np.ndarray, held_out: np.ndarray, n: int) -> None:
    """The cache is exactly the training graph's structure, and held-out pairs are not adjacent in it."""
    with StructureCache(cache_path) as c:
        powers, spd, (lam, _) = c.dense_powers(0), c.dense_spd(0), c.spectrum(0)
    u, v = held_out
    assert (powers[0, u, v] == 0).all() and (powers[0, v, u] == 0).all()
    assert (spd[u, v] != 1).all() and (spd[v, u] != 1).all()

    k = powers.shape[0]
    np.testing.assert_allclose(powers, _powers(train_ei, n, k), atol=1e-5)
    np.testing.assert_array_equal(spd, _spd(train_ei, n, SPD_MAX))
    np.testing.assert_allclose(np.sort(lam), _laplacian_eigvals(train_ei, n), atol=1e-6)
    # ... and the full graph's would have been different.
    assert np.abs(powers - _powers(full_ei, n, k)).max() > 1e-3
    assert (spd != _spd(full_ei, n, SPD_MAX)).any()
    assert np.abs(np.sort(lam) - _laplacian_eigvals(full_ei, n)).max() > 1e-3


def test_link_structure_sees_training_edges_only(tmp_path: Path) -> None:
    n = 40
    full = _random_graph(n, 0.12, seed=1)
    split = edge_split(full, n, seed=0, fractions=(0.7, 0.1, 0.2))
    lines: list[str] = []
    path = prepare_pair_structure("toy", split.train_edge_index, n, FULL, tmp_path, log=lines.append)
    assert path.parent.name == "toy-train-edges" and any("preparing" in m for m in lines)
    held_out = np.concatenate([split.val_pos, split.test_pos], axis=1)
    _check_no_leak(path, split.train_edge_index, full, held_out, n)

    # Same training edges (any order): the same cache, reused without preparing again.
    lines.clear()
    assert prepare_pair_structure("toy", split.train_edge_index[:, ::-1], n, FULL, tmp_path, log=lines.append) == path
    assert not any("preparing" in m for m in lines)

    # A cache of the full graph is refused: the guard against leaking through the wrong file.
    full_path = prepare_pair_structure("toy-full", full, n, FULL, tmp_path)
    x = torch.randn(n, 4)
    with pytest.raises(ValueError, match="not prepared from this split's training edges"):
        LinkTask(full_path, x, split, dataset="toy", fractions=(0.7, 0.1, 0.2))
    LinkTask(path, x, split, dataset="toy", fractions=(0.7, 0.1, 0.2))


@pytest.mark.parametrize("attention", ["dense", "sparse"])
def test_link_bias_inputs_see_training_edges_only(tmp_path: Path, attention: str) -> None:
    """What the learned biases read (SPD, RRWP, spectrum) is the training graph's; held-out edges are not adjacent."""
    from dataclasses import replace

    from xmask_cli.config import RrwpConfig

    n = 30
    full = _random_graph(n, 0.15, seed=3)
    split = edge_split(full, n, seed=0, fractions=(0.7, 0.1, 0.2))
    cfg = replace(FULL, rrwp=RrwpConfig(enabled=True, steps=3))
    path = prepare_pair_structure("toy", split.train_edge_index, n, cfg, tmp_path)
    s = pairs_mod._Structure(path, split.train_edge_index, n, dense_max_nodes=1000, device=torch.device("cpu"),
                             attention=attention, needs={"spd", "rrwp", "spectrum"})
    want_spd = _spd(split.train_edge_index, n, SPD_MAX)
    a = _adjacency(split.train_edge_index, n)
    deg = a.sum(1, keepdims=True)
    p1 = np.divide(a, deg, out=np.zeros_like(a), where=deg > 0)  # P = D^-1 A of the training graph
    held = np.concatenate([split.val_pos, split.test_pos], axis=1)
    if attention == "dense":
        spd, rrwp = s.extras["spd"][0].numpy(), s.extras["rrwp"][0].numpy()
        np.testing.assert_array_equal(spd, want_spd)
        np.testing.assert_allclose(rrwp[1], p1, atol=1e-6)
        assert (spd[held[0], held[1]] != 1).all() and (rrwp[1][held[0], held[1]] == 0).all()
    else:
        r, c = s.pairs.numpy()
        np.testing.assert_array_equal(s.extras["spd"].numpy(), want_spd[r, c])
        np.testing.assert_allclose(s.extras["rrwp"][:, 1].numpy(), p1[r, c], atol=1e-6)
    lam = s.extras["eig_vals"].numpy().reshape(-1, s.extras["eig_vals"].shape[-1])[0]
    np.testing.assert_allclose(np.sort(lam), _laplacian_eigvals(split.train_edge_index, n), atol=1e-5)


def _edge_data(n: int, seed: int) -> EdgeData:
    ei = _random_graph(n, 0.1, seed)
    ei = ei[:, ei[0] < ei[1]]
    targets = np.random.default_rng(seed).normal(size=(ei.shape[1], 2)).astype(np.float32)
    return EdgeData(edge_index=ei, targets=targets, num_nodes=n, x=None, target_names=("a", "b"))


def test_edge_structure_and_features_see_training_rows_only(tmp_path: Path) -> None:
    n = 40
    data = _edge_data(n, seed=2)
    rows = edge_regression_split(data.num_edges, seed=0, fractions=(0.7, 0.1, 0.2))
    train_ei = train_edge_index(data, rows)
    path = prepare_pair_structure("toy", train_ei, n, FULL, tmp_path, level="edge")
    held_out = data.edge_index[:, np.concatenate([rows.val, rows.test])]
    full = np.concatenate([data.edge_index, data.edge_index[::-1]], axis=1)
    _check_no_leak(path, train_ei, full, held_out, n)

    task = EdgeTask(path, None, data, rows, dataset="toy")
    deg = _adjacency(train_ei, n).sum(1).astype(np.int64)
    assert torch.equal(task.x.argmax(1), torch.from_numpy(deg))  # degree of the TRAINING graph
    assert task.in_dim == deg.max() + 1 and task.out_dim == 2 and task.model_task == "edge"
    assert not torch.equal(one_hot_degree(full, n).argmax(1), torch.from_numpy(deg))
    d = task.describe()
    assert json.loads(json.dumps(d)) == d
    assert d["split"]["name"] == "edge-rows-70-10-20" and d["split"]["fractions"] == [0.7, 0.1, 0.2]
    assert task.split_sizes() == dict(zip(("train", "val", "test"), rows.sizes()))

    full_path = prepare_pair_structure("toy-full", full, n, FULL, tmp_path, level="edge")
    with pytest.raises(ValueError, match="not prepared from this split's training edges"):
        EdgeTask(full_path, None, data, rows, dataset="toy")


# ------------------------------------------------------------------ MRR
def _brute_rank(p: float, negs: list[float]) -> float:
    rank = 1.0
    for q in negs:
        rank += 1.0 if q > p else 0.5 if q == p else 0.0
    return rank


def test_mrr_protocols_match_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    pos = [0.5, 0.2, 0.9]
    neg = [0.5, 0.1, 0.3, 0.2, 0.95, 0.0]  # M = 2: (0.5, 0.1) for positive 0, ...
    # Pinned by hand. shared: ranks 1 + #higher + 0.5 #ties over all six.
    shared = (1 / (1 + 1 + 0.5) + 1 / (1 + 3 + 0.5) + 1 / (1 + 1)) / 3
    per_pos = (1 / (1 + 0.5) + 1 / (1 + 1 + 0.5) + 1 / (1 + 1)) / 3
    assert link_mrr(pos, neg, "shared", 2) == pytest.approx(shared)
    assert link_mrr(pos, neg, "per-positive", 2) == pytest.approx(per_pos)

    rng = np.random.default_rng(0)
    for m in (1, 3):
        p = rng.integers(0, 5, size=17).astype(float)  # small integers: many ties
        q = rng.integers(0, 5, size=17 * m).astype(float)
        brute_shared = np.mean([1 / _brute_rank(p[i], list(q)) for i in range(17)])
        brute_per = np.mean([1 / _brute_rank(p[i], list(q[i * m:(i + 1) * m])) for i in range(17)])
        assert link_mrr(p, q, "shared", m) == pytest.approx(brute_shared, rel=1e-12)
        assert link_mrr(torch.tensor(p), torch.tensor(q), "per-positive", m) == pytest.approx(brute_per, rel=1e-12)
        monkeypatch.setattr(pairs_mod, "_MRR_CHUNK", 5)  # many chunks: the same number
        assert link_mrr(p, q, "shared", m) == pytest.approx(brute_shared, rel=1e-12)
        monkeypatch.undo()
    with pytest.raises(ValueError, match="protocol"):
        link_mrr(pos, neg, "filtered", 2)


# ------------------------------------------------------------- learning
def test_link_learns_on_cora(tmp_path: Path) -> None:
    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=tmp_path, offline=True)
    n = int(graphs.num_nodes[0])
    split = edge_split(graphs.edge_index[0], n, seed=0)
    path = prepare_pair_structure("cora", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    # dense_max_nodes=0: the sparse path, several times faster than dense at N = 2708 on a CPU.
    task = LinkTask(path, graphs.dataset[0].x, split, dataset="Cora", seed=0, dense_max_nodes=0)
    model_cfg = ModelConfig(in_dim=task.in_dim, out_dim=1, task="link", hidden=32, heads=2, layers=1,
                            dropout=0.0, head_powers=(1, 2))
    cfg = TrainConfig(epochs=15, lr=3e-3, warmup_epochs=1, patience=15, seed=0)
    summary = train_task(task, model_cfg, cfg, tmp_path / "run")

    rng = np.random.default_rng(0)
    p, m = split.val_pos.shape[1], split.num_neg_per_pos
    random_mrr = link_mrr(rng.random(p), rng.random(p * m), "shared", m)
    assert summary["metrics"]["val"] > 3 * random_mrr, (summary["metrics"], random_mrr)
    assert summary["split"] == {"name": "edge-85-5-10", "seed": 0, "train": split.train_pos.shape[1],
                                "val": p, "test": split.test_pos.shape[1]}
    d = task.describe()
    assert len(json.dumps(d)) < 2000  # identity only, not the edge arrays
    assert d["split"] == {"name": "edge-85-5-10", "seed": 0, "num_neg_per_pos": 1, "fractions": [0.85, 0.05, 0.1]}
    assert d["link"]["protocol"] == "shared" and d["link"]["path"] == "sparse"


def test_edge_regression_learns_a_known_signal(tmp_path: Path) -> None:
    n = 80
    rng = np.random.default_rng(5)
    ei = _random_graph(n, 0.08, seed=5)
    ei = ei[:, ei[0] < ei[1]]
    x = rng.normal(size=(n, 4)).astype(np.float32)
    w = np.array([1.0, -2.0, 0.5, 1.5])
    s = x @ w
    y = np.stack([s[ei[0]] + s[ei[1]], 3.0 * (s[ei[0]] + s[ei[1]]) + 10.0], axis=1)
    lines = ["src,dst,sum,scaled"] + [f"{u},{v},{a:.6f},{b:.6f}" for (u, v), (a, b) in zip(ei.T, y)]
    (tmp_path / "edges.csv").write_text("\n".join(lines) + "\n")
    np.save(tmp_path / "x.npy", x)
    data = load_edge_file(tmp_path / "edges.csv", tmp_path / "x.npy")

    rows = edge_regression_split(data.num_edges, seed=0)
    path = prepare_pair_structure("synthetic", train_edge_index(data, rows), data.num_nodes, POWERS_ONLY, tmp_path,
                                  level="edge")
    task = EdgeTask(path, torch.from_numpy(data.x), data, rows, dataset="synthetic", metric="mae")
    model_cfg = ModelConfig(in_dim=4, out_dim=2, task="edge", hidden=32, heads=2, layers=1, dropout=0.0,
                            head_powers=(1, 2))
    summary = train_task(task, model_cfg, TrainConfig(epochs=80, lr=1e-2, warmup_epochs=1, patience=80, seed=0),
                            tmp_path / "run")

    baseline = mae(np.broadcast_to(data.targets[rows.train].mean(0), (len(rows.test), 2)), data.targets[rows.test])
    assert summary["metrics"]["test"] < 0.4 * baseline, (summary["metrics"], baseline)
    d = task.describe()
    assert d["edge"]["sha256"] == data.sha256 and d["edge"]["features_file"] == str(tmp_path / "x.npy")
    assert d["split"]["name"] == "edge-rows-80-10-10" and d["split"]["seed"] == 0


# --------------------------------------------------------------- resume
class Killed(RuntimeError):
    pass


def test_link_resume_matches_uninterrupted(tmp_path: Path) -> None:
    n = 60
    split = edge_split(_random_graph(n, 0.1, seed=3), n, seed=1, num_neg_per_pos=2)
    path = prepare_pair_structure("toy", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    x = torch.from_numpy(np.random.default_rng(3).normal(size=(n, 6)).astype(np.float32))
    # batch_size: several re-encoding steps per epoch; dropout: the torch RNG state must be restored too.
    task = LinkTask(path, x, split, dataset="toy", protocol="per-positive", seed=4, batch_size=40)
    assert task.structure.dense
    model_cfg = ModelConfig(in_dim=6, out_dim=1, task="link", hidden=16, heads=2, layers=1, dropout=0.2,
                            head_powers=(1, 2))
    cfg = TrainConfig(epochs=6, lr=1e-2, warmup_epochs=2, patience=6, seed=3)
    a = train_task(task, model_cfg, cfg, tmp_path / "a")

    def kill_after_epoch_2(row: dict) -> None:
        if row["epoch"] == 2:
            raise Killed

    with pytest.raises(Killed):
        train_task(task, model_cfg, cfg, tmp_path / "b", log=kill_after_epoch_2)
    assert not (tmp_path / "b" / RunDir.SUMMARY).exists()
    torch.manual_seed(12345)  # whatever the process did meanwhile must not matter
    np.random.seed(54321)
    b = train_task(task, model_cfg, cfg, tmp_path / "b", resume=True)

    assert b == a
    run_a, run_b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    assert run_b.read_metrics() == run_a.read_metrics()
    for name in (RunDir.BEST, RunDir.LAST):
        sa, sb = run_a.load_checkpoint(name)["model"], run_b.load_checkpoint(name)["model"]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)

    # Another protocol is another task: resume refuses it.
    other = LinkTask(path, x, split, dataset="toy", protocol="shared", seed=4, batch_size=40)
    with pytest.raises(UsageError, match="cannot resume .* in link.protocol"):
        fit(other, XMaskNet(model_cfg), cfg, tmp_path / "b", model_config=asdict(model_cfg), resume=True)


def test_training_negatives_depend_on_seed_and_epoch_only(tmp_path: Path) -> None:
    n = 30
    split = edge_split(_random_graph(n, 0.2, seed=4), n, seed=0)
    path = prepare_pair_structure("toy", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    task = LinkTask(path, torch.randn(n, 3), split, dataset="toy", seed=7)
    (pos, neg), = list(task.train_batches(3))
    (pos2, neg2), = list(task.train_batches(3))
    assert torch.equal(neg, neg2) and torch.equal(pos, pos2)
    assert not torch.equal(neg, next(iter(task.train_batches(4)))[1])
    assert neg.shape == pos.shape and bool((neg[0] != neg[1]).all())
    train = {tuple(sorted(e)) for e in split.train_pos.T.tolist()}
    assert not any(tuple(sorted(e)) in train for e in neg.T.tolist())
    with pytest.raises(ValueError, match="fractions"):
        LinkTask(path, torch.randn(n, 3), split, dataset="toy", fractions=(0.8, 0.1, 0.1))
