"""The edge-attribute file loader: the documented format, and one actionable error per bad input."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.edgefile import file_sha256, load_edge_file
from xmask_cli.errors import DataNotFoundError, UsageError


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name, sep", [("e.csv", ","), ("e.tsv", "\t"), ("e.txt", "  ")])
def test_reads_each_delimiter(tmp_path: Path, name: str, sep: str) -> None:
    rows = ["src dst length angle", "# a comment", "0 1 1.5 -2", "", "2 1 0.25 3e1", "3 3 7 8"]
    p = _write(tmp_path, name, "\n".join(r.replace(" ", sep) for r in rows) + "\n")
    d = load_edge_file(p)
    assert d.edge_index.dtype == np.int64 and d.edge_index.tolist() == [[0, 2, 3], [1, 1, 3]]
    assert d.targets.dtype == np.float32 and d.targets.tolist() == [[1.5, -2.0], [0.25, 30.0], [7.0, 8.0]]
    assert d.target_names == ("length", "angle") and d.num_nodes == 4 and d.x is None
    assert d.path == str(p) and d.sha256 == file_sha256(p)


def test_features_npy_and_csv(tmp_path: Path) -> None:
    p = _write(tmp_path, "e.csv", "SRC,DST,y\n0,1,1\n1,2,2\n")
    x = np.arange(10, dtype=np.float64).reshape(5, 2)
    np.save(tmp_path / "x.npy", x)
    d = load_edge_file(p, tmp_path / "x.npy")
    assert d.x.dtype == np.float32 and d.x.tolist() == x.tolist()
    assert d.num_nodes == 5  # extra feature rows are isolated nodes
    assert d.features_sha256 == file_sha256(tmp_path / "x.npy")
    _write(tmp_path, "x.csv", "0,1\n2,3\n4,5\n")
    d = load_edge_file(p, tmp_path / "x.csv")
    assert d.x.tolist() == [[0, 1], [2, 3], [4, 5]] and d.num_nodes == 3


def test_an_empty_features_file_is_one_line_naming_it(tmp_path: Path) -> None:
    p = _write(tmp_path, "e.csv", "src,dst,y\n0,1,1\n1,2,2\n")
    (tmp_path / "x.npy").write_bytes(b"")
    with pytest.raises(UsageError, match=rf"^{tmp_path / 'x.npy'}: not a readable .npy array"):
        load_edge_file(p, tmp_path / "x.npy")


BAD_ROWS = [
    ("no_header.csv", "0,1,2.0\n1,2,3.0\n", ":1: header row required"),
    ("one_target_missing.csv", "src,dst\n0,1\n", ":1: header row required"),
    ("dup_names.csv", "src,dst,y,y\n0,1,1,2\n", ":1: target column names"),
    ("empty.csv", "\n\n", "empty file"),
    ("only_header.csv", "src,dst,y\n", "no edge rows"),
    ("not_int.csv", "src,dst,y\n0,1,1\n0,x,2\n", ":3: dst 'x' is not an integer node id"),
    ("float_id.csv", "src,dst,y\n0,1.5,1\n", ":2: dst '1.5' is not an integer node id"),
    ("negative.csv", "src,dst,y\n0,1,1\n\n-1,2,2\n", ":4: src -1 is negative"),
    ("columns.csv", "src,dst,y\n0,1,1\n1,2\n", ":3: expected 3 columns"),
    ("too_many.tsv", "src\tdst\ty\n0\t1\t1\t9\n", ":2: expected 3 columns"),
    ("target.csv", "src,dst,y\n0,1,abc\n", ":2: target 'y' value 'abc' is not a number"),
    ("nan.csv", "src,dst,y\n0,1,nan\n", ":2: target 'y' value 'nan' is not finite"),
    ("duplicate.csv", "src,dst,y\n0,1,1\n1,2,2\n1,0,3\n", ":4: pair (1, 0) already given on line 2"),
]


@pytest.mark.parametrize("name, text, expected", BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_bad_rows_name_file_and_line(tmp_path: Path, name: str, text: str, expected: str) -> None:
    p = _write(tmp_path, name, text)
    with pytest.raises(UsageError) as err:
        load_edge_file(p)
    msg = str(err.value)
    assert str(p) in msg and expected in msg and "\n" not in msg
    assert err.value.exit_code == 2


def test_missing_files_are_data_not_found(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="edge file .*nope.csv not found") as err:
        load_edge_file(tmp_path / "nope.csv")
    assert err.value.exit_code == 3
    p = _write(tmp_path, "e.csv", "src,dst,y\n0,1,1\n")
    with pytest.raises(DataNotFoundError, match="features file .*x.npy not found"):
        load_edge_file(p, tmp_path / "x.npy")


def test_unknown_extensions(tmp_path: Path) -> None:
    p = _write(tmp_path, "e.json", "src,dst,y\n0,1,1\n")
    with pytest.raises(UsageError, match=r"e\.json: unknown edge-file extension '\.json'; use \.csv"):
        load_edge_file(p)
    p = _write(tmp_path, "e.csv", "src,dst,y\n0,1,1\n")
    _write(tmp_path, "x.parquet", "")
    with pytest.raises(UsageError, match=r"x\.parquet: unknown features extension"):
        load_edge_file(p, tmp_path / "x.parquet")


def test_bad_features(tmp_path: Path) -> None:
    p = _write(tmp_path, "e.csv", "src,dst,y\n0,1,1\n4,2,2\n")
    np.save(tmp_path / "short.npy", np.zeros((3, 2)))
    with pytest.raises(UsageError) as err:
        load_edge_file(p, tmp_path / "short.npy")
    msg = str(err.value)
    assert "short.npy: 3 feature rows" in msg and f"{p}:3 uses node id 4" in msg
    np.save(tmp_path / "cube.npy", np.zeros((5, 2, 2)))
    with pytest.raises(UsageError, match=r"cube\.npy: features must be a \[N, F\] array"):
        load_edge_file(p, tmp_path / "cube.npy")
    _write(tmp_path, "ragged.csv", "1,2\n3\n")
    with pytest.raises(UsageError, match=r"ragged\.csv:2: expected 2 feature values"):
        load_edge_file(p, tmp_path / "ragged.csv")
    _write(tmp_path, "header.csv", "a,b\n1,2\n")
    with pytest.raises(UsageError, match=r"header\.csv:1: feature value 'a' is not a number"):
        load_edge_file(p, tmp_path / "header.csv")


@pytest.mark.parametrize("big", [10**8, 10**12])
def test_huge_sparse_node_ids_are_refused_before_any_allocation(tmp_path: Path, big: int) -> None:
    """Issue 14, item 8: a 10-row file naming node 10^8 allocated 5 GB; 10^12 raised MemoryError."""
    import tracemalloc

    rows = [f"{i},{i + 1},1.0" for i in range(9)] + [f"3,{big},2.0"]
    path = tmp_path / "e.csv"
    path.write_text("src,dst,w\n" + "\n".join(rows) + "\n")
    tracemalloc.start()
    with pytest.raises(UsageError, match=rf"e.csv:11: node id {big} is far above the 11 distinct ids"):
        load_edge_file(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 << 20


def test_ids_up_to_the_bound_load_and_features_lift_it(tmp_path: Path) -> None:
    # 11 distinct ids: the bound is max(1000, 110) = 1000; ids 0..999 are fine.
    path = tmp_path / "e.csv"
    path.write_text("src,dst,w\n" + "\n".join(f"{i},{i + 1},1.0" for i in range(9)) + "\n3,999,2.0\n")
    assert load_edge_file(path).num_nodes == 1000
    path.write_text("src,dst,w\n" + "\n".join(f"{i},{i + 1},1.0" for i in range(9)) + "\n3,1000,2.0\n")
    with pytest.raises(UsageError, match="below max\\(1000, 10 x distinct ids\\) = 1000"):
        load_edge_file(path)
    feats = tmp_path / "x.npy"
    np.save(feats, np.zeros((1001, 2), dtype=np.float32))  # one row per id: the user states the node count
    assert load_edge_file(path, feats).num_nodes == 1001


def test_a_row_repeated_with_its_targets_is_merged(tmp_path: Path) -> None:
    """A row listed again with the same targets is the same prediction target: kept once (file order), counted in
    one log line; the same pair with other targets names both lines; the other direction stays refused."""
    p = _write(tmp_path, "e.csv", "src,dst,y\n0,1,1.5\n1,2,2\n\n0,1,1.5\n2,3,4\n1,2,2.0\n")
    d = load_edge_file(p)
    assert d.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]] and d.targets[:, 0].tolist() == [1.5, 2.0, 4.0]
    assert d.merged_rows == 2 and d.notes == ("merged 2 repeated rows of e.csv; first: line 5 repeats line 2",)
    assert d.num_edges == 3 and d.sha256 == file_sha256(p)
    clean = load_edge_file(_write(tmp_path, "clean.csv", "src,dst,y\n0,1,1.5\n"))
    assert clean.merged_rows == 0 and clean.notes == ()
    p.write_text("src,dst,y\n0,1,1.5\n1,2,2\n0,1,7\n")
    with pytest.raises(UsageError) as err:
        load_edge_file(p)
    assert str(err.value) == (f"{p}:4: edge (0, 1) repeats line 2 with other targets (7 here, 1.5 there); each pair "
                              f"has one target row (a repeat with the same targets is merged)")


def test_an_edge_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os
    import signal

    os.mkfifo(tmp_path / "e.csv")
    os.mkfifo(tmp_path / "x.npy")
    good = _write(tmp_path, "g.csv", "src,dst,y\n0,1,1\n")
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("blocked on a FIFO")))
    signal.alarm(60)
    try:
        with pytest.raises(UsageError, match=rf"^{tmp_path / 'e.csv'}: a FIFO \(named pipe\), not a regular file"):
            load_edge_file(tmp_path / "e.csv")
        with pytest.raises(UsageError, match=rf"^{tmp_path / 'x.npy'}: a FIFO \(named pipe\), not a regular file"):
            load_edge_file(good, features_path=tmp_path / "x.npy")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_edge_features_npy_whose_header_lies(tmp_path: Path) -> None:
    import io

    good = _write(tmp_path, "g.csv", "src,dst,y\n0,1,1\n")
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**11, 4)})
    (tmp_path / "x.npy").write_bytes(buf.getvalue() + b"\0" * 64)
    with pytest.raises(UsageError, match=rf"^{tmp_path / 'x.npy'}: the header declares shape \[100000000000, 4\]"):
        load_edge_file(good, features_path=tmp_path / "x.npy")
