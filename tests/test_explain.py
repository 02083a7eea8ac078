"""The library side of ``xmask explain``: maps are the forward's own terms, files, hop summary, errors."""
from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from xmask_cli.config import resolve
from xmask_cli.engine.experiment import train_seeds
from xmask_cli.errors import UsageError
from xmask_cli.explain import KINDS, _hop_mass, _Recorded, _numpy, explain_run, plot_target, record_terms
from xmask_cli.model.network import ModelConfig, XMaskNet
from tests.model.graphs import adjacency, norm_powers


@pytest.fixture(scope="module")
def mutag(tmp_path_factory) -> dict:
    """A tiny trained graph-level run on the bundled MUTAG, explained on graphs 0 and 5."""
    root = tmp_path_factory.mktemp("explain")
    cfg = resolve("graph-level", ["model.hidden=16", "model.layers=2", "model.heads=2", "train.epochs=2"])
    train_seeds(cfg, [0], device="cpu", cache_dir=root / "cache", run_root=root / "runs")
    run = root / "runs" / "mutag-graph" / "0"
    result = explain_run(run, graphs=[0, 5], out_dir=root / "out", cache_dir=root / "cache")
    return {"root": root, "run": run, "result": result}


def _reload(mutag: dict):
    from xmask_cli.engine.runs import RunDir

    run = RunDir(mutag["run"])
    model = XMaskNet(ModelConfig(**run.load_config()["model"]))
    model.load_state_dict(run.load_checkpoint(RunDir.BEST)["model"])
    return model.eval()


def _graph_batch(mutag: dict, g: int):
    from xmask_cli.cache import StructureCache
    from xmask_cli.engine.stream import collate

    path = next((mutag["root"] / "cache").rglob("*.h5"))
    cache = StructureCache(path)
    n = cache.num_nodes(g)
    from xmask_cli.engine.experiment import Experiment
    from xmask_cli.engine.features import node_features

    exp = Experiment.load(resolve("graph-level", ["model.hidden=16", "model.layers=2", "model.heads=2"]),
                          cache_dir=mutag["root"] / "cache")
    x = node_features(exp.graphs)[g]
    return collate(cache, [g], [x], [torch.tensor(0)]), cache, n


def test_maps_are_the_forward_terms(mutag):
    result = mutag["result"]
    maps = Path(result["files"]["maps"])
    model = _reload(mutag)
    batch, cache, n = _graph_batch(mutag, 0)
    with torch.no_grad():
        h_plain = model.encode_dense(batch.x, batch.powers, batch.mask)
        h, layers = model.encode_dense(batch.x, batch.powers, batch.mask, return_terms=True)
    # The recording forward is the model's forward.
    torch.testing.assert_close(h, h_plain, rtol=0, atol=0)
    powers = cache.dense_powers(0).astype(np.float64)
    d_h = model.cfg.hidden // model.cfg.heads
    with h5py.File(maps) as f:
        ids = f["graph_0/node_ids"][()]
        assert list(ids) == list(range(n)) and f["graph_0"].attrs["cropped_from"] == n
        for l, terms in enumerate(layers):
            a = terms["attention"][0].double()
            # Feeding the recorded attention into the value aggregation gives SDPA's output of the forward.
            torch.testing.assert_close(a @ terms["value"][0].double(), terms["aggregate"][0].double(),
                                       rtol=1e-4, atol=1e-5)
            for hd in range(model.cfg.heads):
                grp = f[f"graph_0/layer_{l}/head_{hd}"]
                rec = {k: grp[k][()].astype(np.float64) for k in KINDS}
                k = model.cfg.head_powers[hd]
                assert grp["energy"].attrs["k"] == k and grp["energy"].attrs["bias"] == f"Â^{k}"
                # Same numbers as the forward's terms.
                np.testing.assert_allclose(rec["attention"], a[hd].numpy(), rtol=1e-5, atol=1e-7)
                # logits = energy + structural; softmax of the logits = attention.
                np.testing.assert_allclose(rec["logits"], rec["energy"] + rec["structural"], rtol=1e-6, atol=1e-5)
                z = rec["logits"] - rec["logits"].max(1, keepdims=True)
                soft = np.exp(z) / np.exp(z).sum(1, keepdims=True)
                np.testing.assert_allclose(soft, rec["attention"], rtol=1e-4, atol=1e-6)
                # Structural term: log(Â^k + eps) / sqrt(d_h) (mask_scale 'paper'), from the cache;
                # -inf outside the head's support (outside_support 'hard').
                expect = np.log(powers[k - 1] + model.cfg.eps) / math.sqrt(d_h)
                expect = np.where(powers[k - 1] > 0, expect, -np.inf)
                assert np.isinf(expect).any()
                np.testing.assert_allclose(rec["structural"], expect, rtol=1e-5, atol=1e-4)
        # Layer 0 energy independently: the encoder's output through the first block's q/k projections.
        with torch.no_grad():
            h0 = model.encoder(batch.x)[0]
            att = model.blocks[0].attn
            q = att.q(h0).view(n, model.cfg.heads, d_h).transpose(0, 1)
            kk = att.k(h0).view(n, model.cfg.heads, d_h).transpose(0, 1)
            energy = (q @ kk.transpose(-1, -2) / math.sqrt(d_h)).numpy()
        for hd in range(model.cfg.heads):
            np.testing.assert_allclose(f[f"graph_0/layer_0/head_{hd}/energy"][()], energy[hd], rtol=1e-4, atol=1e-5)


