"""The readers of a user's folder: each file written here with numpy or ``csv`` reads back as the arrays written,
in every format, and a value out of its domain is one usage error (exit 2) naming the file and row."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.folder_read import read_edges, read_features, read_index_file, read_labels
from xmask_cli.errors import UsageError

SRC = np.array([0, 1, 2, 3, 1])
DST = np.array([1, 2, 0, 0, 3])
WEIGHT = np.array([0.5, 1.0, 2.25, 3.0, 0.125])


def _csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_edges_read_back_from_csv_with_and_without_weights(tmp_path: Path) -> None:
    src, dst, w, _ = read_edges(_csv(tmp_path / "e.csv", ["src", "dst"], list(zip(SRC, DST))))
    assert w is None
    np.testing.assert_array_equal(src, SRC)
    np.testing.assert_array_equal(dst, DST)
    src, dst, w, _ = read_edges(_csv(tmp_path / "w.csv", ["src", "dst", "weight"], list(zip(SRC, DST, WEIGHT))))
    np.testing.assert_array_equal(np.stack([src, dst]), np.stack([SRC, DST]))
    assert w is not None
    np.testing.assert_allclose(w, WEIGHT)


def test_edges_read_back_from_npz_whole_floats_accepted(tmp_path: Path) -> None:
    path = tmp_path / "e.npz"
    np.savez(path, src=SRC.astype(np.float64), dst=DST.astype(np.int32), weight=WEIGHT.astype(np.float32))
    src, dst, w, _ = read_edges(path)
    assert src.dtype == np.int64 and dst.dtype == np.int64
    np.testing.assert_array_equal(src, SRC)
    np.testing.assert_array_equal(dst, DST)
    assert w is not None and w.dtype == np.float64
    np.testing.assert_allclose(w, WEIGHT)


@pytest.mark.parametrize(("arrays", "message"), [
    ({"src": np.array([0, -1]), "dst": np.array([1, 0])}, r"e\.npz row 1: src -1 is below 0; node ids are 0-based"),
    ({"src": np.array([0.0, 1.5]), "dst": np.array([1, 0])}, r"e\.npz row 1: src 1\.5 is not an integer"),
    ({"src": np.array([0, 1]), "dst": np.array([1, 0, 2])}, r"src has 2 values, dst 3"),
    ({"src": np.array([0, 1]), "dst": np.array([1, 0]), "weight": np.array([1.0, 0.0])},
     r"e\.npz row 1: weight 0\.0 must be a finite number > 0"),
    ({"src": np.array([0, 1]), "dst": np.array([1, 0]), "weight": np.array([1.0])}, r"weight must be 2 numbers"),
])
def test_edges_out_of_domain_are_refused_naming_the_row(tmp_path: Path, arrays: dict, message: str) -> None:
    path = tmp_path / "e.npz"
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match=message) as info:
        read_edges(path)
    assert info.value.exit_code == 2


def test_features_read_back_as_float32_from_npy_npz_and_csv(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float64).reshape(4, 3) / 4 - 1
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", x=x)
    _csv(tmp_path / "x.csv", ["a", "b", "c"], x.tolist())
    for name in ("x.npy", "x.npz", "x.csv"):
        got = read_features(tmp_path / name)
        assert got.dtype == np.float32, name
        np.testing.assert_array_equal(got, x.astype(np.float32))
    np.save(tmp_path / "one.npy", x[:, 0])  # one feature per node: a column
    np.testing.assert_array_equal(read_features(tmp_path / "one.npy"), x[:, :1].astype(np.float32))


def test_a_non_finite_feature_is_refused_naming_row_and_column(tmp_path: Path) -> None:
    x = np.zeros((3, 2))
    x[2, 1] = np.nan
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(UsageError, match=r"x\.npy row 2: feature column 1 is nan"):
        read_features(tmp_path / "x.npy")
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(UsageError, match=r"must be an \[n, d\] array, got shape \[2, 2, 2\]"):
        read_features(tmp_path / "cube.npy")


def test_labels_read_back_with_minus_one_unlabelled(tmp_path: Path) -> None:
    y = np.array([2, -1, 0, 1])
    np.save(tmp_path / "y.npy", y[:, None])  # a [n, 1] column reads as [n]
    np.savez(tmp_path / "y.npz", y=y.astype(np.float32))
    _csv(tmp_path / "y.csv", ["label"], [[v] for v in y])
    for name in ("y.npy", "y.npz", "y.csv"):
        got = read_labels(tmp_path / name)
        assert got.dtype == np.int64, name
        np.testing.assert_array_equal(got, y)
    np.save(tmp_path / "bad.npy", np.array([0, -2]))
    with pytest.raises(UsageError, match=r"bad\.npy row 1: label -2 is below -1"):
        read_labels(tmp_path / "bad.npy")


def test_index_files_read_back_and_refuse_negative_ids(tmp_path: Path) -> None:
    idx = np.array([4, 0, 7])
    np.save(tmp_path / "train.npy", idx)
    _csv(tmp_path / "train.csv", ["node"], [[v] for v in idx])
    for name in ("train.npy", "train.csv"):
        got, _ = read_index_file(tmp_path / name)
        np.testing.assert_array_equal(got, idx)
    np.save(tmp_path / "bad.npy", np.array([3, -1]))
    with pytest.raises(UsageError, match=r"bad\.npy row 1: node id -1 is below 0"):
        read_index_file(tmp_path / "bad.npy")
