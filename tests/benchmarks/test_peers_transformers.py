"""benchmarks/peers_transformers.py's published-recipe and graph-transformer peers: the Polynormer width
fix, xmask's selection rule and split, the input features, the random-walk encoding GPS reads, and tiny runs."""
from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
import torch

from tests.benchmarks import load_script
from xmask_cli.engine.scoring import splits


@pytest.fixture(scope="module")
def common():
    return load_script("peers_common")


@pytest.fixture(scope="module")
def tf():
    return load_script("peers_transformers")


@pytest.fixture(scope="module")
def peers():
    return load_script("peers")


@pytest.fixture(scope="module")
def cora(common, shared_data, tmp_path_factory):
    return common.load("Cora", shared_data, tmp_path_factory.mktemp("cache"))


def _tiny_graphs(n: int = 30, classes: int = 3, dim: int = 12, seed: int = 0,
                 name: str = "Tiny") -> types.SimpleNamespace:
    """A Planetoid-shaped graph (public masks) on ``n`` nodes: a ring plus chords, random features."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    src = torch.arange(n)
    ring = torch.stack([src, (src + 1) % n])
    chords = torch.stack([src, (src * 7 + 3) % n])
    ei = torch.unique(torch.cat([ring, chords, ring.flip(0), chords.flip(0)], dim=1), dim=1)  # a simple graph
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    for i in range(n):
        masks[i % 3][i] = True
    data = Data(x=torch.rand(n, dim, generator=g), edge_index=ei, y=torch.arange(n) % classes, num_nodes=n,
                train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])
    spec = types.SimpleNamespace(name=name, split="public", metric="accuracy")
    return types.SimpleNamespace(spec=spec, dataset=[data])


def _polynormer_args(heads: int) -> dict:
    return {"hidden": 8, "heads": heads, "local_layers": 2, "global_layers": 2, "in_dropout": 0.0,
            "dropout": 0.0, "global_dropout": 0.0, "beta": 0.9}


def test_polynormer_fix_is_pygs_model_with_one_head(tf):
    """heads=1: the subclass builds exactly PyG's model (same parameters from the same seed, same outputs in
    both phases)."""
    from torch_geometric.nn.models import Polynormer

    tiny = _tiny_graphs().dataset[0]
    batch = torch.zeros(tiny.num_nodes, dtype=torch.long)
    torch.manual_seed(3)
    ours = tf.polynormer_model(12, 3, **_polynormer_args(1)).eval()
    torch.manual_seed(3)
    a = _polynormer_args(1)
    theirs = Polynormer(12, a["hidden"], 3, local_layers=2, global_layers=2, in_dropout=0.0, dropout=0.0,
                        global_dropout=0.0, heads=1, beta=0.9).eval()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    for phase in (False, True):
        ours._global = theirs._global = phase
        torch.testing.assert_close(ours(tiny.x, tiny.edge_index, batch), theirs(tiny.x, tiny.edge_index, batch),
                                   rtol=0, atol=0)


def test_polynormer_fix_runs_with_many_heads_where_pyg_fails(tf):
    """heads=4: PyG's class breaks at its first global forward; the subclass's global layers take heads x hidden
    inputs, train, and change the output (the global phase is live)."""
    from torch_geometric.nn.models import Polynormer

    tiny = _tiny_graphs().dataset[0]
    batch = torch.zeros(tiny.num_nodes, dtype=torch.long)
    a = _polynormer_args(4)
    pyg = Polynormer(12, a["hidden"], 3, local_layers=2, global_layers=2, heads=4)
    pyg._global = True
    with pytest.raises(RuntimeError):
        pyg(tiny.x, tiny.edge_index, batch)
    torch.manual_seed(0)
    ours = tf.polynormer_model(12, 3, **a)
    assert all(layer.k.in_features == 4 * 8 and layer.k.out_features == 4 * 8 for layer in ours.global_attn)
    ours.eval()
    local = ours(tiny.x, tiny.edge_index, batch)
    ours._global = True
    glob = ours(tiny.x, tiny.edge_index, batch)
    assert glob.shape == (tiny.num_nodes, 3) and torch.isfinite(glob).all()
    assert not torch.allclose(local, glob)
    ours.train()
    opt = torch.optim.Adam(ours.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(ours(tiny.x, tiny.edge_index, batch), tiny.y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


def test_polynormer_phases_fit_the_budget(tf):
    assert tf.polynormer_phases(100, 1500, 200) == (100, 100)
    assert tf.polynormer_phases(200, 1000, 1000) == (200, 800)
    assert tf.polynormer_phases(200, 1000, 100) == (50, 50)
    assert tf.polynormer_phases(10, 20, 100) == (10, 20)


def _far(a: np.ndarray) -> np.ndarray:
    return np.full_like(np.asarray(a), 10**9)


@pytest.mark.parametrize("kind", ["GCN-example", "SGFormer"])
def test_node_peer_uses_xmasks_split_and_never_reads_test_when_asked(tf, cora, kind, monkeypatch):
    seen = []
    real = splits.node_split
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: seen.append((a[0], k.get("seed"))) or real(*a, **k))
    clean = tf.run_node_peer(cora, kind, 1, epochs=2, patience=5, parts=("train", "val"))
    assert seen == [("public", 1)]
    assert clean["split"] == {"name": "public", "seed": 1, "train": 140, "val": 500, "test": 1000}
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: dataclasses.replace(s := real(*a, **k),
                                                                                   test=_far(s.test)))
    poisoned = tf.run_node_peer(cora, kind, 1, epochs=2, patience=5, parts=("train", "val"))
    assert poisoned["metrics"] == clean["metrics"]
    with pytest.raises(IndexError):  # the poison is live: reading test raises
        tf.run_node_peer(cora, kind, 1, epochs=1, patience=1)


def test_transformer_peers_read_the_loaders_features(tf, cora, monkeypatch):
    """SGFormer and Polynormer get the loader's ``x`` unchanged (raw, as xmask); GCN-example's first layer its
    row-normalised form in evaluation (PyG's NormalizeFeatures, the example's recipe)."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.models import Polynormer, SGFormer

    seen: dict[str, list] = {"SGFormer": [], "Polynormer": [], "GCN": []}

    def spy(cls, name):
        real = cls.forward

        def forward(self, xx, *a, **k):
            seen[name].append((self.training, xx))
            return real(self, xx, *a, **k)

        monkeypatch.setattr(cls, "forward", forward)

    spy(SGFormer, "SGFormer")
    spy(Polynormer, "Polynormer")
    x = cora.dataset[0].x.float()
    tf.run_node_peer(cora, "SGFormer", 0, epochs=1, patience=1)
    assert seen["SGFormer"] and all(torch.equal(xx, x) for _, xx in seen["SGFormer"])
    tiny = _tiny_graphs()
    tf.run_node_peer(tiny, "Polynormer", 0, epochs=1, patience=1)
    assert seen["Polynormer"] and all(torch.equal(xx, tiny.dataset[0].x) for _, xx in seen["Polynormer"])
    spy(GCNConv, "GCN")
    tf.run_node_peer(cora, "GCN-example", 0, epochs=1, patience=1)
    first_layer_eval = [xx for training, xx in seen["GCN"] if not training and xx.size(1) == x.size(1)]
    assert first_layer_eval
    for xx in first_layer_eval:
        torch.testing.assert_close(xx, x / x.sum(1, keepdim=True).clamp(min=1))


