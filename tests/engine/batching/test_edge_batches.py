"""Edge attributes from the real loaders to the batches: what reaches a batch equals the loader's own
``edge_attr`` (TUDataset for MUTAG, PygGraphPropPredDataset for ogbg-molhiv) at each pair's position, and the
network's paths (padded, packed over dense powers, packed over log-powers, sparse over all pairs) agree with the
edge bias on, on batches of graphs of different sizes."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.model.biases.refs import all_pairs, randomize
from tests.model.biases.test_edge import reference_pair_attr
from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import GraphSet, graphs_fingerprint
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.batching.extras import GraphExtras, pad_extras, padded_edges, to_tensors
from xmask_cli.engine.batching.stream import GraphLevelStream, batch_extras
from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.biases.stack import BiasSpec
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_graphs
from xmask_cli.prepare.edge_section import edge_inputs


def _structure(edge: bool = True):
    st = resolve("graph-level", ["model.biases=[{type: edge}]"] if edge else []).structure
    return dataclasses.replace(st, spd=dataclasses.replace(st.spd, enabled=False),
                               powers=dataclasses.replace(st.powers, k=2))


def _prepare(graphs: GraphSet, tmp: Path, count: int | None = None) -> Path:
    cfg = _structure()
    edges = edge_inputs(graphs, cfg, required=True)
    assert edges is not None
    n = count or graphs.num_graphs
    if count is not None:  # the first graphs only, with their own attributes
        edges = type(edges)(edges.attrs[:n], graphs.edge_vocab())
    return Path(prepare_graphs(dataset_key=graphs.spec.key, level="graph", edges=graphs.edge_index[:n],
                               num_nodes=graphs.num_nodes[:n], fingerprint=graphs_fingerprint(graphs.edge_index[:n],
                                                                                              graphs.num_nodes[:n]),
                               cfg=cfg, cache_dir=tmp / "cache", edge_attr=edges).path)


def _check_against(loader_graphs, ids: np.ndarray, extras: dict[str, torch.Tensor]) -> int:
    """Every pair of every graph ``ids[b]`` of a padded batch against the loader's own graph; edges seen."""
    seen = 0
    n_max = extras["edge_mask"].size(1)
    for b, g in enumerate(ids.tolist()):
        data = loader_graphs[g]
        ei, attr = data.edge_index.tolist(), data.edge_attr.numpy()
        want = np.zeros((n_max, n_max, attr.shape[1]), dtype=np.float64)
        joined = np.zeros((n_max, n_max), dtype=bool)
        for i, j in {(s, d) for s, d in zip(*ei)} | {(d, s) for s, d in zip(*ei)}:
            a = reference_pair_attr(ei, attr, i, j)
            if a is not None:
                want[i, j], joined[i, j] = a, True
        np.testing.assert_array_equal(extras["edge_mask"][b].numpy(), joined, err_msg=f"graph {g}")
        np.testing.assert_array_equal(extras["edge_attr"][b].numpy().astype(np.float64), want, err_msg=f"graph {g}")
        seen += int(joined.sum())
    return seen


@pytest.fixture(scope="module")
def mutag(tmp_path_factory, shared_data) -> tuple[GraphSet, Path, object]:
    import torch_geometric.datasets as D

    tmp = tmp_path_factory.mktemp("mutag")
    graphs = load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=tmp / "stage", offline=True)
    # The reference: an independent TUDataset of the same raw files.
    shutil.copytree(shared_data / "MUTAG", tmp / "ref" / "MUTAG", ignore=shutil.ignore_patterns("processed"))
    return graphs, _prepare(graphs, tmp), D.TUDataset(str(tmp / "ref"), "MUTAG")


def test_mutag_batches_carry_the_tudataset_edge_attr(mutag):
    graphs, path, ref = mutag
    with StructureCache(path) as c:
        assert c.edge_coding() == ("linear", (4,))  # one-hot bond labels: floats
    features = [ref[g].x for g in range(len(ref))]
    stream = GraphLevelStream(path, features, torch.zeros(len(ref)), np.arange(len(ref)), batch_size=16,
                              needs={"edge"}, load_in_memory=True)
    total = 0
    for ids in stream.batches(0):
        batch = stream.collate(ids)
        assert batch.extras is not None
        total += _check_against(ref, ids, batch.extras)
    assert total == sum(int(ref[g].edge_index.size(1)) for g in range(len(ref)))  # MUTAG lists both directions


def test_molhiv_first_graphs_carry_the_ogb_edge_attr(tmp_path, shared_data):
    from ogb.utils.features import get_bond_feature_dims

    graphs = load_graphs(get_dataset("ogbg-molhiv"), data_root=shared_data, cache_dir=tmp_path / "stage", offline=True)
    path = _prepare(graphs, tmp_path, count=24)
    with StructureCache(path) as c:
        assert c.edge_coding() == ("index", tuple(get_bond_feature_dims()))  # OGB's bond vocabulary
        ids = np.arange(24)
        n_max = int(graphs.num_nodes[:24].max())
        extras = batch_extras(c, ids, {"edge"}, n_max)
    assert extras is not None
    seen = _check_against(graphs.dataset, ids, extras)  # the PygGraphPropPredDataset's own graphs
    assert seen == sum(int(graphs.dataset[g].edge_index.size(1)) for g in range(24))


