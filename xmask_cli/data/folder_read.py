"""The readers of a user's folder (:mod:`xmask_cli.data.folder`): edges, features, labels, split files.

Each reads one file of any of its formats and checks its values on their own (ids >= 0, finite
features, integer labels); an error is one line naming the file and row.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xmask_cli.data.binary_tables import read_npy, read_npz, read_parquet_columns
from xmask_cli.data.tables import Rows, csv_header, read_csv_columns
from xmask_cli.errors import UsageError

__all__ = ["float_column", "int_column", "read_edges", "read_features", "read_index_file", "read_labels"]


def read_edges(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Rows]:
    """``(src, dst, weight or None, rows)`` of an edges file (.csv, .npz or .parquet), ids checked >= 0."""
    ext = path.suffix.lower()
    if ext == ".csv":
        with_weight = len(csv_header(path)) == 3
        names, kinds = (["src", "dst", "weight"], ["id", "id", "float"]) if with_weight else (["src", "dst"], ["id"])
        cols, rows = read_csv_columns(path, names, kinds)
        return cols[0], cols[1], (cols[2] if with_weight else None), rows
    arrays = read_npz(path, ["src", "dst"], ["weight"]) if ext == ".npz" else \
        read_parquet_columns(path, ["src", "dst"], ["weight"])
    rows = Rows(path)
    src, dst = (int_column(arrays[k], path, k, rows, "id") for k in ("src", "dst"))
    if src.shape != dst.shape:
        raise UsageError(f"{path}: src has {src.size} values, dst {dst.size}; one per edge in both")
    w = arrays.get("weight")
    if w is not None:
        w = float_column(w, path, "weight", src.size, rows)
    return src, dst, w, rows


def int_column(a: np.ndarray, path: Path, name: str, rows: Rows, kind: str) -> np.ndarray:
    """A 1-D integer column (whole floats accepted) checked for range: ids >= 0, labels >= -1."""
    a = np.asarray(a)
    if a.ndim != 1:
        raise UsageError(f"{path}: {name} must be one-dimensional, got shape {list(a.shape)}")
    if a.dtype.kind == "f":
        whole = np.isfinite(a) & (a == np.round(a))
        if not whole.all():
            bad = int(np.flatnonzero(~whole)[0])
            raise UsageError(f"{rows.at(bad)}: {name} {float(a[bad])!r} is not an integer"
                             + ("; use -1 for an unlabelled node" if kind == "label" else ""))
    elif a.dtype.kind not in "iub":
        raise UsageError(f"{path}: {name} must hold integers, got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    low = 0 if kind == "id" else -1
    below = np.flatnonzero(a < low)
    if below.size:
        what = "node ids are 0-based" if kind == "id" else "labels are 0..C-1, and -1 marks an unlabelled node"
        raise UsageError(f"{rows.at(below[0])}: {name} {int(a[below[0]])} is below {low}; {what}")
    return a


def float_column(a: np.ndarray, path: Path, name: str, size: int, rows: Rows) -> np.ndarray:
    """A column of ``size`` finite numbers > 0 (edge weights), as float64."""
    a = np.asarray(a)
    if a.ndim != 1 or a.size != size or a.dtype.kind not in "iuf":
        raise UsageError(f"{path}: {name} must be {size} numbers (one per edge), got shape {list(a.shape)} "
                         f"dtype {a.dtype}")
    a = a.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(a) | (a <= 0))
    if bad.size:
        raise UsageError(f"{rows.at(bad[0])}: {name} {float(a[bad[0]])!r} must be a finite number > 0")
    return a


def read_features(path: Path) -> np.ndarray:
    """The ``[n, d]`` float32 features of a features file (.npy, .npz, .csv or .parquet), checked finite."""
    ext = path.suffix.lower()
    rows = Rows(path, csv=ext == ".csv")
    if ext == ".npy":
        x = read_npy(path)
    elif ext == ".npz":
        x = read_npz(path, ["x"])["x"]
    elif ext == ".csv":
        cols, rows = read_csv_columns(path, None, ["float"])
        x = np.stack(cols, axis=1)
    else:
        table = read_parquet_columns(path, None)
        bad = [k for k, v in table.items() if np.asarray(v).dtype.kind not in "iufb"]
        if bad:
            raise UsageError(f"{path}: column {bad[0]} is not numeric; every column of a features file is one feature")
        x = np.stack([np.asarray(v) for v in table.values()], axis=1)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise UsageError(f"{path}: features must be an [n, d] array, got shape {list(x.shape)}")
    if x.dtype.kind not in "iufb":
        raise UsageError(f"{path}: features must be numeric, got dtype {x.dtype}")
    x = x.astype(np.float32, copy=False)
    finite = np.isfinite(x)
    if not finite.all():
        r, c = (int(v[0]) for v in np.nonzero(~finite))
        raise UsageError(f"{rows.at(r)}: feature column {c} is {x[r, c]} (NaN or infinite); features must be finite")
    return x


def read_labels(path: Path) -> np.ndarray:
    """The ``[n]`` int64 labels of a labels file (-1: unlabelled)."""
    ext = path.suffix.lower()
    if ext == ".csv":
        (y,), _ = read_csv_columns(path, ["label"], ["label"])
        return y
    a = read_npy(path) if ext == ".npy" else read_npz(path, ["y"])["y"] if ext == ".npz" else \
        read_parquet_columns(path, ["label"])["label"]
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    return int_column(a, path, "label", Rows(path), "label")


def read_index_file(path: Path) -> tuple[np.ndarray, Rows]:
    """The node ids of a split file (.npy or .csv) and where each row is."""
    if path.suffix.lower() == ".csv":
        (idx,), rows = read_csv_columns(path, ["node"], ["id"])
        return idx, rows
    rows, a = Rows(path), read_npy(path)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    return int_column(a, path, "node id", rows, "id"), rows