@pytest.mark.parametrize("kind", ["GCN-example", "GAT-example", "SGFormer", "Polynormer", "GPS"])
def test_every_node_peer_finishes_a_tiny_run(tf, kind):
    res = tf.run_node_peer(_tiny_graphs(), kind, 0, epochs=4, patience=10)
    assert res["epochs_run"] == 4 and 0 <= res["best_epoch"] < 4
    assert all(0.0 <= res["metrics"][p] <= 1.0 for p in ("train", "val", "test"))
    assert res["params"] > 0 and res["seconds_per_epoch"] > 0
    assert (res["precompute_seconds"] is not None) == (kind == "GPS")


def test_polynormer_switches_to_global_attention_within_the_budget(tf):
    res = tf.run_node_peer(_tiny_graphs(), "Polynormer", 0, epochs=6, patience=10)
    assert res["hp"]["phases"] == [3, 3] and res["epochs_run"] == 6


def test_probe_times_epochs_without_scoring(tf):
    res = tf.run_node_peer(_tiny_graphs(), "Polynormer", 0, epochs=100, patience=10, probe_epochs=2)
    assert res["metrics"] is None and len(res["epoch_seconds"]) == 2 and res["seconds_per_epoch"] > 0


def test_random_walk_pe_is_the_return_probability(tf):
    """PE column k-1 is diag(P^k), P = D^-1 A (numpy, on the tiny graph)."""
    tiny = _tiny_graphs().dataset[0]
    pe, seconds = tf.random_walk_pe(tiny, 5)
    n = tiny.num_nodes
    a = np.zeros((n, n))
    np.add.at(a, (tiny.edge_index[0].numpy(), tiny.edge_index[1].numpy()), 1.0)
    p = a / a.sum(1, keepdims=True)
    expect, pk = [], np.eye(n)
    for _ in range(5):
        pk = pk @ p
        expect.append(np.diag(pk))
    np.testing.assert_allclose(pe.numpy(), np.stack(expect, 1), rtol=1e-5, atol=1e-6)
    assert seconds >= 0


