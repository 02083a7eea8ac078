"""benchmarks/peers_ogb.py and peers_ogb_gin.py: OGB's GIN / GIN-virtual molhiv peers against the library's own
split, labels and evaluator, a numpy forward of the networks, and a killed run resumed to the same numbers."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.benchmarks import load_script

RAW = "ogbg_molhiv"


@pytest.fixture(scope="module")
def ogb():
    return load_script("peers_ogb")


@pytest.fixture(scope="module")
def gin():
    return load_script("peers_ogb_gin")


@pytest.fixture(scope="module")
def molhiv(ogb, shared_data, tmp_path_factory):
    """The harness's dataset and split, staged into one temporary cache for the module."""
    cache = tmp_path_factory.mktemp("cache")
    dataset, parts = ogb.load_molhiv(shared_data, cache)
    return dataset, parts, cache


def _csv_ints(path: Path) -> np.ndarray:
    with gzip.open(path, "rt") as f:
        return np.array([int(line) for line in f if line.strip()], dtype=np.int64)


def _pair_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC-AUC by counting (positive, negative) pairs, ties one half: no sklearn."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


# ------------------------------------------------------------------ data and metric
def test_split_and_labels_are_ogbs_own(ogb, molhiv, shared_data) -> None:
    from ogb.graphproppred import PygGraphPropPredDataset

    from xmask_cli.data.pyg import safe_torch_load

    dataset, parts, _ = molhiv
    raw = shared_data / RAW
    labels = _csv_ints(raw / "raw" / "graph-label.csv.gz")
    with safe_torch_load():  # torch's weights-only default needs PyG's classes allowed; xmask's loader does this
        lib = PygGraphPropPredDataset("ogbg-molhiv", root=str(Path(dataset.root).parent))
        idx = lib.get_idx_split()
    for part, key in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert np.array_equal(parts[part], idx[key].numpy())
        assert np.array_equal(parts[part], _csv_ints(raw / "split" / "scaffold" / f"{key}.csv.gz"))
    assert np.array_equal(lib.y.view(-1).numpy(), labels) and np.array_equal(ogb.graph_labels(dataset), labels)
    train, evals, _ = ogb.loaders(dataset, parts, 32, seed=0)
    assert np.array_equal(np.asarray(train.dataset.indices()), parts["train"])
    for part in ("val", "test"):  # the labels the evaluation passes read, in their order
        ys = torch.cat([b.y.view(-1) for b in evals[part]]).numpy()
        assert np.array_equal(ys, labels[parts[part]])
    assert len(parts["train"]) + len(parts["val"]) + len(parts["test"]) == len(labels) == 41127


def test_limit_keeps_both_classes_in_index_order(ogb, molhiv) -> None:
    dataset, parts, _ = molhiv
    labels = ogb.graph_labels(dataset)
    small = ogb.limit_parts(parts, labels, 100)
    for part, idx in small.items():
        assert len(idx) == 100 and np.all(np.diff(idx) > 0) and set(idx) <= set(parts[part])
        assert labels[idx].sum() == 10  # every part has at least 10 positives


def test_rocauc_is_ogbs_evaluator_and_a_pair_count(ogb) -> None:
    from ogb.graphproppred import Evaluator

    # by hand: 3 of the 4 (positive, negative) pairs ordered right
    assert ogb.rocauc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    rng = np.random.default_rng(0)
    s = np.round(rng.normal(size=400), 1)  # rounded: ties occur
    y = (rng.random(400) < 0.2).astype(np.int64)
    want = Evaluator("ogbg-molhiv").eval({"y_true": y.reshape(-1, 1), "y_pred": s.reshape(-1, 1)})["rocauc"]
    assert ogb.rocauc(s, y) == pytest.approx(want, abs=1e-12) == pytest.approx(_pair_auc(s, y), abs=1e-12)


def test_score_pairs_each_graph_with_its_label(ogb, gin, molhiv, shared_data) -> None:
    from torch_geometric.data import Batch

    dataset, parts, _ = molhiv
    labels = _csv_ints(shared_data / RAW / "raw" / "graph-label.csv.gz")
    small = ogb.limit_parts(parts, labels, 60)
    torch.manual_seed(0)
    model = gin.MolGIN(hidden=8, layers=2, virtual_node=True).eval()
    _, evals, _ = ogb.loaders(dataset, small, 32, seed=0)
    with torch.no_grad():  # one graph at a time, in the raw index order
        alone = np.array([float(gin.batch_logits(model, Batch.from_data_list([dataset[int(i)]])))
                          for i in small["val"]])
    assert ogb.score(model, evals["val"]) == pytest.approx(_pair_auc(alone, labels[small["val"]]), abs=1e-12)


