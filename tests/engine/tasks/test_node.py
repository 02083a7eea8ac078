"""Node-level training: subgraph slicing, partition batches, learning on Cora, resume."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from xmask_cli.cache import StructureCache
from xmask_cli.config import NodeSection
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import GraphSet, graphs_fingerprint, load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.loop import TrainConfig, fit, seed_everything
from xmask_cli.engine.runs import RunDir, without_timing
from xmask_cli.engine.splits import node_split, random_split
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.errors import ConfigError
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_dataset, prepare_graphs

NO_EXTRAS = ["structure.spd.enabled=false", "structure.spectrum.enabled=false"]
#: Few epochs: each full-graph (2708 nodes) step and evaluation costs about 0.5 s on one busy core,
#: and validation passes 0.55 by epoch 3.
CORA_EPOCHS = 12


class _OneGraph:
    """The slice of a PyG dataset NodeTask reads: ``_data``, ``[0]``, ``len``, ``num_classes``."""

    def __init__(self, data: Data, num_classes: int):
        self._data, self.num_classes = data, num_classes

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> Data:
        return self._data


class Toy:
    """A random graph with features and labels, prepared into a cache; dense ``Â^k`` computed here."""

    def __init__(self, root: Path, n: int, p: float, overrides: list[str], seed: int = 0):
        g = nx.gnp_random_graph(n, p, seed=seed)
        self.edges = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T
        self.adj = nx.to_numpy_array(g, nodelist=range(n))
        cfg = resolve("node-level", NO_EXTRAS + overrides).structure
        self.k = cfg.powers.k
        nodes = np.array([n])
        self.path = prepare_graphs(dataset_key="toy", level="node", edges=[self.edges], num_nodes=nodes,
                                   fingerprint=graphs_fingerprint([self.edges], nodes), cfg=cfg,
                                   cache_dir=root / "cache").path
        gen = torch.Generator().manual_seed(seed)
        data = Data(x=torch.randn(n, 8, generator=gen), y=torch.randint(0, 3, (n,), generator=gen))
        self.graphs = GraphSet(spec=SimpleNamespace(name="toy"), edge_index=[self.edges], num_nodes=nodes,
                               source=root, dataset=_OneGraph(data, 3))
        self.split = random_split(n, (0.6, 0.2, 0.2), seed=seed)

    def powers(self) -> np.ndarray:
        """``[K, n, n]`` ``Â^1..Â^K``, ``Â = D^-1/2 (A + I) D^-1/2``, in float64, by matrix power."""
        a = self.adj + np.eye(len(self.adj))
        d = a.sum(1) ** -0.5
        a = d[:, None] * a * d[None, :]
        return np.stack([np.linalg.matrix_power(a, p) for p in range(1, self.k + 1)])


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    # Below large.min_nodes: exact powers, no partitions.
    return Toy(tmp_path_factory.mktemp("node_small"), 90, 0.05, ["structure.partition.parts=0"])


@pytest.fixture(scope="module")
def parted(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    # A low large.min_nodes makes this graph "large" (truncated powers), as Physics is.
    return Toy(tmp_path_factory.mktemp("node_parted"), 160, 0.03,
               ["structure.partition.parts=4", "structure.large.min_nodes=50", "structure.large.topk=16"], seed=1)


def _model(task: NodeTask, **kw) -> XMaskNet:
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task=task.model_task,
                      **{"hidden": 16, "heads": 4, "layers": 2, "dropout": 0.0, **kw})
    return XMaskNet(cfg)


def test_subgraph_slices_global_powers(small: Toy) -> None:
    task = NodeTask(small.path, small.graphs, small.split,
                    node=NodeSection(mode="subgraph", subgraph_size=30, subgraphs_per_epoch=2))
    assert task.mode == "subgraph" and task.describe()["node"]["mode"] == "subgraph"
    dense = small.powers()
    for epoch, i in ((0, 0), (3, 1)):
        nodes = task.batcher.draw(epoch, i)
        assert len(nodes) == 30 and np.array_equal(nodes, np.unique(nodes))
        batch = task.batcher.batch(nodes)
        # The subgraph keeps the GLOBAL Â^k between its nodes (paths through outside nodes count).
        np.testing.assert_allclose(batch.powers[0].numpy(), dense[:, nodes][:, :, nodes], atol=1e-6)
        assert np.array_equal(batch.nodes[batch.targets].numpy(), nodes[task.train_mask[nodes]])
    # The draw is a function of (seed, epoch, i): reproducible, and different across epochs.
    assert np.array_equal(task.batcher.draw(3, 1), task.batcher.draw(3, 1))
    assert not np.array_equal(task.batcher.draw(3, 1), task.batcher.draw(4, 1))
    drawn = [b.nodes.numpy() for b in task.train_batches(3)]
    assert np.array_equal(drawn[1], task.batcher.draw(3, 1))


def test_full_mode_uses_cached_dense_powers(small: Toy) -> None:
    task = NodeTask(small.path, small.graphs, small.split)  # auto: 90 nodes <= dense_max_nodes
    assert task.mode == "full"
    (batch,) = list(task.train_batches(0))
    np.testing.assert_allclose(batch.powers[0].numpy(), small.powers(), atol=1e-6)
    assert np.array_equal(batch.targets.numpy(), np.sort(small.split.train))


def test_partition_batches_cover_nodes_and_pairs(parted: Toy) -> None:
    # partition: an option (auto: query)
    task = NodeTask(parted.path, parted.graphs, parted.split, node=NodeSection(mode="partition"))
    assert task.mode == "partition"
    cache = StructureCache(parted.path)
    part = cache.partition(0)
    row, col, vals = cache.powers(0)
    assert cache.file["graphs/large"][0]  # truncated powers, as on a real large graph
    seen = np.concatenate([b.nodes.numpy() for b in task.eval_batches])
    assert np.array_equal(np.sort(seen), np.arange(160))  # every node in exactly one batch
    for batch in task.eval_batches:
        nodes = batch.nodes.numpy()
        assert len(np.unique(part[nodes])) == 1
        inside = np.isin(row, nodes) & np.isin(col, nodes)
        expected = {(int(r), int(c)): v for r, c, v in zip(row[inside], col[inside], vals[inside])}
        ei = batch.edge_index.numpy()
        got = {(int(nodes[r]), int(nodes[c])): v for r, c, v in zip(ei[0], ei[1], batch.values.numpy())}
        assert got.keys() == expected.keys() and len(got) == ei.shape[1] > len(nodes)  # self pairs and more
        assert all(np.array_equal(got[key], expected[key]) for key in got)
    # Training batches: the same parts, in an order drawn from (seed, epoch).
    order = [b.nodes[0].item() for b in task.train_batches(5)]
    assert order == [b.nodes[0].item() for b in task.train_batches(5)]
    assert sorted(order) == sorted(b.nodes[0].item() for b in task.eval_batches if b.targets.numel())


def test_sparse_partition_forward_matches_dense(parted: Toy) -> None:
    task = NodeTask(parted.path, parted.graphs, parted.split, node=NodeSection(mode="partition"))
    torch.manual_seed(0)
    model = _model(task).eval()
    dense = StructureCache(parted.path).dense_powers(0)
    with torch.no_grad():
        for batch in task.eval_batches:
            nodes = batch.nodes.numpy()
            sparse = model.forward_sparse(task.x[batch.nodes], batch.edge_index, batch.values)
            block = torch.from_numpy(dense[:, nodes][:, :, nodes]).unsqueeze(0)
            full = model.forward_dense(task.x[batch.nodes].unsqueeze(0), block)[0]
            # Pairs outside the support weigh exactly 0 on both paths (outside_support 'hard').
            torch.testing.assert_close(sparse, full, atol=1e-5, rtol=1e-5)
    # Predictions are gathered for every node of the graph.
    assert task.predict(model).shape == (160, 3)


def test_grouped_parts(parted: Toy) -> None:
    task = NodeTask(parted.path, parted.graphs, parted.split, parts_per_batch=2, node=NodeSection(mode="partition"))
    assert len(task.eval_batches) == 2
    part = StructureCache(parted.path).partition(0)
    for epoch in (0, 1):
        batches = list(task.train_batches(epoch))
        assert sum(len(b.nodes) for b in batches) == 160
        assert all(len(np.unique(part[b.nodes.numpy()])) == 2 for b in batches)


def test_value_errors(small: Toy) -> None:
    with pytest.raises(ValueError, match="structure.partition.parts"):
        NodeTask(small.path, small.graphs, small.split, node=NodeSection(mode="partition"))
    with pytest.raises(ValueError, match="learned pair biases"):
        NodeTask(small.path, small.graphs, small.split, needs=["spd"], node=NodeSection(mode="query"))
    with pytest.raises(ValueError, match="mode"):
        NodeTask(small.path, small.graphs, small.split, node=NodeSection(mode="cluster"))
    with pytest.raises(ValueError, match="subgraph_size"):
        NodeTask(small.path, small.graphs, small.split, node=NodeSection(mode="subgraph"))


@pytest.mark.parametrize("key, value", [("mode", "cluster"), ("query_batch", -1), ("subgraphs_per_epoch", 0),
                                        ("memory_gb", 0.0), ("attention", "ring")])
def test_the_node_section_is_checked_by_its_own_rules(small: Toy, key: str, value: object) -> None:
    """A section built in Python is refused by the section's own rules, naming the key as a preset's or --set's
    value is (a bound in the same words; a choice, which resolve's reader refuses first, in its own)."""
    with pytest.raises(ConfigError) as from_task:
        NodeTask(small.path, small.graphs, small.split, node=NodeSection(**{key: value}))
    with pytest.raises(ConfigError) as from_resolve:
        resolve("node-level", [(f"node.{key}", value)])
    assert str(from_task.value).startswith(f"node.{key}: ") and str(from_resolve.value).startswith(f"node.{key}: ")
    if key not in ("mode", "attention"):
        assert str(from_task.value) == str(from_resolve.value)


def test_the_experiment_hands_its_node_section_to_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.data.test_folder import write_folder
    from xmask_cli.engine.experiment import Experiment

    write_folder(tmp_path / "g")
    monkeypatch.chdir(tmp_path)
    cfg = resolve("base", ["data.dataset=./g", "node.mode=subgraph", "node.subgraph_size=7",
                           "node.subgraphs_per_epoch=3", *NO_EXTRAS])
    task = Experiment.load(cfg, cache_dir=tmp_path / "cache").task(0, "cpu")
    assert task.node is cfg.node or task.node == cfg.node
    assert (task.mode, task.subgraph_size, task.subgraphs_per_epoch) == ("subgraph", 7, 3)
    assert len(list(task.train_batches(0))) <= 3 and all(len(b.nodes) == 7 for b in task.train_batches(0))


class Killed(RuntimeError):
    pass


def test_resume_matches_uninterrupted_subgraph(small: Toy, tmp_path: Path) -> None:
    def run(path: Path, **kw) -> dict:
        seed_everything(3)
        task = NodeTask(small.path, small.graphs, small.split, seed=3,
                        node=NodeSection(mode="subgraph", subgraph_size=40, subgraphs_per_epoch=2))
        model = _model(task, layers=1, dropout=0.2)  # dropout: the torch RNG state must be restored too
        cfg = TrainConfig(epochs=6, lr=1e-2, warmup_epochs=2, patience=6, seed=3)
        return fit(task, model, cfg, path, model_config=asdict(model.cfg), **kw)

    def kill_after_epoch_2(row: dict) -> None:
        if row["epoch"] == 2:
            raise Killed

    a = run(tmp_path / "a")
    with pytest.raises(Killed):
        run(tmp_path / "b", log=kill_after_epoch_2)
    torch.manual_seed(12345)  # whatever the process did meanwhile must not matter
    np.random.seed(54321)
    b = run(tmp_path / "b", resume=True)
    assert b == a
    assert without_timing(RunDir(tmp_path / "b").read_metrics()) == without_timing(RunDir(tmp_path / "a").read_metrics())
    node = RunDir(tmp_path / "a").load_config()["node"]
    assert node.pop("attention") in ("dense", "sparse")
    assert node == {"mode": "subgraph", "subgraph_size": 40, "subgraphs_per_epoch": 2, "dense_max_nodes": 5000}


def test_learns_cora(tmp_path_factory: pytest.TempPathFactory) -> None:
    cache_dir = tmp_path_factory.mktemp("cora_cache")
    summary = prepare_dataset(resolve("node-level", NO_EXTRAS + ["structure.partition.parts=0"]),
                              cache_dir=cache_dir, offline=True)
    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=cache_dir, offline=True)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    seed_everything(0)
    task = NodeTask(summary.path, graphs, split, node=NodeSection(mode="full"))
    model = _model(task, hidden=32, heads=2, layers=1, dropout=0.1)
    cfg = TrainConfig(epochs=CORA_EPOCHS, lr=1e-2, warmup_epochs=2, patience=CORA_EPOCHS, seed=0)
    result = fit(task, model, cfg, tmp_path_factory.mktemp("runs") / "cora", model_config=asdict(model.cfg))
    y = graphs.dataset[0].y.numpy()
    majority = float(np.bincount(y[split.val]).max() / len(split.val))
    # Cora's public validation majority rate is 0.316; 0.2 above it is 100 more of 500 nodes right.
    assert result["metrics"]["val"] >= majority + 0.2
    assert result["split"] == {"name": "public", "seed": None, "train": 140, "val": 500, "test": 1000}