def test_graph_gps_runs_on_xmasks_split(common, tf, tmp_path):
    graphs = common.load("MUTAG", tmp_path / "no-root", tmp_path / "cache")  # bundled
    data_list, seconds = tf.gps_graph_data(common.graph_data_list(graphs, "degree"))
    assert data_list[0].pe.shape == (data_list[0].num_nodes, 20) and seconds > 0
    res = tf.run_graph_gps(graphs, data_list, seed=2, epochs=1, patience=5, precompute_seconds=seconds)
    split = splits.graph_split("random-8-1-1", graphs.dataset, seed=2)
    assert res["split"] == {"name": "random-8-1-1", "seed": 2, "train": len(split.train), "val": len(split.val),
                            "test": len(split.test)}
    assert res["epochs_run"] == 1 and 0.0 <= res["metrics"]["test"] <= 1.0 and res["params"] > 0
    probe = tf.run_graph_gps(graphs, data_list, seed=2, epochs=1, patience=5, probe_batches=2)
    assert probe["metrics"] is None and probe["probe_batches"] == 2
    assert probe["seconds_per_epoch"] == pytest.approx(probe["seconds_per_batch"] * -(-len(split.train) // 32))


def test_help_lists_the_graph_transformer_peers(peers, capsys):
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for name in ("SGFormer", "Polynormer", "GPS", "GCN-example", "GAT-example"):
        assert name in out


def test_graph_gps_probe_times_whole_epochs_and_reports_each_batch(common, tf, tmp_path, capsys):
    """probe_epochs: every batch of every epoch runs (one progress line each, the last one at the epoch's
    batch count), nothing is scored, and the epoch times are measured, not extrapolated."""
    graphs = common.load("MUTAG", tmp_path / "no-root", tmp_path / "cache")  # bundled
    data_list, _ = tf.gps_graph_data(common.graph_data_list(graphs, "degree"))
    res = tf.run_graph_gps(graphs, data_list, seed=1, epochs=1, patience=5, batch_size=16, probe_epochs=2)
    batches = -(-len(splits.graph_split("random-8-1-1", graphs.dataset, seed=1).train) // 16)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("progress:")]
    assert len(lines) == 2 * batches
    assert lines[-1].startswith(f"progress: epoch 1 batch {batches}/{batches} ")
    assert res["metrics"] is None and len(res["epoch_seconds"]) == 2 and res["epochs_run"] == 2
    assert res["seconds_per_epoch"] == pytest.approx(float(np.median(res["epoch_seconds"])))


# ------------------------------------------------------------------ resuming a node peer
def _kill_in_training_epoch(run_node_peer, monkeypatch, epoch: int, setups: tuple[int, ...] = (1,)) -> None:
    """``run_node_peer`` raises KeyboardInterrupt (a session ending) in the training step of ``epoch`` (from 1)
    of the runs whose setup is the ``setups``-th (from 1) from now on."""
    real, count = run_node_peer.__globals__["_node_setup"], [0]

    def setup(*a, **k):
        peer = real(*a, **k)
        count[0] += 1
        if count[0] in setups:
            forward, steps = peer.forward, [0]

            def dies() -> torch.Tensor:
                if peer.model.training:
                    steps[0] += 1
                    if steps[0] == epoch:
                        raise KeyboardInterrupt
                return forward()

            peer.forward = dies
        return peer

    monkeypatch.setitem(run_node_peer.__globals__, "_node_setup", setup)


_SAME = ("metrics", "best_epoch", "epochs_run", "val_curve", "val_loss_curve", "split", "epochs", "patience")


@pytest.mark.parametrize("kind", ["GCN-tuned", "Polynormer"])
def test_a_node_peer_killed_mid_run_resumes_as_if_never_stopped(tf, kind, tmp_path, monkeypatch):
    """Killed in epoch 7 of 8 with a checkpoint every 3 epochs, the run goes on at epoch 6 and ends exactly as
    the uninterrupted run: dropout (GCN-tuned at 0.5) draws from the restored RNG states, and Polynormer,
    past its switch at epoch 4, is still global."""
    graphs = _tiny_graphs(name="Computers")
    hp = {"hidden": 8, "layers": 2, "dropout": 0.5, "lr": 1e-2, "weight_decay": 5e-5, "norm": "layer",
          "residual": False, "heads": 1}
    monkeypatch.setitem(tf.tuned_setup.__globals__["TUNED_HP"]["Computers"], "GCN-tuned", hp)
    whole = tf.run_node_peer(graphs, kind, 0, epochs=8, patience=100)
    assert whole["resumed_at"] is None and len(set(whole["val_loss_curve"])) > 1
    ckpt = tmp_path / "run.pt"
    with monkeypatch.context() as m:
        _kill_in_training_epoch(tf.run_node_peer, m, 7)
        with pytest.raises(KeyboardInterrupt):
            tf.run_node_peer(graphs, kind, 0, epochs=8, patience=100, checkpoint=ckpt, checkpoint_every=3)
    saved = torch.load(ckpt, weights_only=True)
    assert saved["epoch"] == 5 and len(saved["val_curve"]) == 6 and saved["seconds"] > 0
    resumed = tf.run_node_peer(graphs, kind, 0, epochs=8, patience=100, checkpoint=ckpt, checkpoint_every=3)
    assert not ckpt.exists()  # removed once the run is done
    assert resumed["resumed_at"] == 6 and resumed["seconds_before_resume"] == saved["seconds"]
    for key in _SAME:
        assert resumed[key] == whole[key], key
    assert len(resumed["epoch_seconds"]) == 8


def test_peers_resume_keeps_finished_node_runs_and_goes_on_with_a_killed_one(peers, shared_data, tmp_path,
                                                                              monkeypatch):
    def _node_sweep(peers, out, *extra: str) -> int:
        return peers.main(["--only", "node", "--node-datasets", "Cora", "--node-models", "GCN-example",
                           "--seeds", "0-1", "--epochs", "4", "--patience", "4", "--threads", "1",
                           "--data-root", str(shared_data), "--out", str(out),
                           "--checkpoint-dir", str(out.parent / "ckpt"), *extra])

    whole_out = tmp_path / "whole" / "peers.json"
    assert _node_sweep(peers, whole_out) == 0
    whole = {r["seed"]: r for r in json.loads(whole_out.read_text())["runs"]}
    out = tmp_path / "cut" / "peers.json"
    with monkeypatch.context() as m:
        _kill_in_training_epoch(peers.run_node_peer, m, 3, setups=(2,))  # seed 1 dies in its third epoch
        with pytest.raises(KeyboardInterrupt):
            _node_sweep(peers, out)
    assert [r["seed"] for r in json.loads(out.read_text())["runs"]] == [0]  # saved as it finished
    assert (out.parent / "ckpt" / "Cora-GCN-example-seed1-e4-p4.pt").is_file()

    real, trained = peers.run_node_peer, []
    monkeypatch.setattr(peers, "run_node_peer", lambda *a, **k: trained.append(a[2]) or real(*a, **k))
    assert _node_sweep(peers, out, "--resume") == 0
    got = {r["seed"]: r for r in json.loads(out.read_text())["runs"]}
    assert trained == [1] and got[1]["resumed_at"] == 2  # seed 0 kept, seed 1 from its checkpoint
    for s in (0, 1):
        for key in _SAME:
            assert got[s][key] == whole[s][key], (s, key)

    trained.clear()
    assert _node_sweep(peers, out, "--resume", "--patience", "3") == 0  # another budget: nothing is kept
    assert trained == [0, 1]

    with monkeypatch.context() as m:  # without --resume a killed run's checkpoint is not resumed from
        _kill_in_training_epoch(real, m, 3)
        with pytest.raises(KeyboardInterrupt):
            _node_sweep(peers, out)
    assert _node_sweep(peers, out) == 0
    assert [r["resumed_at"] for r in json.loads(out.read_text())["runs"]] == [None, None]


@pytest.mark.parametrize(("flags", "message"), [(["--checkpoint-every", "0"], "--checkpoint-every: expected a positive"),
                                                (["--resume"], "not a peers.py result")])
def test_peers_refuses_a_bad_checkpoint_interval_or_a_foreign_out_file(peers, tmp_path, capsys, flags, message):
    out = tmp_path / "peers.json"
    out.write_text('{"rows": []}')
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--only", "node", "--out", str(out), *flags])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
    assert out.read_text() == '{"rows": []}'  # never overwritten