# ------------------------------------------------------------------ the networks in numpy
def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _embed(enc, feats: np.ndarray) -> np.ndarray:
    tables = [_np(e.weight) for e in (enc.atom_embedding_list if hasattr(enc, "atom_embedding_list")
                                      else enc.bond_embedding_list)]
    return sum(t[feats[:, j]] for j, t in enumerate(tables))


def _bn(bn, z: np.ndarray, train: bool) -> np.ndarray:
    mean, var = (z.mean(0), z.var(0)) if train else (_np(bn.running_mean), _np(bn.running_var))
    return (z - mean) / np.sqrt(var + bn.eps) * _np(bn.weight) + _np(bn.bias)


def _mlp(seq, z: np.ndarray, train: bool) -> np.ndarray:
    for m in seq:
        if isinstance(m, torch.nn.Linear):
            z = z @ _np(m.weight).T + _np(m.bias)
        elif isinstance(m, torch.nn.BatchNorm1d):
            z = _bn(m, z, train)
        else:
            z = np.maximum(z, 0.0)
    return z


def _layer(conv, h: np.ndarray, ei: np.ndarray, ea: np.ndarray, train: bool) -> np.ndarray:
    msg = np.maximum(h[ei[0]] + _embed(conv.bond, ea), 0.0)
    agg = np.zeros_like(h)
    np.add.at(agg, ei[1], msg)
    return _mlp(conv.mlp, (1.0 + float(conv.eps)) * h + agg, train)


def _forward(model, x, ei, ea, batch, g: int) -> np.ndarray:
    """The whole network in eval mode, written from the recipe."""
    h = _embed(model.atom, x)
    vn = np.repeat(_np(model.vn_start), g, 0) if model.virtual_node else None
    last = len(model.convs) - 1
    for i in range(last + 1):
        if vn is not None:
            h = h + vn[batch]
        out = _bn(model.norms[i], _layer(model.convs[i], h, ei, ea, False), False)
        out = out if i == last else np.maximum(out, 0.0)
        if vn is not None and i < last:
            pooled = np.zeros((g, h.shape[1]))
            np.add.at(pooled, batch, h)
            vn = _mlp(model.vn_mlps[i], pooled + vn, False)
        h = out
    mean = np.zeros((g, h.shape[1]))
    np.add.at(mean, batch, h)
    mean /= np.bincount(batch, minlength=g)[:, None]
    return mean @ _np(model.head.weight).T + _np(model.head.bias)


def _tiny_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Three molecules of 4, 3 and 5 atoms, bonds both ways, features in every encoder's range."""
    sizes, edges, batch = (4, 3, 5), [], []
    start = 0
    for g, n in enumerate(sizes):
        for a in range(n - 1):
            edges += [(start + a, start + a + 1), (start + a + 1, start + a)]
        batch += [g] * n
        start += n
    edges.append((start - 1, start - 3))  # one directed extra bond: direction matters
    ei = np.array(edges).T
    return (rng.integers(0, 2, (start, 9)), ei, rng.integers(0, 2, (ei.shape[1], 3)), np.array(batch), len(sizes))


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Non-default values everywhere, running statistics too (a zero eps or unit variance would hide a slip)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)


