"""Reading arrays from a user's binary files (NPY, NPZ, Parquet), their declared sizes checked before any data is read.

A header (``.npy``), an archive's member record (``.npz``) or a footer (Parquet) that declares more data
than the file holds, or more than this machine's memory, is one :class:`~xmask_cli.errors.UsageError`
line, not an allocation. Files are opened as :mod:`xmask_cli.data.tables` opens them (regular files only,
no symbolic links); pickled objects are never read.
"""
from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from xmask_cli.data.tables import open_regular
from xmask_cli.errors import UsageError, first_line

__all__ = ["PARQUET_HINT", "declared_rows", "read_npy", "read_npz", "read_parquet_columns"]

#: What to do when Parquet is asked for and pyarrow is missing.
PARQUET_HINT = "reading Parquet needs pyarrow: pip install 'xmask-cli[parquet]' (or pip install pyarrow), or save it as .npz"

#: The most a deflated zip member can expand (deflate's ceiling is about 1032 : 1), plus room for a tiny one.
_DEFLATE_RATIO, _DEFLATE_SLACK = 1032, 1 << 10


def _npy_header(fh: IO[bytes], where: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data bytes the header declares)`` of the ``.npy`` stream at ``fh``.

    Only the header is read (``numpy.lib.format``): nothing is allocated for the data.

    Raises:
        UsageError: not a ``.npy`` header, or one declaring Python objects (pickles are never read).
    """
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
        else:  # 3.0 is written only for structured arrays with non-Latin-1 field names: never a numeric array
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not read; save a plain numeric array")
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{where}: not a readable .npy array ({first_line(exc)})") from None
    if dtype.hasobject:
        raise UsageError(f"{where}: the array holds Python objects (dtype {dtype}), which xmask never unpickles; "
                         f"save a numeric array")
    count = 1
    for d in shape:  # Python ints: a lying header cannot overflow the product
        count *= int(d)
    return tuple(int(d) for d in shape), bool(fortran), dtype, count * dtype.itemsize


def _size_mismatch(where: str, shape: tuple[int, ...], dtype: np.dtype, declared: int, present: int) -> UsageError:
    return UsageError(f"{where}: the header declares shape {list(shape)} of {dtype} ({declared:,} bytes) but "
                      f"{present:,} data bytes are there; the file is truncated or its header is wrong")


def read_npy(path: Path, *, follow_links: bool = False) -> np.ndarray:
    """The array of a ``.npy`` file (no pickled objects), its header checked against the file's size first.

    A header declaring more (or fewer) bytes than the file holds is refused before any memory is taken
    for the data: a 64-byte file claiming shape (10^11, 4) is one line, not a 1.5 TiB allocation.

    Raises:
        UsageError: not a ``.npy`` array, an object array, or a header that disagrees with the file's size.
    """
    with open_regular(path, follow_links=follow_links) as fh:
        size = os.fstat(fh.fileno()).st_size
        shape, _, dtype, declared = _npy_header(fh, str(path))
        present = size - fh.tell()
        if declared != present:
            raise _size_mismatch(str(path), shape, dtype, declared, present)
        fh.seek(0)
        try:
            return np.load(fh, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"{path}: not a readable .npy array ({first_line(exc)})") from None


def declared_rows(path: Path, member: str | None = None, *, follow_links: bool = False) -> int | None:
    """The row count (first dimension) ``path``'s own header declares, read without any of its data: a
    ``.npy`` header, the header of the ``.npz`` member ``member``, a Parquet footer.

    What lets a folder's files be compared before any is read. None where nothing is declared: a CSV, or an
    archive without ``member`` (its reader then names what is missing).

    Raises:
        UsageError: a file that is not of its format, or an object array.
    """
    ext = path.suffix.lower()
    if ext == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError(f"{path}: {PARQUET_HINT}") from None
        with open_regular(path) as fh:
            try:
                return int(pq.ParquetFile(fh).metadata.num_rows)
            except Exception as exc:  # pyarrow raises its own error types for a damaged file
                raise UsageError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None
    if ext not in (".npy", ".npz"):
        return None
    with open_regular(path, follow_links=follow_links) as fh:
        if ext == ".npy":
            size = os.fstat(fh.fileno()).st_size
            shape, _, dtype, declared = _npy_header(fh, str(path))
            if declared != size - fh.tell():  # a header that lies is named as such, not as a row count
                raise _size_mismatch(str(path), shape, dtype, declared, size - fh.tell())
        else:
            try:
                with zipfile.ZipFile(fh) as zf:
                    info = next((i for i in zf.infolist() if i.filename in (f"{member}.npy", member)), None)
                    if info is None:
                        return None
                    shape = _npz_member_shape(zf, info, f"{path} array {member}")
            except UsageError:
                raise
            except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError,
                    RuntimeError) as exc:
                raise UsageError(f"{path}: not a readable .npz archive ({first_line(exc)})") from None
    return shape[0] if shape else 1


def _npz_member_shape(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> tuple[int, ...]:
    """The shape one member of an ``.npz`` archive declares, its sizes checked; none of its data read.

    The zip's own record of the member (``file_size``, and for a deflated one the bytes it expands from)
    bounds the member's header, and the header must declare exactly the bytes the member holds.
    """
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise UsageError(f"{where}: the archive records {info.file_size:,} bytes for a stored member of "
                         f"{info.compress_size:,}; the archive is damaged")
    if info.compress_type == zipfile.ZIP_DEFLATED and \
            info.file_size > _DEFLATE_RATIO * info.compress_size + _DEFLATE_SLACK:
        raise UsageError(f"{where}: the archive records {info.file_size:,} bytes expanded from "
                         f"{info.compress_size:,} compressed ones, more than deflate can produce; the archive "
                         f"is damaged")
    with zf.open(info) as m:
        shape, _, dtype, declared = _npy_header(m, where)
        present = info.file_size - m.tell()
    if declared != present:
        raise _size_mismatch(where, shape, dtype, declared, present)
    return shape


def _npz_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> np.ndarray:
    """One member of an ``.npz`` archive, its declared sizes checked (:func:`_npz_member_shape`) before its data
    is read."""
    _npz_member_shape(zf, info, where)
    with zf.open(info) as m:
        return np.lib.format.read_array(m, allow_pickle=False)


def read_npz(path: Path, names: Sequence[str], optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Named arrays of a ``.npz`` file; every name in ``names`` must be there, ``optional`` ones may be.

    Each member's ``.npy`` header is checked against the size the archive records for it (see
    :func:`read_npy`) before the member's data is read.

    Raises:
        UsageError: not an npz archive, a required array missing, a pickled object array, or a member
            whose header disagrees with its size.
    """
    with open_regular(path) as fh:
        try:
            with zipfile.ZipFile(fh) as zf:
                # As numpy's NpzFile names members: "x.npy" is array x.
                members = {i.filename[:-4] if i.filename.endswith(".npy") else i.filename: i for i in zf.infolist()}
                missing = [n for n in names if n not in members]
                if missing:
                    raise UsageError(f"{path}: arrays {', '.join(names)} required"
                                     + (f" ({', '.join(optional)} optional)" if optional else "")
                                     + f"; it holds {', '.join(sorted(members)) or 'none'}")
                out = {}
                for n in (*names, *optional):
                    if n in members:
                        info = members[n]
                        if not info.filename.endswith(".npy"):
                            raise UsageError(f"{path}: member {info.filename} is not a .npy array")
                        out[n] = _npz_member(zf, info, f"{path} array {n}")
                return out
        except UsageError:
            raise
        except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError, NotImplementedError,
                RuntimeError) as exc:
            raise UsageError(f"{path}: not a readable .npz archive ({first_line(exc)})") from None


