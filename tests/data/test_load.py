"""Loading through the real PyG/OGB classes, offline, from read-only and bundled files."""
from __future__ import annotations

import builtins
import socket
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.load import EMBEDDED_ROOT, graphs_fingerprint, load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import DataNotFoundError


@pytest.fixture(scope="session")
def stage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One staging/cache dir per session so each loader processes its raw files once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails the test: raw files present means no network."""
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _tu_counts(root: Path, name: str) -> tuple[int, int]:
    ind = np.loadtxt(root / name / "raw" / f"{name}_graph_indicator.txt", dtype=np.int64)
    return int(ind.max()), int(ind.shape[0])


@pytest.mark.parametrize("name", ["MUTAG", "PROTEINS", "IMDB-BINARY"])
def test_tu_sets_load_from_read_only_root(name, shared_data, stage_dir, no_network):
    g = load_graphs(get_dataset(name), data_root=shared_data, cache_dir=stage_dir, offline=True)
    graphs, nodes = _tu_counts(shared_data, name)
    assert g.num_graphs == graphs
    assert int(g.num_nodes.sum()) == nodes
    # Edges stay graph-local and equal the raw file's distinct, non-loop pairs.
    raw = np.loadtxt(shared_data / name / "raw" / f"{name}_A.txt", delimiter=",", dtype=np.int64)
    raw = np.unique(raw[raw[:, 0] != raw[:, 1]], axis=0)
    assert sum(e.shape[1] for e in g.edge_index) == raw.shape[0]
    assert all(e.size == 0 or (e.min() >= 0 and e.max() < n) for e, n in zip(g.edge_index, g.num_nodes))
    # The data root is never written: processed files go to the staging folder.
    assert not (shared_data / name / "processed").exists()
    assert (stage_dir / "_pyg" / name / "processed").is_dir()


def test_planetoid_from_shared_root(shared_data, stage_dir, no_network):
    g = load_graphs(get_dataset("citeseer"), data_root=shared_data, cache_dir=stage_dir, offline=True)
    assert g.num_graphs == 1 and int(g.num_nodes[0]) == 3327
    assert g.edge_index[0].shape[1] == 9104  # as the datasets README records for PyG's CiteSeer


def test_embedded_cora_needs_no_data_root(stage_dir, no_network):
    g = load_graphs(get_dataset("cora"), data_root=None, cache_dir=stage_dir, offline=True)
    assert str(g.source).startswith(str(EMBEDDED_ROOT))
    assert int(g.num_nodes[0]) == 2708 and g.edge_index[0].shape[1] == 10556
    assert len(g.dataset[0].y) == 2708


def test_embedded_mutag_matches_the_shared_copy(shared_data, stage_dir):
    a = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=stage_dir, offline=True)
    b = load_graphs(get_dataset("mutag"), data_root=shared_data, cache_dir=stage_dir, offline=True)
    assert a.fingerprint() == b.fingerprint()


def test_ogb_molhiv_loads_and_reloads_with_new_torch(shared_data, tmp_path, no_network):
    """ogb 1.3.6 + torch>=2.6 fails to reload its processed file unless PyG classes are allowed."""
    spec = get_dataset("ogbg-molhiv")
    first = load_graphs(spec, data_root=shared_data, cache_dir=tmp_path, offline=True)
    again = load_graphs(spec, data_root=shared_data, cache_dir=tmp_path, offline=True)  # reads processed/
    assert first.num_graphs == again.num_graphs == 41127
    assert int(first.num_nodes.sum()) == 1049163
    split = first.dataset.get_idx_split()
    assert [len(split[k]) for k in ("train", "valid", "test")] == [32901, 4113, 4113]


@pytest.mark.parametrize("name", ["PubMed", "WikiCS", "COLLAB"])
def test_missing_files_give_one_actionable_line(name, tmp_path):
    root = tmp_path / "empty-root"
    root.mkdir()
    with pytest.raises(DataNotFoundError) as err:
        load_graphs(get_dataset(name), data_root=root, cache_dir=tmp_path / "c", offline=True)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(root / get_dataset(name).folder) in msg  # where it looked
    assert "--data-root" in msg and "XMASK_DATA_ROOT" in msg  # how to provide it


def test_ogb_update_prompt_never_blocks(shared_data, tmp_path, monkeypatch):
    """OGB asks on stdin when RELEASE_v1.txt is missing; that must fail fast, not wait."""
    root = tmp_path / "root"
    folder = root / "ogbg_molhiv"
    folder.mkdir(parents=True)
    for sub in ("raw", "split", "mapping"):
        (folder / sub).symlink_to(shared_data / "ogbg_molhiv" / sub, target_is_directory=True)
    called = []
    monkeypatch.setattr(builtins, "input", lambda *a: called.append(a) or "y")
    with pytest.raises(DataNotFoundError, match="asked to re-download"):
        load_graphs(get_dataset("molhiv"), data_root=root, cache_dir=tmp_path / "c", offline=False)
    assert not called, "the real input() was reached"
    assert builtins.input is not None


def test_fingerprint_changes_with_any_edge():
    e = [np.array([[0, 1], [1, 2]]), np.array([[0], [1]])]
    n = np.array([3, 2])
    base = graphs_fingerprint(e, n)
    assert base == graphs_fingerprint([x.copy() for x in e], n.copy())
    assert base != graphs_fingerprint([np.array([[0, 1], [1, 0]]), e[1]], n)
    assert base != graphs_fingerprint(e, np.array([3, 3]))
    assert base != graphs_fingerprint(e[::-1], n[::-1])


# --------------------------------------------- processed files are never unpickled
class _Planted:
    """Unpickling this creates ``marker``: what a planted processed file could do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _plant(path: Path, marker: Path) -> None:
    import torch

    torch.save(_Planted(marker), path)
    # The file really runs code when fully unpickled (what PyG's fallback would do).
    probe = marker.with_name(marker.name + ".probe")
    torch.save(_Planted(probe), path.with_name("probe.pt"))
    torch.load(path.with_name("probe.pt"), weights_only=False)
    assert probe.exists()
    path.with_name("probe.pt").unlink()


