"""Node features: what training feeds the model is the PyG/OGB loader's own ``x``.

The reference is the real loader class run directly on an untouched copy of
the dataset's folder (no xmask staging in between); xmask's features must
equal its ``x`` in shape and values, graph by graph. Datasets without node
features (IMDB-BINARY) get a one-hot degree, checked against degrees counted
from the raw edge file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from xmask_cli.data.load import EMBEDDED_ROOT, MAX_DEGREE, STAGE_MANIFEST, has_raw_files, load_graphs
from xmask_cli.data.registry import all_datasets, get_dataset
from xmask_cli.engine.batching.features import node_features

#: Registered datasets whose raw files are in shared/datasets (checked below, so none is skipped silently).
OFFLINE = ("Cora", "CiteSeer", "Computers", "Photo", "CS", "Physics", "MUTAG", "PROTEINS", "NCI1", "DD",
           "IMDB-BINARY", "ogbg-molhiv")
#: Node-level sets whose ``x`` is large (CS 0.5 GB, Physics 1.2 GB): compared by digest, one copy at a time.
BIG = ("CS", "Physics")


def test_offline_list_is_every_registered_dataset_present(shared_data):
    # Graphs with node features (image sets have pixels, not node features: not this test's subject).
    present = {s.name for s in all_datasets() if s.family != "images" and has_raw_files(s, shared_data)}
    assert present == set(OFFLINE)


def _reference(spec_name: str, source: Path, tmp: Path):
    """The real loader on a plain copy of ``source/<folder>`` (raw files only, no staging)."""
    import torch_geometric.datasets as D

    spec = get_dataset(spec_name)
    dst = tmp / spec.folder
    shutil.copytree(source / spec.folder, dst, ignore=shutil.ignore_patterns("processed"))
    fam = spec.family
    if fam == "tu":
        return D.TUDataset(str(tmp), spec.name)
    if fam == "planetoid":
        return D.Planetoid(str(tmp), spec.name)
    if fam == "amazon":
        return D.Amazon(str(tmp), spec.name)
    if fam == "coauthor":
        return D.Coauthor(str(tmp), spec.name)
    if fam == "ogbg":
        from ogb.graphproppred import PygGraphPropPredDataset
        from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
        from torch_geometric.data.storage import GlobalStorage

        torch.serialization.add_safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage])
        return PygGraphPropPredDataset(spec.name, root=str(tmp))
    raise AssertionError(f"no reference loader for {fam}")


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stage")


def _compare(name: str, source: Path, data_root: Path | None, stage: Path, tmp: Path) -> None:
    spec = get_dataset(name)
    g = load_graphs(spec, data_root=data_root, cache_dir=stage, offline=True)
    ours = node_features(g)
    sizes = [int(t.size(0)) for t in ours]
    digest = _digest(torch.cat(ours)) if name in BIG else None
    cat = None if name in BIG else torch.cat(ours)
    del ours, g
    ref = _reference(name, source, tmp)
    x = ref._data.x
    assert x is not None, f"{name}: the reference loader gives no x"
    if len(ref) > 1:
        ref_sizes = np.diff(ref.slices["x"].numpy()).tolist()
    else:
        ref_sizes = [int(x.size(0))]
    assert sizes == ref_sizes
    if digest is not None:
        assert digest == _digest(x.float())
        return
    assert cat.shape == x.shape
    assert torch.equal(cat, x.float())


@pytest.mark.parametrize("name", [n for n in OFFLINE if n != "IMDB-BINARY"])
def test_features_equal_the_loaders_own_x(name, shared_data, stage, tmp_path):
    _compare(name, shared_data, shared_data, stage, tmp_path)


@pytest.mark.parametrize("name", ["MUTAG", "Cora"])
def test_bundled_features_equal_the_loaders_own_x(name, stage, tmp_path):
    _compare(name, EMBEDDED_ROOT, None, stage / "bundled", tmp_path)


def test_tu_feature_widths_are_the_label_counts(shared_data, stage):
    # The TU README counts (shared/datasets/README.md): 7 atom types, 3 SSE types, 37 atom types, 89 amino acids.
    for name, width in (("MUTAG", 7), ("PROTEINS", 3), ("NCI1", 37), ("DD", 89)):
        info = load_graphs(get_dataset(name), data_root=shared_data, cache_dir=stage, offline=True).feature_info()
        assert (info.kind, info.dim) == ("dataset", width), (name, info)
        assert f"one-hot node labels ({width})" in info.detail
        assert ("node attributes (1) not used" in info.detail) == (name == "PROTEINS")  # PyG's use_node_attr=False
        labels = np.loadtxt(shared_data / name / "raw" / f"{name}_node_labels.txt", dtype=np.int64)
        assert len(np.unique(labels)) <= width == labels.max() - labels.min() + 1


def test_molhiv_features_are_ogb_atoms(shared_data, stage):
    info = load_graphs(get_dataset("molhiv"), data_root=shared_data, cache_dir=stage, offline=True).feature_info()
    assert (info.kind, info.dim) == ("atom", 9)


def test_featureless_set_gets_one_hot_degree(shared_data, stage):
    g = load_graphs(get_dataset("IMDB-BINARY"), data_root=shared_data, cache_dir=stage, offline=True)
    info = g.feature_info()
    assert info.kind == "degree" and "no node features" in info.detail
    # Degrees counted from the raw file: distinct undirected non-loop pairs (PyG's TUDataset coalesces).
    raw = np.loadtxt(shared_data / "IMDB-BINARY" / "raw" / "IMDB-BINARY_A.txt", delimiter=",", dtype=np.int64) - 1
    ind = np.loadtxt(shared_data / "IMDB-BINARY" / "raw" / "IMDB-BINARY_graph_indicator.txt", dtype=np.int64)
    raw = np.unique(raw[raw[:, 0] != raw[:, 1]], axis=0)
    deg = np.bincount(raw[:, 0], minlength=ind.shape[0])
    width = min(deg.max(), MAX_DEGREE) + 1
    want = np.eye(width, dtype=np.float32)[np.minimum(deg, width - 1)]
    got = torch.cat(node_features(g)).numpy()
    assert info.dim == width and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", OFFLINE)
def test_staged_folder_has_every_file_the_loader_reads(name, shared_data, stage):
    """Fails when staging leaves out any file of the dataset's folder (the loaders glob ``raw/``)."""
    spec = get_dataset(name)
    load_graphs(spec, data_root=shared_data, cache_dir=stage, offline=True)
    src, dst = shared_data / spec.folder, stage / "_pyg" / spec.folder

    def files(root: Path) -> set[str]:
        out = set()
        for folder, _dirs, names in os.walk(root, followlinks=True):
            rel = Path(folder).relative_to(root)
            if rel.parts[:1] == ("processed",):
                continue
            out |= {(rel / n).as_posix() for n in names if n != STAGE_MANIFEST}
        return out

    missing = files(src) - files(dst)
    assert not missing, f"{name}: staged folder misses {sorted(missing)}"
    for rel in files(src):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()


