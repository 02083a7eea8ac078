"""explain.record: the maps are the forward's own terms, learned biases included."""
from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import torch

from tests.explain.runs import graph_batch, reload_model
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.explain import ExplainRequest, explain_run
from xmask_cli.explain.record import KINDS
from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.network import ModelConfig, XMaskNet


def test_maps_are_the_forward_terms(mutag):
    result = mutag["result"]
    maps = Path(result["files"]["maps"])
    model = reload_model(mutag)
    batch, cache, n = graph_batch(mutag, 0)
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


def test_a_reducing_recorder_sees_each_layers_terms_once_and_keeps_its_result(mutag):
    """``record_terms(reduce=f)`` (explain on large graphs): ``f`` gets each layer's very terms, in order, and
    its results replace them; the embeddings are the plain forward's."""
    from xmask_cli.explain.record import record_terms

    model = reload_model(mutag)
    batch, _, _ = graph_batch(mutag, 0)
    h_all, full = record_terms(model, DenseBatch(batch.x, batch.powers, batch.mask))
    seen = []

    def reduce(terms):
        seen.append({k: terms[k].clone() for k in KINDS})
        return len(seen)

    h, kept = record_terms(model, DenseBatch(batch.x, batch.powers, batch.mask), reduce=reduce)
    assert kept == list(range(1, model.cfg.layers + 1))
    torch.testing.assert_close(h, h_all, rtol=0, atol=0)
    for got, want in zip(seen, full):
        for k in KINDS:
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)


def test_learned_biases_are_labelled_and_recorded(tmp_path):
    """A run with SPD on head 2 and eigen on layer 2: labels name them, the structural map holds them."""
    from xmask_cli.cache import StructureCache
    from xmask_cli.engine.runs.folder import RunDir

    over = ["model.hidden=8", "model.layers=2", "model.heads=2", "train.epochs=1",
            "model.biases=[{type: spd, heads: [2]}, {type: eigen, layers: [2]}]"]
    train_seeds(resolve("graph-level", over), [0], device="cpu", cache_dir=tmp_path / "cache", run_root=tmp_path / "runs")
    run = tmp_path / "runs" / "mutag-graph" / "0"
    result = explain_run(run, ExplainRequest(graphs=[3]), out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
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