@pytest.mark.parametrize("planted", ["data.pt", "pre_transform.pt"])
def test_planted_processed_file_never_runs_and_is_reprocessed(planted, tmp_path, capfd):
    spec = get_dataset("MUTAG")
    cache = tmp_path / "c"
    clean = load_graphs(spec, data_root=None, cache_dir=cache, offline=True)
    processed = cache / "_pyg" / "MUTAG" / "processed"
    marker = tmp_path / "code-ran"
    _plant(processed / planted, marker)
    again = load_graphs(spec, data_root=None, cache_dir=cache, offline=True)
    assert not marker.exists()
    assert again.fingerprint() == clean.fingerprint() and again.num_graphs == 188
    assert "re-processed from the raw files" in capfd.readouterr().err
    import torch

    torch.load(processed / planted, weights_only=True)  # replaced by a plain file


def test_truncated_processed_file_is_reprocessed(tmp_path):
    spec = get_dataset("MUTAG")
    cache = tmp_path / "c"
    clean = load_graphs(spec, data_root=None, cache_dir=cache, offline=True)
    data = cache / "_pyg" / "MUTAG" / "processed" / "data.pt"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    again = load_graphs(spec, data_root=None, cache_dir=cache, offline=True)
    assert again.fingerprint() == clean.fingerprint()


def test_planted_ogb_processed_file_never_runs(shared_data, tmp_path, no_network):
    spec = get_dataset("ogbg-molhiv")
    cache = tmp_path / "c"
    clean = load_graphs(spec, data_root=shared_data, cache_dir=cache, offline=True)
    (processed,) = (cache / "_pyg").glob("ogbg_molhiv*/processed")
    marker = tmp_path / "code-ran"
    _plant(processed / "geometric_data_processed.pt", marker)
    again = load_graphs(spec, data_root=shared_data, cache_dir=cache, offline=True)
    assert not marker.exists() and again.fingerprint() == clean.fingerprint()