def test_png_grid(mutag):
    import matplotlib.image as mpimg

    result = mutag["result"]
    for name in ("graph_0", "graph_5"):
        img = mpimg.imread(result["files"]["figures"][name])
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    model = _reload(mutag)
    batch, _, n = _graph_batch(mutag, 0)
    _, layers = record_terms(model, batch.x, powers=batch.powers, mask=batch.mask)
    from xmask_cli.explain import TargetMaps

    rec = _Recorded(n=n, layers=[_numpy(t, 0) for t in layers])
    t = TargetMaps("graph_0", "graph", {"graph": 0}, np.arange(n), n, rec.crop(np.arange(n)))
    fig, axes = plot_target(t, model.cfg)
    assert axes.shape == (2 * len(KINDS), 2)
    assert "head 1 · Â^2" in axes[0, 1].get_title() and "graph 0" in fig._suptitle.get_text()


def test_hop_summary_sums_to_one(mutag):
    result = mutag["result"]
    assert [t["name"] for t in result["targets"]] == ["graph_0", "graph_5"]
    buckets = result["hop_buckets"]
    assert buckets[-1] == "unreachable" and buckets[0] == "0"
    for layer in ("layer_0", "layer_1"):
        for hd, k in (("head_0", 1), ("head_1", 2)):
            entry = result["hop_summary"][layer][hd]
            assert entry["k"] == k and list(entry["mass"]) == buckets
            assert sum(entry["mass"].values()) == pytest.approx(1.0, abs=1e-9)


def test_hop_summary_respects_head_power_on_a_path():
    n = 8
    a = adjacency(n, [(i, i + 1) for i in range(n - 1)])
    powers = torch.from_numpy(norm_powers(a, 2)).float().unsqueeze(0)
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=2, mask_scale="none", eps=1e-30, dropout=0.0)
    model = XMaskNet(cfg).eval()
    x = torch.randn(1, n, 3)
    _, layers = record_terms(model, x, powers=powers, mask=torch.ones(1, n, dtype=torch.bool))
    rec = _Recorded(n=n, layers=[_numpy(t, 0) for t in layers])
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])  # path graph hop distances
    masses = _hop_mass(rec, np.arange(n), dist, 8)
    for mass in masses:
        p = mass / mass.sum(1, keepdims=True)
        assert p[0, 2:].sum() < 1e-6  # head 0 reads Â^1: nothing beyond 1 hop
        assert p[1, 3:].sum() < 1e-6  # head 1 reads Â^2: nothing beyond 2 hops
        # Independently: per head, the attention mass at distance d, averaged over rows.
        for h in range(2):
            att = layers[0]["attention"][0, h].numpy() if mass is masses[0] else layers[1]["attention"][0, h].numpy()
            for d in range(3):
                assert p[h, d] == pytest.approx(att[dist == d].sum() / n, abs=1e-6)


