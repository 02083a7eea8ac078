"""Reading a user's arrays: regular files only, CSV line numbers as the file counts them, named NPZ arrays."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.tables import Rows, file_digest, open_regular, read_csv_columns, read_npz, read_parquet_columns
from xmask_cli.errors import DataNotFoundError, UsageError


def test_csv_columns_and_line_numbers(tmp_path: Path) -> None:
    p = tmp_path / "e.csv"
    # A BOM, a comment above the header, blank and comment lines between rows: line numbers are the file's.
    p.write_text("\ufeff# made by hand\nsrc,dst,weight\n0,1,0.5\n\n# note\n2,3,1e1\n4,5,nan\n", encoding="utf-8")
    with pytest.raises(UsageError, match=rf"^{p}:7: weight is not finite"):
        read_csv_columns(p, ["src", "dst", "weight"], ["id", "id", "float"])
    p.write_text("\ufeff# made by hand\nsrc,dst,weight\n0,1,0.5\n\n# note\n2,3,1e1\n", encoding="utf-8")
    (src, dst, w), rows = read_csv_columns(p, ["SRC", "dst", "weight"], ["id", "id", "float"])
    assert src.tolist() == [0, 2] and dst.tolist() == [1, 3] and w.tolist() == [0.5, 10.0]
    assert src.dtype == np.int64 and rows.at(1) == f"{p}:6"


@pytest.mark.parametrize("body, why", [("0,1\n1\n", ":3: expected 2 values"), ("0,1\n1,2,3\n", ":3: expected 2 values"),
                                       ("0,1\n1,2.5\n", ":3: dst '2.5' is not an integer"),
                                       # numpy refuses a line of spaces or an indented comment: the line is named
                                       ("0,1\n   \n1,2\n", ":3: expected 2 values"),
                                       ("0,1\n  # note\n1,2\n", ":3: expected 2 values"),
                                       ("0,1\n99999999999999999999,2\n", ":3: src 99999999999999999999 does not fit")])
def test_csv_rows_that_do_not_fit(tmp_path: Path, body: str, why: str) -> None:
    p = tmp_path / "e.csv"
    p.write_text("src,dst\n" + body)
    with pytest.raises(UsageError, match=f"^{p}{why}"):
        read_csv_columns(p, ["src", "dst"], ["id"])


def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    real = tmp_path / "real.npy"
    np.save(real, np.arange(3))
    (tmp_path / "link.npy").symlink_to(real)
    with pytest.raises(UsageError, match="a symbolic link"):
        open_regular(tmp_path / "link.npy")
    with pytest.raises(UsageError, match="a symbolic link"):
        file_digest(tmp_path / "link.npy")
    os.mkfifo(tmp_path / "fifo.npy")
    with pytest.raises(UsageError, match="not a regular file"):
        open_regular(tmp_path / "fifo.npy")
    with pytest.raises(DataNotFoundError):
        open_regular(tmp_path / "absent.npy")
    import hashlib

    assert file_digest(real) == hashlib.sha256(real.read_bytes()).hexdigest()


def test_npz_names_what_is_missing(tmp_path: Path) -> None:
    p = tmp_path / "edges.npz"
    np.savez(p, source=np.arange(3), dst=np.arange(3))
    with pytest.raises(UsageError, match=r"arrays src, dst required \(weight optional\); it holds dst, source"):
        read_npz(p, ["src", "dst"], ["weight"])
    np.savez(p, src=np.arange(3), dst=np.arange(3))
    assert set(read_npz(p, ["src", "dst"], ["weight"])) == {"src", "dst"}


def test_parquet_null_names_the_row(tmp_path: Path) -> None:
    import pyarrow as pa, pyarrow.parquet as pq  # the test extra installs it
    p = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"label": pa.array([0, 1, None, 2])}), p)
    with pytest.raises(UsageError, match=rf"^{p} row 2: column label is empty"):
        read_parquet_columns(p, ["label"])
    assert Rows(p).at(5) == f"{p} row 5"


def test_parquet_columns_are_writable(tmp_path: Path) -> None:
    """Arrow's arrays are read-only views; torch warns when it wraps one, so the reader hands out copies."""
    import pyarrow as pa, pyarrow.parquet as pq  # the test extra installs it

    p = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"label": pa.array([0, 1, 2])}), p)
    (labels,) = read_parquet_columns(p, ["label"]).values()
    assert labels.flags.writeable and labels.tolist() == [0, 1, 2]
