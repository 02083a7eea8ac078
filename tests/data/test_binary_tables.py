"""Reading a user's binary arrays: named NPZ arrays, NPY / NPZ / Parquet sizes checked before any data is read."""
from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.binary_tables import read_npy, read_npz, read_parquet_columns
from xmask_cli.data.tables import Rows
from xmask_cli.errors import UsageError


def test_npz_names_what_is_missing(tmp_path: Path) -> None:
    p = tmp_path / "edges.npz"
    np.savez(p, source=np.arange(3), dst=np.arange(3))
    with pytest.raises(UsageError, match=r"arrays src, dst required \(weight optional\); it holds dst, source"):
        read_npz(p, ["src", "dst"], ["weight"])
    np.savez(p, src=np.arange(3), dst=np.arange(3))
    assert set(read_npz(p, ["src", "dst"], ["weight"])) == {"src", "dst"}


def test_parquet_null_names_the_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq  # the test extra installs it
    p = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"label": pa.array([0, 1, None, 2])}), p)
    with pytest.raises(UsageError, match=rf"^{p} row 2: column label is empty"):
        read_parquet_columns(p, ["label"])
    assert Rows(p).at(5) == f"{p} row 5"


def test_parquet_columns_are_writable(tmp_path: Path) -> None:
    """Arrow's arrays are read-only views; torch warns when it wraps one, so the reader hands out copies."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # the test extra installs it

    p = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"label": pa.array([0, 1, 2])}), p)
    (labels,) = read_parquet_columns(p, ["label"]).values()
    assert labels.flags.writeable and labels.tolist() == [0, 1, 2]


# ------------------------------------------------------------------ .npy / .npz headers against the bytes there
def _header(shape: tuple[int, ...], descr: str = "<f4", version: tuple[int, int] = (1, 0)) -> bytes:
    buf = io.BytesIO()
    write = np.lib.format.write_array_header_1_0 if version == (1, 0) else np.lib.format.write_array_header_2_0
    write(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_npy_arrays_read_back_exactly(tmp_path: Path) -> None:
    """Honest files of every layout numpy writes read back equal (C and Fortran order, a 2.0 header, empty)."""
    p = tmp_path / "a.npy"
    rng = np.random.default_rng(0)
    for a in (rng.normal(size=(7, 3)).astype(np.float32), np.asfortranarray(rng.integers(0, 9, (4, 5))),
              np.zeros((0, 4)), np.arange(5, dtype=">i2")):
        np.save(p, a)
        got = read_npy(p)
        assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
    a = rng.normal(size=(3, 2))
    with open(p, "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    assert np.array_equal(read_npy(p), a)


@pytest.mark.parametrize("shape, data, descr", [((10**11, 4), 64, "<f4"), ((5, 3), 59, "<f4"), ((5, 3), 61, "<f4"),
                                                ((2**40, 2**40), 8, "<f8"), ((4,), 0, "<i8")])
def test_npy_header_disagreeing_with_the_file_is_named(tmp_path: Path, shape: tuple[int, ...], data: int,
                                                       descr: str) -> None:
    p = tmp_path / "a.npy"
    p.write_bytes(_header(shape, descr) + b"\1" * data)
    declared = int(np.prod(shape, dtype=object)) * np.dtype(descr).itemsize
    with pytest.raises(UsageError) as err:
        read_npy(p)
    assert str(err.value) == (f"{p}: the header declares shape {list(shape)} of {np.dtype(descr)} ({declared:,} "
                              f"bytes) but {data:,} data bytes are there; the file is truncated or its header is wrong")


def test_npy_that_is_not_one(tmp_path: Path) -> None:
    p = tmp_path / "a.npy"
    for body, why in ((b"", "not a readable .npy array"), (b"\x93NUMPY\x01\x00garbage", "not a readable .npy array"),
                      (b"hello world, not numpy", "not a readable .npy array"),
                      (_header((2,), "|O"), "holds Python objects")):
        p.write_bytes(body)
        with pytest.raises(UsageError, match=why):
            read_npy(p)


def _patch_zip_size(path: Path, member: str, size: int) -> None:
    """Make the zip's local and central records of ``member`` claim ``size`` uncompressed bytes."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = data.find(sig)
        while i >= 0:
            name_at = i + (30 if sig == b"PK\x03\x04" else 46)
            if data[name_at:name_at + len(name)] == name:
                data[i + at:i + at + 4] = struct.pack("<I", size)
            i = data.find(sig, i + 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_members_are_checked_before_their_data_is_read(tmp_path: Path, compression: int) -> None:
    p = tmp_path / "f.npz"
    good = np.arange(12, dtype=np.float32).reshape(4, 3)
    buf = io.BytesIO()
    np.save(buf, good)
    lying = _header((10**11, 4)) + b"\0" * 64
    with zipfile.ZipFile(p, "w", compression=compression) as z:
        z.writestr("x.npy", buf.getvalue())
        z.writestr("y.npy", lying)
    assert np.array_equal(read_npz(p, ["x"])["x"], good)
    with pytest.raises(UsageError, match=rf"^{p} array y: the header declares shape \[100000000000, 4\] of float32 "
                                         r"\(1,600,000,000,000 bytes\) but 64 data bytes are there"):
        read_npz(p, ["x"], ["y"])
    # The archive's own record of a member's size lies (2^31 bytes from a few hundred).
    _patch_zip_size(p, "x.npy", 2**31)
    why = "for a stored member of" if compression == zipfile.ZIP_STORED else "more than deflate can produce"
    with pytest.raises(UsageError, match=rf"^{p} array x: the archive records 2,147,483,648 bytes .*{why}"):
        read_npz(p, ["x"])


def test_npz_savez_and_savez_compressed_read_back(tmp_path: Path) -> None:
    p = tmp_path / "f.npz"
    rng = np.random.default_rng(1)
    arrays = {"src": rng.integers(0, 50, 40), "w": rng.normal(size=40), "x": np.asfortranarray(rng.normal(size=(6, 2)))}
    for save in (np.savez, np.savez_compressed):
        save(p, **arrays)
        got = read_npz(p, ["src", "x"], ["w", "absent"])
        assert set(got) == {"src", "x", "w"} and all(np.array_equal(got[k], arrays[k]) for k in got)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _parquet_claiming(path: Path, which: int, rows: int) -> None:
    """Rewrite the footer of the 3-row Parquet file ``path`` so that its ``which``-th i64 field holding 3 (thrift
    compact: field delta 1, type i64, zigzag varint 6) holds ``rows`` instead."""
    data = path.read_bytes()
    n = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - n:-8]
    at = [i for i in range(len(footer) - 1) if footer[i:i + 2] == b"\x16\x06"][which]
    footer = footer[:at] + b"\x16" + _varint(2 * rows) + footer[at + 2:]
    path.write_bytes(data[:-8 - n] + footer + struct.pack("<I", len(footer)) + b"PAR1")