def test_usage_errors(mutag):
    root = mutag["root"]
    with pytest.raises(UsageError, match="out of range"):
        explain_run(mutag["run"], graphs=[10_000], out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="graph-level"):
        explain_run(mutag["run"], nodes=[0], out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="nothing to explain"):
        explain_run(mutag["run"], out_dir=root / "bad", cache_dir=root / "cache")
    # An expert (M3Dphormer) run has no single attention per head to record: refused before loading anything.
    import json
    import shutil

    expert_run = root / "expert-run" / "0"
    shutil.copytree(mutag["run"], expert_run)
    saved = json.loads((expert_run / "config.json").read_text())
    saved["level"], saved["model"]["experts"] = "node", ["local", "global"]
    (expert_run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="M3Dphormer"):
        explain_run(expert_run, nodes=[0], out_dir=root / "bad", cache_dir=root / "cache")


def test_large_graph_target_is_cropped(mutag):
    root = mutag["root"]
    result = explain_run(mutag["run"], graphs=[0], out_dir=root / "small", cache_dir=root / "cache", max_nodes=5)
    t = result["targets"][0]
    assert t["cropped"] and t["num_nodes"] == 5 and t["node_ids"][0] == 0 and t["cropped_from"] > 5
    with h5py.File(result["files"]["maps"]) as f:
        assert f["graph_0/layer_1/head_1/attention"].shape == (5, 5)
        assert f["graph_0/layer_1/head_1/attention"].attrs["cropped_from"] == t["cropped_from"]
        with h5py.File(mutag["result"]["files"]["maps"]) as g:
            full = g["graph_0/layer_1/head_1/attention"][()]
        ids = np.array(t["node_ids"])
        np.testing.assert_array_equal(f["graph_0/layer_1/head_1/attention"][()], full[np.ix_(ids, ids)])


def test_node_target_on_cora_is_cropped(tmp_path):
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    cfg = resolve("cora", ["model.hidden=8", "model.heads=2", "structure.powers.k=2", "structure.spd.enabled=true",
                           "train.epochs=1", "structure.spectrum.enabled=false", "structure.partition.parts=0"])
    train_seeds(cfg, [0], device="cpu", cache_dir=tmp_path / "cache", run_root=tmp_path / "runs")
    run = tmp_path / "runs" / "cora-node" / "0"
    result = explain_run(run, nodes=[0], edges=["3,9"], out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                         max_nodes=32)
    node, edge = result["targets"]
    assert node["cropped"] and node["cropped_from"] == 2708 and len(node["node_ids"]) == 32
    assert node["node_ids"][0] == 0 and edge["cropped_from"] == 2708 and {3, 9} <= set(edge["node_ids"])
    # Independent BFS on Cora's edges: the crop is closest first.
    from xmask_cli.engine.experiment import Experiment

    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache")
    ei = exp.graphs.dataset[0].edge_index.numpy()
    adj = csr_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(2708, 2708))
    d = shortest_path(adj, unweighted=True, directed=False, indices=[0])[0]
    got = d[node["node_ids"]]
    assert np.all(np.diff(got) >= 0) and set(np.flatnonzero(d <= 1)) <= set(node["node_ids"])
    with h5py.File(result["files"]["maps"]) as f:
        assert f["node_0"].attrs["cropped_from"] == 2708 and f["node_0/node_ids"].shape == (32,)
        att = f["node_0/layer_0/head_0/attention"][()]
        assert att.shape == (32, 32) and np.all(att.sum(1) <= 1 + 1e-5)
        assert "cropped to 32 of 2708" in f["node_0"].attrs["target"]
    for layer in result["hop_summary"].values():
        for head in layer.values():
            assert sum(head["mass"].values()) == pytest.approx(1.0, abs=1e-9)
    assert Path(result["files"]["figures"]["node_0"]).is_file()


