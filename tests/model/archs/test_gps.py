"""``model.arch: gps`` on the real loaders: the edges (and bond features) its local sub-layer reads are the
loader's own ``edge_index`` / ``edge_attr`` (TUDataset for MUTAG, PygGraphPropPredDataset for ogbg-molhiv), on
the padded and the packed rows; a dataset without edge attributes stores a one-value placeholder and takes
GINConv."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import GraphSet, graphs_fingerprint
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.batching.stream import GraphLevelStream
from xmask_cli.model.archs import get_arch
from xmask_cli.model.gps import EdgeEncoder, LocalEdges
from xmask_cli.model.packing import pack_graphs
from xmask_cli.prepare import prepare_graphs
from xmask_cli.prepare.edge_section import edge_inputs
from xmask_cli.prepare.needs import edge_readers, model_needs


def _prepare(graphs: GraphSet, tmp: Path, count: int) -> Path:
    """The first ``count`` graphs' cache as ``model.arch: gps`` prepares it (powers and the edge section)."""
    cfg = resolve("graph-level", ["model.arch=gps"])
    assert model_needs(cfg) == {"edge"} and edge_readers(cfg) == {"required": False, "placeholder": True}
    st = dataclasses.replace(cfg.structure, spd=dataclasses.replace(cfg.structure.spd, enabled=False),
                             powers=dataclasses.replace(cfg.structure.powers, k=2))
    edges = edge_inputs(graphs, st, **edge_readers(cfg))
    assert edges is not None
    edges = type(edges)(edges.attrs[:count], graphs.edge_vocab())
    return Path(prepare_graphs(dataset_key=graphs.spec.key, level="graph", edges=graphs.edge_index[:count],
                               num_nodes=graphs.num_nodes[:count],
                               fingerprint=graphs_fingerprint(graphs.edge_index[:count], graphs.num_nodes[:count]),
                               cfg=st, cache_dir=tmp / "cache", edge_attr=edges).path)


def _edge_table(edges: LocalEdges, rows: np.ndarray, graph_of: np.ndarray,
                local: np.ndarray) -> dict[tuple[int, int, int], tuple]:
    """``(graph, source, target) -> attributes`` of the local sub-layer's edges (rows mapped back to graphs)."""
    src, dst = edges.index.numpy()
    attr = edges.attr.numpy()
    out = {}
    for s, d, a in zip(src, dst, attr):
        assert graph_of[s] == graph_of[d]  # no message crosses graphs
        out[(int(graph_of[s]), int(local[s]), int(local[d]))] = tuple(a.tolist())
    return out


def _loader_table(dataset, ids: list[int]) -> dict[tuple[int, int, int], tuple]:
    out = {}
    for b, g in enumerate(ids):
        data = dataset[g]
        for (s, d), a in zip(data.edge_index.t().tolist(), data.edge_attr.tolist()):
            out[(b, s, d)] = tuple(a)
    return out


def _check(path: Path, features: list[torch.Tensor], dataset, ids: list[int]) -> LocalEdges:
    """The gps block inputs of one batch of ``ids``, padded and packed, against the loader's graphs."""
    stream = GraphLevelStream(path, features, torch.zeros(len(features)), np.array(ids), batch_size=len(ids),
                              needs={"edge"}, load_in_memory=True)
    batch = stream.collate(np.array(ids))
    mask = batch.mask
    width = mask.size(1)
    want = _loader_table(dataset, ids)
    flat = np.arange(mask.numel())
    padded = get_arch("gps").block_inputs(batch.extras)["edges"]
    assert _edge_table(padded, flat, flat // width, flat % width) == want
    packing = pack_graphs(mask)
    packed = get_arch("gps").block_inputs(batch.extras, packing)["edges"]
    rows = packing.rows.numpy()
    assert _edge_table(packed, rows, rows // width, rows % width) == want
    return padded


@pytest.fixture(scope="module")
def mutag(tmp_path_factory, shared_data):
    import torch_geometric.datasets as D

    tmp = tmp_path_factory.mktemp("mutag")
    graphs = load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=tmp / "stage", offline=True)
    shutil.copytree(shared_data / "MUTAG", tmp / "ref" / "MUTAG", ignore=shutil.ignore_patterns("processed"))
    return graphs, _prepare(graphs, tmp, graphs.num_graphs), D.TUDataset(str(tmp / "ref"), "MUTAG")


def test_mutag_edges_are_the_tudataset_edges(mutag):
    graphs, path, ref = mutag
    ids = [int(g) for g in np.argsort(graphs.num_nodes)[[0, 1, -2, -1]]] + [40, 41]  # 10 to 28 nodes
    edges = _check(path, [ref[g].x for g in range(len(ref))], ref, ids)
    with StructureCache(path) as c:
        encoding, dims = c.edge_coding()
    assert (encoding, dims) == ("linear", (4,))
    enc = EdgeEncoder(encoding, dims, 8)
    torch.testing.assert_close(enc(edges.attr), enc.inner(edges.attr.float()))  # one-hot bond labels, mapped


def test_molhiv_bond_features_are_ogbs(tmp_path, shared_data):
    from ogb.graphproppred.mol_encoder import BondEncoder
    from ogb.utils.features import get_bond_feature_dims

    graphs = load_graphs(get_dataset("ogbg-molhiv"), data_root=shared_data, cache_dir=tmp_path / "stage",
                         offline=True)
    path = _prepare(graphs, tmp_path, 24)
    ds = graphs.dataset
    edges = _check(path, [ds[g].x for g in range(24)], ds, list(range(24)))
    with StructureCache(path) as c:
        encoding, dims = c.edge_coding()
    assert (encoding, dims) == ("index", tuple(get_bond_feature_dims()))
    enc = EdgeEncoder(encoding, dims, 8, bond=True)
    assert isinstance(enc.inner, BondEncoder)
    # The encoder of the batch's edges against OGB's BondEncoder of the dataset's own edge_attr, edge by edge.
    ref = torch.cat([ds[g].edge_attr for g in range(24)])
    got = {tuple(a.tolist()): e for a, e in zip(edges.attr, enc(edges.attr))}
    with torch.no_grad():
        for a, e in zip(ref, enc.inner(ref)):
            torch.testing.assert_close(got[tuple(a.tolist())], e)


def test_a_dataset_without_edge_attributes_stores_a_placeholder(shared_data, tmp_path):
    graphs = load_graphs(get_dataset("PROTEINS"), data_root=shared_data, cache_dir=tmp_path / "stage", offline=True)
    assert graphs.edge_attr() is None
    cfg = resolve("graph-level", ["model.arch=gps", "data.dataset=PROTEINS"])
    edges = edge_inputs(graphs, cfg.structure, **edge_readers(cfg))
    assert edges is not None and (edges.coding.encoding, edges.coding.dims) == ("index", (1,))
    assert [len(a) for a in edges.attrs] == [e.shape[1] for e in graphs.edge_index]
    assert edge_inputs(graphs, cfg.structure, required=False) is None  # nothing else stores it