def read_parquet_columns(path: Path, names: Sequence[str] | None,
                         optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Columns of a Parquet file (``names`` required, ``optional`` if present; None: every column, in order).

    Raises:
        UsageError: pyarrow is not installed, the file does not read, a column is missing or holds nulls.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"{path}: {PARQUET_HINT}") from None
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            pf = pq.ParquetFile(fh)
        except Exception as exc:  # pyarrow raises its own error types for a damaged file
            raise UsageError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None
        _check_parquet_counts(pf.metadata, path, size)
        try:
            table = pf.read()
        except Exception as exc:
            raise UsageError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None
    have = list(table.column_names)
    if names is None:
        wanted = have
    else:
        lower = {h.lower(): h for h in have}
        missing = [n for n in names if n.lower() not in lower]
        if missing:
            raise UsageError(f"{path}: columns {', '.join(names)} required"
                             + (f" ({', '.join(optional)} optional)" if optional else "")
                             + f"; it has {', '.join(have) or 'none'}")
        wanted = [lower[n.lower()] for n in (*names, *optional) if n.lower() in lower]
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        column = table.column(name)
        if column.null_count:
            first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise UsageError(f"{path} row {first}: column {name} is empty (null)")
        try:
            values = column.to_numpy()
            # Arrow hands out read-only views; torch warns on those, so the caller gets its own copy.
            out[name.lower() if names is not None else name] = values if values.flags.writeable else values.copy()
        except Exception as exc:  # nested or non-numeric types
            raise UsageError(f"{path}: column {name} is not a plain numeric column ({first_line(exc)})") from None
    return out


def _memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _check_parquet_counts(md: Any, path: Path, size: int) -> None:
    """The row counts a Parquet footer declares, checked before pyarrow allocates for them.

    pyarrow sizes its buffers by each row group's declared row count: the counts must agree with each other
    (the file's total, each row group's, each flat column's value count), every column chunk must lie inside
    the file, and the decoded table (8 bytes a value at most for numeric columns) must fit this machine's memory.
    Compressed, dictionary- or run-length-encoded data can honestly hold many rows in few bytes, so the row
    count itself is not bounded by the file size.

    Raises:
        UsageError: counts that disagree, a chunk past the end of the file, or a table larger than memory.
    """
    groups = [md.row_group(i) for i in range(md.num_row_groups)]
    total = sum(int(g.num_rows) for g in groups)
    if total != int(md.num_rows):
        raise UsageError(f"{path}: the footer declares {int(md.num_rows):,} rows but its row groups hold "
                         f"{total:,}; the file is damaged")
    schema = md.schema
    for i, g in enumerate(groups):
        for j in range(g.num_columns):
            c = g.column(j)
            flat = schema.column(j).max_repetition_level == 0
            if flat and int(c.num_values) != int(g.num_rows):
                raise UsageError(f"{path}: row group {i} declares {int(g.num_rows):,} rows but column "
                                 f"{c.path_in_schema} holds {int(c.num_values):,} values; the file is damaged")
            start = min((int(o) for o in (c.dictionary_page_offset, c.data_page_offset) if o), default=0)
            if start + int(c.total_compressed_size) > size:
                raise UsageError(f"{path}: column {c.path_in_schema} of row group {i} declares "
                                 f"{int(c.total_compressed_size):,} bytes from offset {start:,}, past the end of "
                                 f"the {size:,}-byte file; the file is truncated or damaged")
    need, memory = total * max(1, md.num_columns) * 8, _memory_bytes()
    if memory is not None and need > memory:
        raise UsageError(f"{path}: declares {total:,} rows of {md.num_columns} columns "
                         f"(about {need / 2**30:,.1f} GiB decoded), more than this machine's "
                         f"{memory / 2**30:,.1f} GiB of memory")