def test_one_edge_gin_layer_matches_numpy_in_train_and_eval_mode(gin) -> None:
    x, ei, ea, _, _ = _tiny_batch(np.random.default_rng(1))
    conv = gin.EdgeGINLayer(4)
    _randomize(conv, 2)
    h = np.random.default_rng(3).normal(size=(x.shape[0], 4))
    args = (torch.tensor(h, dtype=torch.float32), torch.from_numpy(ei), torch.from_numpy(ea))
    for train in (True, False):
        conv.train(train)
        got = conv(*args).detach().numpy()
        np.testing.assert_allclose(got, _layer(conv, h, ei, ea, train), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("vn", [False, True])
def test_model_forward_matches_numpy(gin, vn: bool) -> None:
    x, ei, ea, batch, g = _tiny_batch(np.random.default_rng(4))
    model = gin.MolGIN(hidden=4, layers=3, dropout=0.5, virtual_node=vn).eval()
    _randomize(model, 5)
    got = model(*(torch.from_numpy(a) for a in (x, ei, ea, batch)), g).detach().numpy()
    assert got.shape == (g, 1)
    np.testing.assert_allclose(got, _forward(model, x, ei, ea, batch, g), rtol=1e-4, atol=1e-5)


def test_virtual_node_differs_from_plain_only_by_its_terms(gin) -> None:
    x, ei, ea, batch, g = _tiny_batch(np.random.default_rng(6))
    plain = gin.MolGIN(hidden=4, layers=3, virtual_node=False).eval()
    vn = gin.MolGIN(hidden=4, layers=3, virtual_node=True).eval()
    _randomize(plain, 7)
    _randomize(vn, 8)
    extra = set(vn.state_dict()) - set(plain.state_dict())
    assert set(plain.state_dict()) < set(vn.state_dict())
    assert extra and all(k.startswith(("vn_start", "vn_mlps.")) for k in extra)
    vn.load_state_dict(plain.state_dict(), strict=False)  # the shared weights made equal
    inputs = (*(torch.from_numpy(a) for a in (x, ei, ea, batch)), g)
    assert not torch.allclose(vn(*inputs), plain(*inputs))  # the virtual node's terms are live
    with torch.no_grad():  # silenced: a zero start and every update ending in relu(0)
        vn.vn_start.zero_()
        for mlp in vn.vn_mlps:
            mlp[-2].weight.zero_()
            mlp[-2].bias.zero_()
            mlp[-2].running_mean.zero_()
    torch.testing.assert_close(vn(*inputs), plain(*inputs), rtol=0, atol=0)


# ------------------------------------------------------------------ resume
class _Killed(Exception):
    pass


def test_resume_after_a_kill_gives_the_uninterrupted_numbers(ogb, molhiv, tmp_path: Path) -> None:
    dataset, parts, _ = molhiv
    small = ogb.limit_parts(parts, ogb.graph_labels(dataset), 200)
    args = ogb.parser().parse_args(["--hidden", "8", "--layers", "2", "--epochs", "3", "--limit", "200"])
    config = ogb.run_config("GIN-VN-ogb", 0, args)
    whole = ogb.train_seed(dataset, small, config, tmp_path / "a.pt", resume=False)

    def kill(epoch: int) -> None:
        if epoch == 1:
            raise _Killed

    with pytest.raises(_Killed):
        ogb.train_seed(dataset, small, config, tmp_path / "b.pt", resume=False, after_epoch=kill)
    torch.manual_seed(123)  # the resumed run must not depend on the state the process was left in
    np.random.seed(123)
    resumed = ogb.train_seed(dataset, small, config, tmp_path / "b.pt", resume=True)
    for key in ("metrics", "val_curve", "loss_curve", "best_epoch", "epochs_run"):
        assert resumed[key] == whole[key], key
    assert len(whole["val_curve"]) == 3 and 0.0 < whole["metrics"]["test"] < 1.0
    other = ogb.run_config("GIN-VN-ogb", 0, ogb.parser().parse_args(["--hidden", "16", "--limit", "200"]))
    ogb.save_checkpoint(tmp_path / "c.pt", *ogb.build("GIN-VN-ogb", config, dataset, small)[:2],
                        torch.Generator(), {"config": config, "epoch": 0})
    from xmask_cli.errors import UsageError

    with pytest.raises(UsageError, match="remove it or leave out --resume"):
        ogb.train_seed(dataset, small, other, tmp_path / "c.pt", resume=True)


def test_main_writes_each_seed_and_keeps_it_on_resume(ogb, molhiv, shared_data, tmp_path: Path, capsys) -> None:
    _, _, cache = molhiv
    argv = ["--models", "GIN-ogb", "--seeds", "0-1", "--hidden", "8", "--layers", "2", "--epochs", "1",
            "--limit", "100", "--data-root", str(shared_data), "--cache-dir", str(cache),
            "--out-dir", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck")]
    assert ogb.main(argv) == 0
    runs = [json.loads((tmp_path / "out" / f"GIN-ogb-seed{s}.json").read_text()) for s in (0, 1)]
    assert [r["seed"] for r in runs] == [0, 1] and runs[0]["metrics"] != runs[1]["metrics"]
    assert not list((tmp_path / "ck").glob("*.pt"))  # a finished seed leaves no checkpoint
    stamp = (tmp_path / "out" / "GIN-ogb-seed0.json").stat().st_mtime_ns
    assert ogb.main([*argv, "--resume"]) == 0
    assert (tmp_path / "out" / "GIN-ogb-seed0.json").stat().st_mtime_ns == stamp
    assert "GIN-ogb seed 0: kept" in capsys.readouterr().err
    assert ogb.main([*argv, "--data-root", str(tmp_path / "nowhere"), "--cache-dir", str(tmp_path / "c2")]) == 3
    assert capsys.readouterr().err.startswith("error: ogbg-molhiv: raw files not found")