def test_cli_explain_json_and_errors(mutag, tmp_path):
    import json

    from typer.testing import CliRunner

    from xmask_cli.cli import app

    runner = CliRunner()
    common = ["--cache-dir", str(mutag["root"] / "cache"), "--device", "cpu"]
    r = runner.invoke(app, ["--format", "json", "explain", str(mutag["run"]), "--graph", "5", "--out",
                            str(tmp_path / "maps"), *common])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [t["name"] for t in out["targets"]] == ["graph_5"]
    assert (tmp_path / "maps" / "maps.h5").is_file() and (tmp_path / "maps" / "graph_5.png").is_file()
    # The same numbers as the library call on the same run.
    assert out["targets"][0]["hop_summary"] == next(t for t in mutag["result"]["targets"]
                                                    if t["name"] == "graph_5")["hop_summary"]
    r = runner.invoke(app, ["explain", str(mutag["run"]), "--node", "3", *common])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["explain", str(tmp_path / "nope"), "--graph", "0", *common])
    assert r.exit_code == 6
    assert "Examples" in runner.invoke(app, ["explain", "--help"]).stdout


def test_learned_biases_are_labelled_and_recorded(tmp_path):
    """A run with SPD on head 2 and eigen on layer 2: labels name them, the structural map holds them."""
    from xmask_cli.cache import StructureCache
    from xmask_cli.engine.runs import RunDir

    over = ["model.hidden=8", "model.layers=2", "model.heads=2", "train.epochs=1",
            "model.biases=[{type: spd, heads: [2]}, {type: eigen, layers: [2]}]"]
    train_seeds(resolve("graph-level", over), [0], device="cpu", cache_dir=tmp_path / "cache", run_root=tmp_path / "runs")
    run = tmp_path / "runs" / "mutag-graph" / "0"
    result = explain_run(run, graphs=[3], out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    assert result["head_biases"] == [["Â^1", "Â^2 + SPD"], ["Â^1 + Eigen", "Â^2 + SPD + Eigen"]]
    assert result["hop_summary"]["layer_1"]["head_1"]["bias"] == "Â^2 + SPD + Eigen"

    saved = RunDir(run)
    model = XMaskNet(ModelConfig(**saved.load_config()["model"]))
    model.load_state_dict(saved.load_checkpoint(RunDir.BEST)["model"])
    cache = StructureCache(next((tmp_path / "cache").rglob("*.h5")))
    n = cache.num_nodes(3)
    spd = cache.dense_spd(3)
    powers = cache.dense_powers(3)
    vals, vecs = cache.spectrum(3)
    pinv = sum(np.outer(vecs[:, k], vecs[:, k]) / vals[k] for k in range(len(vals)) if vals[k] > 1e-6)
    layer0_spd = model.learned.layers[0][0]
    layer1_spd, layer1_eig = model.learned.layers[1]
    table0 = layer0_spd.table.weight.detach().double().numpy()[:, 0]
    table1 = layer1_spd.table.weight.detach().double().numpy()[:, 0]
    beta = layer1_eig.beta.detach().double().numpy()
    assert np.abs(table0).max() > 0 and np.abs(beta).min() > 0  # trained away from the zero start
    buckets = layer0_spd.buckets(torch.from_numpy(spd)).numpy()
    scale = math.sqrt(model.cfg.hidden // model.cfg.heads)
    with h5py.File(result["files"]["maps"]) as f:
        g = f["graph_3"]
        assert g["layer_1/head_1/energy"].attrs["bias"] == "Â^2 + SPD + Eigen"
        log = np.log(powers.astype(np.float64) + 1e-30)
        log = np.where(powers > 0, log, -np.inf)  # outside each head's support (outside_support 'hard')
        # mask_scale 'paper' divides the log mask by sqrt(d_h); learned biases enter unscaled (GTLM Eq. 1).
        log = log / scale
        want = {(0, 0): log[0], (0, 1): log[1] + table0[buckets],
                (1, 0): log[0] + beta[0] * pinv, (1, 1): log[1] + table1[buckets] + beta[1] * pinv}
        for (l, h), term in want.items():
            got = g[f"layer_{l}/head_{h}/structural"][()]
            np.testing.assert_allclose(got, term[:n, :n], rtol=1e-4, atol=1e-4)


def test_matplotlib_is_a_runtime_dependency():
    """Issue 14, item 14: `explain` draws PNGs, so `pip install .` (no extras) must bring matplotlib.

    .ci/run checks the installed metadata after a plain install; this checks the declaration."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    names = [d.split(";")[0].replace(" ", "").lower() for d in project["dependencies"]]
    assert any(n.startswith("matplotlib") for n in names), names