def test_stale_processed_folder_from_partial_staging_is_rebuilt(shared_data, tmp_path):
    """A cache staged by an older xmask (3 raw files, processed without x) must not keep degree features."""
    import torch_geometric.datasets as D

    old = tmp_path / "_pyg" / "MUTAG" / "raw"
    old.mkdir(parents=True)
    for f in ("A", "graph_indicator", "graph_labels"):
        (old / f"MUTAG_{f}.txt").symlink_to(shared_data / "MUTAG" / "raw" / f"MUTAG_{f}.txt")
    assert D.TUDataset(str(tmp_path / "_pyg"), "MUTAG")._data.x is None  # what the old staging produced
    g = load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=tmp_path, offline=True)
    assert g.feature_info().dim == 7 and g.has_features()
    # A second load with unchanged files keeps the processed folder (no reprocessing).
    stamp = (tmp_path / "_pyg" / "MUTAG" / "processed").stat().st_mtime_ns
    load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=tmp_path, offline=True)
    assert (tmp_path / "_pyg" / "MUTAG" / "processed").stat().st_mtime_ns == stamp


def test_structure_is_unchanged_by_the_extra_files(shared_data, tmp_path):
    """Node/edge label files add features only: the graphs (hence every structure cache key) stay the same."""
    import torch_geometric.datasets as D

    minimal = tmp_path / "min" / "MUTAG" / "raw"
    minimal.mkdir(parents=True)
    for f in ("A", "graph_indicator", "graph_labels"):
        shutil.copy(shared_data / "MUTAG" / "raw" / f"MUTAG_{f}.txt", minimal)
    bare = D.TUDataset(str(tmp_path / "min"), "MUTAG")
    g = load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=tmp_path / "c", offline=True)
    assert torch.equal(bare._data.edge_index, g.dataset._data.edge_index)
    assert torch.equal(bare.slices["edge_index"], g.dataset.slices["edge_index"])
