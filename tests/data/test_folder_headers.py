"""A dataset folder's node files compared from their headers before any is read, the node count a features
file alone gives bounded, labels checked against their range before anything is sized by them."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from tests.data.test_folder import N, write_folder
from xmask_cli.data import folder as folder_module
from xmask_cli.data.binary_tables import declared_rows
from xmask_cli.data.edgefile import load_edge_file
from xmask_cli.data.folder import folder_spec, load_folder
from xmask_cli.data.tables import MAX_FEATURE_NODES
from xmask_cli.errors import UsageError

#: 2 GiB of float32 features: 2^27 rows of 4 columns.
BIG_ROWS = 1 << 27


def _sparse_features(path: Path, rows: int = BIG_ROWS, cols: int = 4) -> None:
    """A consistent ``.npy`` of ``rows x cols`` float32 (header and size agree) that takes almost no disk: numpy's
    own memmap writer seeks to the end, so the data is a hole."""
    np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, cols))._mmap.close()


def _refuse_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any file read makes the test fail: the check must come from the headers alone."""
    def boom(*a, **k):
        raise AssertionError("a dataset file was read before the headers were compared")

    for name in ("read_edges", "read_features", "read_labels"):
        monkeypatch.setattr(folder_module, name, boom)


def test_declared_rows_are_the_rows_the_files_hold(tmp_path):
    """npy, npz member and Parquet footer counts equal the arrays' lengths read in full; CSV declares none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.arange(21, dtype=np.float32).reshape(7, 3)
    np.save(tmp_path / "a.npy", x)
    np.savez(tmp_path / "a.npz", x=x, y=np.arange(5))
    pq.write_table(pa.table({"f0": x[:, 0], "f1": x[:, 1]}), tmp_path / "a.parquet")
    (tmp_path / "a.csv").write_text("f0\n1\n2\n")
    assert declared_rows(tmp_path / "a.npy") == len(np.load(tmp_path / "a.npy")) == 7
    with np.load(tmp_path / "a.npz") as z:
        assert (declared_rows(tmp_path / "a.npz", "x"), declared_rows(tmp_path / "a.npz", "y")) == \
            (len(z["x"]), len(z["y"])) == (7, 5)
    assert declared_rows(tmp_path / "a.npz", "w") is None
    assert declared_rows(tmp_path / "a.parquet") == pq.read_table(tmp_path / "a.parquet").num_rows == 7
    assert declared_rows(tmp_path / "a.csv") is None
    _sparse_features(tmp_path / "big.npy")
    assert declared_rows(tmp_path / "big.npy") == BIG_ROWS
    assert os.stat(tmp_path / "big.npy").st_size == 128 + BIG_ROWS * 16  # consistent: header + 2 GiB of data
    assert os.stat(tmp_path / "big.npy").st_blocks * 512 < 1 << 20  # ... of which almost none is on disk


def test_a_2_gib_features_file_beside_60_labels_is_refused_from_the_headers(tmp_path, monkeypatch):
    """Case 15: 2^27 feature rows, 60 labels: exit 2 at once, naming both counts; nothing read, nothing written."""
    folder = write_folder(tmp_path / "g", x=False, y=np.arange(60) % 3)
    _sparse_features(folder / "features.npy")
    _refuse_reads(monkeypatch)
    with pytest.raises(UsageError, match=rf"labels.npy: 60 labels but features.npy has {BIG_ROWS:,} rows"):
        load_folder(folder_spec(str(folder)))
    monkeypatch.undo()
    t0 = time.perf_counter()
    r = run("train", "--dataset", str(folder), "--set", "train.epochs=1", "--device", "cpu",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 2 and f"{BIG_ROWS:,} rows" in one_error_line(r)
    assert time.perf_counter() - t0 < 20
    assert not (tmp_path / "runs").exists()


def test_a_features_file_alone_gives_at_most_the_documented_node_count(tmp_path, monkeypatch):
    """Without labels the features' rows are the node count: bounded by MAX_FEATURE_NODES, or XMASK_MAX_NODES."""
    folder = write_folder(tmp_path / "g", y=False)
    (folder / "labels.npy").unlink(missing_ok=True)
    big = write_folder(tmp_path / "big", y=False)
    (big / "labels.npy").unlink(missing_ok=True)
    _sparse_features(big / "features.npy")
    assert BIG_ROWS > MAX_FEATURE_NODES
    _refuse_reads(monkeypatch)
    with pytest.raises(UsageError, match=rf"declares {BIG_ROWS:,} rows.*above the {MAX_FEATURE_NODES:,} nodes.*"
                                         rf"XMASK_MAX_NODES={BIG_ROWS}"):
        load_folder(folder_spec(str(big)))
    monkeypatch.undo()
    monkeypatch.setenv("XMASK_MAX_NODES", str(N - 1))
    with pytest.raises(UsageError, match=rf"declares {N} rows.*above the {N - 1} nodes"):
        load_folder(folder_spec(str(folder)))
    monkeypatch.setenv("XMASK_MAX_NODES", str(N))
    assert int(load_folder(folder_spec(str(folder))).num_nodes[0]) == N
    monkeypatch.setenv("XMASK_MAX_NODES", "many")
    with pytest.raises(UsageError, match="XMASK_MAX_NODES='many'"):
        load_folder(folder_spec(str(folder)))