def _net(layout: str, use_bias: bool = True) -> XMaskNet:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=7, out_dim=2, hidden=16, heads=4, layers=2, dropout=0.0, head_powers=(1, 2, 0, 2),
                      biases=(BiasSpec("edge", heads=(1, 3, 4)),), edge_encoding="linear", edge_dims=(4,),
                      graph_layout=layout, use_bias=use_bias, readout="mean")
    model = XMaskNet(cfg).eval()
    assert model.learned is not None
    randomize(model.learned, 5)
    return model


def test_graph_paths_agree_with_the_edge_bias(mutag):
    graphs, path, ref = mutag
    features = [ref[g].x for g in range(len(ref))]
    sizes = graphs.num_nodes
    ids = np.concatenate([np.argsort(sizes)[:3], np.argsort(sizes)[-3:], [40, 41]])  # 10 to 28 nodes
    assert sizes[ids].max() - sizes[ids].min() >= 15
    dense = GraphLevelStream(path, features, torch.zeros(len(ref)), ids, 8, needs={"edge"}).collate(ids)
    logs = GraphLevelStream(path, features, torch.zeros(len(ref)), ids, 8, needs={"edge"},
                            log_mask=(1e-30, "hard")).collate(ids)
    padded, packed = _net("padded"), _net("packed")
    with torch.no_grad():
        out = padded(dense.inputs())
        torch.testing.assert_close(packed(dense.inputs()), out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(packed(logs.inputs()), out, atol=1e-5, rtol=1e-5)
        plain = _net("padded")
        plain.learned = None
        # The edge term moves the output by far more than the tolerance the paths are held to.
        assert float((plain(dense.inputs()) - out).abs().max()) > 100 * 1e-5


def test_dense_equals_sparse_all_pairs_with_the_edge_bias(mutag):
    graphs, path, ref = mutag
    ids = np.array([0, 5, 17])
    model = _net("padded", use_bias=False)
    with StructureCache(path) as c:
        batch = GraphLevelStream(path, [ref[g].x for g in range(len(ref))], torch.zeros(len(ref)), ids, 8,
                                 needs={"edge"}).collate(ids)
        rows, cols, parts, offset = [], [], [], 0
        for g in ids.tolist():
            r, c_ = all_pairs(int(graphs.num_nodes[g]))
            parts.append(GraphExtras(c, g, {"edge"}).pairs(r, c_))
            rows.append(r + offset)
            cols.append(c_ + offset)
            offset += int(graphs.num_nodes[g])
    sx = to_tensors({k: np.concatenate([p[k] for p in parts]) for k in ("edge_attr", "edge_mask")})
    ei = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
    mask = batch.mask
    node_graph = torch.repeat_interleave(torch.arange(len(ids)), mask.sum(1))
    with torch.no_grad():
        dense = model(DenseBatch(x=batch.x, powers=None, mask=mask, extras=batch.extras))
        got = model.forward_sparse(batch.x[mask], ei, None, node_graph, extras=sx)
    torch.testing.assert_close(got, dense, atol=1e-5, rtol=1e-5)


def test_batch_gather_equals_per_graph_extras(mutag):
    """A cache in memory gathers a batch's edge attributes at once (``padded_edges``); read from the file, each
    graph's ``GraphExtras`` pads them: the same arrays, on a batch of graphs from 10 to 28 nodes."""
    graphs, path, _ = mutag
    ids = np.concatenate([np.argsort(graphs.num_nodes)[:4], np.argsort(graphs.num_nodes)[-4:], [7, 100, 187]])
    n_max = int(graphs.num_nodes[ids].max())
    with StructureCache(path) as c:
        per_graph = pad_extras([GraphExtras(c, int(g), {"edge"}).dense() for g in ids], n_max)
        c.load_in_memory()
        gathered = padded_edges(c, ids, n_max)
        via_batch = batch_extras(c, ids, {"edge"}, n_max)
    assert via_batch is not None and per_graph["edge_mask"].sum() > 100
    for k in ("edge_attr", "edge_mask"):
        assert gathered[k].dtype == per_graph[k].dtype
        np.testing.assert_array_equal(gathered[k], per_graph[k])
        np.testing.assert_array_equal(via_batch[k].numpy(), per_graph[k])


def test_training_gradients_agree_between_padded_and_packed(mutag):
    """In training (the edge term's gradient through attention's mask), the packed and padded layouts give the same
    gradient for every parameter, the edge tables included."""
    graphs, path, ref = mutag
    features = [ref[g].x for g in range(len(ref))]
    ids = np.concatenate([np.argsort(graphs.num_nodes)[:3], np.argsort(graphs.num_nodes)[-3:], [40, 41]])
    batch = GraphLevelStream(path, features, torch.zeros(len(ref)), ids, 8, needs={"edge"},
                             log_mask=(1e-30, "hard")).collate(ids)
    dense = GraphLevelStream(path, features, torch.zeros(len(ref)), ids, 8, needs={"edge"}).collate(ids)
    grads = []
    for model, b in ((_net("packed"), batch), (_net("padded"), dense)):
        model.train()
        out = model(b.inputs())
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads.append({k: p.grad for k, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any(k.startswith("learned.") for k in grads[0])
    for k in grads[1]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-5, rtol=1e-4, msg=k)
    assert all(float(g.abs().max()) > 1e-4 for k, g in grads[1].items() if k.startswith("learned."))