def test_full_graph_sparse_attention_equals_dense(small: Toy) -> None:
    """The full-graph sparse batch attends over exactly the cached pairs and gives the dense numbers."""
    dense = NodeTask(small.path, small.graphs, small.split, node=NodeSection(mode="full", attention="dense"))
    sparse = NodeTask(small.path, small.graphs, small.split, node=NodeSection(mode="full", attention="sparse"))
    assert (dense.attention, sparse.attention) == ("dense", "sparse")
    torch.manual_seed(0)
    model = _model(dense).eval()
    # Sparse pairs = the support of the dense powers (any power non-zero).
    P = dense.whole_graph_batch().powers[0]
    support = (P != 0).any(0).nonzero().T
    ei = sparse.whole_graph_batch().edge_index
    assert torch.equal(torch.sort(ei[0] * P.size(-1) + ei[1]).values, torch.sort(support[0] * P.size(-1) + support[1]).values)
    # Pairs outside the support weigh exactly 0 on both paths (outside_support 'hard'): float rounding only.
    torch.testing.assert_close(sparse.predict(model), dense.predict(model), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("size", [2, 3])
def test_subgraph_shards_are_the_epochs_batches_dealt_by_rank(small: Toy, parted: Toy, size: int) -> None:
    """Under torchrun each rank slices only its own subgraphs; read step by step, rank by rank, the
    real ones are exactly the batches one process trains on (empty ones skipped the same way), every
    rank takes the same number of steps, and a padding step repeats the rank's first batch."""
    # 2-node draws: about 1 in 6 has no training node
    tasks = [NodeTask(small.path, small.graphs, small.split, seed=1,
                      node=NodeSection(mode="subgraph", subgraph_size=2, subgraphs_per_epoch=25)),
             NodeTask(parted.path, parted.graphs, parted.split, seed=1, node=NodeSection(mode="partition"))]
    for task in tasks:
        for epoch in (0, 1):
            one = [b.nodes.tolist() for b in task.train_batches(epoch)]
            if task.mode == "subgraph":
                assert 0 < len(one) < task.subgraphs_per_epoch  # some draws were skipped
            shards = [[(b.nodes.tolist(), real) for b, real in task.train_shard(epoch, r, size)] for r in range(size)]
            steps = -(-len(one) // size)
            assert all(len(s) == steps for s in shards)
            assert [ids for s in range(steps) for r in range(size) for ids, real in [shards[r][s]] if real] == one
            for r in range(size):
                assert all(ids == shards[r][0][0] for ids, real in shards[r] if not real)