def test_masks_of_another_length_are_refused_from_their_headers(tmp_path, monkeypatch):
    folder = write_folder(tmp_path / "g")
    m = np.zeros(N, dtype=bool)
    np.savez(folder / "masks.npz", train=m, val=np.zeros(N + 5, dtype=bool), test=m)
    _refuse_reads(monkeypatch)
    with pytest.raises(UsageError, match=rf"masks.npz: val must be {N} booleans \(one per node\); its header "
                                         rf"declares {N + 5}"):
        load_folder(folder_spec(str(folder)))


@pytest.mark.parametrize("fmt", ["npy", "csv"])
@pytest.mark.parametrize("label", [10**18, 10**8, N - 9])
def test_a_label_beyond_the_labelled_nodes_is_refused_before_anything_is_sized(tmp_path, label, fmt):
    """Every class 0..C-1 needs a node, so C is at most the labelled nodes: a larger label is one line naming
    where it is, never a bincount of 10^18 slots. N - 9 labelled nodes (9 marked -1) make label N - 9 too big."""
    y = np.arange(N) % 3
    y[:9] = -1
    y[20] = label
    folder = write_folder(tmp_path / "g", y=y, label_fmt=fmt)
    where = "labels.npy row 20" if fmt == "npy" else "labels.csv:22"
    with pytest.raises(UsageError, match=rf"{where}: label {label} is out of range.*only {N - 9} nodes are "
                                         rf"labelled"):
        load_folder(folder_spec(str(folder)))
    y[20] = N - 10  # the largest label that can be right: then every class must be there
    write_folder(tmp_path / "h", y=y, label_fmt=fmt)
    with pytest.raises(UsageError, match="no node has label 3"):
        load_folder(folder_spec(str(tmp_path / "h")))


def test_an_edge_file_s_features_alone_are_bounded_from_their_header(tmp_path, monkeypatch):
    """An edge file's features give its node count: a 2^27-row .npy is refused before it is read, and the bound
    moves with XMASK_MAX_NODES on a small one (whose rows then are the node count)."""
    (tmp_path / "e.csv").write_text("src,dst,y\n0,1,0.5\n1,2,1.5\n")
    _sparse_features(tmp_path / "big.npy")
    with pytest.raises(UsageError, match=rf"big.npy: declares {BIG_ROWS:,} rows"):
        load_edge_file(tmp_path / "e.csv", tmp_path / "big.npy")
    np.save(tmp_path / "x.npy", np.ones((5, 2), dtype=np.float32))
    monkeypatch.setenv("XMASK_MAX_NODES", "4")
    with pytest.raises(UsageError, match="x.npy: declares 5 rows.*above the 4 nodes"):
        load_edge_file(tmp_path / "e.csv", tmp_path / "x.npy")
    monkeypatch.setenv("XMASK_MAX_NODES", "5")
    assert load_edge_file(tmp_path / "e.csv", tmp_path / "x.npy").x.shape == (5, 2)