def test_parquet_row_counts_are_checked_before_reading(tmp_path: Path) -> None:
    """A footer whose row group claims 10^11 rows over 3 values is refused from its metadata (pyarrow would
    allocate 256 GiB for it); so is a file total that its row groups do not add up to."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # the test extra installs it

    p = tmp_path / "f.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]}), p)
    assert read_parquet_columns(p, ["a", "b"])["a"].tolist() == [1, 2, 3]
    honest = p.read_bytes()
    _parquet_claiming(p, -1, 10**11)  # the last such field: the row group's num_rows
    _parquet_claiming(p, 0, 10**11)  # the first: the file's num_rows, so that the two agree
    md = pq.ParquetFile(p).metadata
    assert md.num_rows == md.row_group(0).num_rows == 10**11  # the patch did what it says
    with pytest.raises(UsageError, match=rf"^{p}: row group 0 declares 100,000,000,000 rows but column a holds 3 "
                                         r"values; the file is damaged$"):
        read_parquet_columns(p, ["a", "b"])
    p.write_bytes(honest)
    _parquet_claiming(p, 0, 10**11)  # the file's num_rows alone
    assert pq.ParquetFile(p).metadata.num_rows == 10**11
    with pytest.raises(UsageError, match=rf"^{p}: the footer declares 100,000,000,000 rows but its row groups hold 3"):
        read_parquet_columns(p, None)
