"""Reading a user's files: regular files only, CSV with a header row, errors that name file and row.

Files are opened without following symbolic links and only when they are
regular files: a dataset folder is the user's, and a link placed in it could
point anywhere. Every problem is a :class:`~xmask_cli.errors.UsageError` (exit 2)
whose one line names the file and, for a bad value, where it is: ``file:LINE``
for CSV (1-based line of the file, the header being its first line) and
``file row I`` for binary formats (0-based, the row's index in the array).

Example::

    (src, dst), rows = read_csv_columns(Path("g/edges.csv"), ["src", "dst"], ["id", "id"])

Binary formats (NPY, NPZ, Parquet) are read by :mod:`xmask_cli.data.binary_tables`, with the same
errors.
"""
from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from xmask_cli.errors import DataNotFoundError, UsageError
from xmask_cli.fs import NotRegularFile, open_regular_fd, sha256_of

__all__ = ["Rows", "merge_note", "open_regular", "check_regular", "not_regular", "file_kind", "file_digest",
           "read_csv_columns", "csv_header", "MIN_ID_BOUND", "ID_BOUND_FACTOR", "bounded_max_id", "MAX_FEATURE_NODES",
           "check_feature_nodes"]

#: Where nothing else gives the node count, node ids must lie below ``max(MIN_ID_BOUND, ID_BOUND_FACTOR * distinct
#: ids)``: the count is ``max id + 1``, so sparse huge ids would allocate memory for nodes that do not exist.
MIN_ID_BOUND = 1000
ID_BOUND_FACTOR = 10
#: The most nodes a graph may have when a features file alone says how many (a folder without labels, an edge
#: file's features): its header declares the count, and a wrong one would size the whole graph. The
#: environment's ``XMASK_MAX_NODES`` sets another bound.
MAX_FEATURE_NODES = 10_000_000


def check_feature_nodes(path: Path, rows: int) -> None:
    """Refuse (UsageError) a features file alone declaring more than :data:`MAX_FEATURE_NODES` (or
    ``XMASK_MAX_NODES``) rows, before it is read."""
    text = os.environ.get("XMASK_MAX_NODES", "").strip()
    if text and (not text.isdigit() or int(text) < 1):
        raise UsageError(f"XMASK_MAX_NODES={text!r}: expected a whole number of nodes >= 1")
    bound = int(text) if text else MAX_FEATURE_NODES
    if rows > bound:
        raise UsageError(f"{path}: declares {rows:,} rows, a graph of {rows:,} nodes, above the {bound:,} nodes a "
                         f"features file alone may give; check the file, or set XMASK_MAX_NODES={rows} if the graph "
                         f"is that large")


def merge_note(count: int, name: str, later: str, first: str) -> str:
    """The one log line for repeated rows merged into their first listing: ``merged 2 repeated rows of
    edges.csv; first: line 402 repeats line 2`` (``later`` / ``first``: where the first repeat and its original are)."""
    return f"merged {count} repeated row{'s' if count > 1 else ''} of {name}; first: {later} repeats {first}"


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for messages: ``a FIFO (named pipe)``, ``a socket``, ..."""
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "a special file"  # a door, an event port: what other systems have


def not_regular(path: Path | str, mode: int) -> UsageError:
    """The one-line error for a dataset file that is not a regular file (``mode``: its ``st_mode``)."""
    return UsageError(f"{path}: {file_kind(mode)}, not a regular file; xmask reads only regular files in a "
                      f"dataset folder")


def check_regular(path: Path | str, *, follow_links: bool = True) -> None:
    """Refuse ``path`` unless it is a regular file, without opening it (``os.stat`` never blocks on a FIFO).

    Raises:
        DataNotFoundError: nothing at ``path`` (or a link to nothing).
        UsageError: a FIFO, socket, device or folder at ``path`` (or, with ``follow_links=False``, a link).
    """
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except FileNotFoundError:
        raise DataNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)


def open_regular(path: Path | str, *, follow_links: bool = False) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file; by default never through a symbolic link.

    The open never blocks: a FIFO, socket or device planted under a dataset file's name is refused, not
    waited on. ``follow_links=True`` for files the user names or a data root's files (which may be links
    to another disk): the link's target must then be a regular file.

    Raises:
        DataNotFoundError: no such file.
        UsageError: a link (unless followed), a folder, a FIFO, a socket or a device sits at ``path``.
    """
    try:
        fd = open_regular_fd(path, follow_links=follow_links)
    except NotRegularFile as exc:
        raise not_regular(path, exc.mode) from None
    except FileNotFoundError:
        raise DataNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise UsageError(f"{path}: a symbolic link; xmask reads only regular files in a dataset folder "
                             f"(copy the file in)") from None
        if exc.errno == errno.ENXIO:  # a socket (or a device without its driver): never a regular file
            check_regular(path, follow_links=follow_links)
        raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def file_digest(path: Path) -> str:
    """sha256 of a regular file's bytes (streamed; links refused as in :func:`open_regular`)."""
    with open_regular(path) as fh:
        return sha256_of(fh)


@dataclass(frozen=True)
class Rows:
    """Names a data row of a file in messages: ``file:LINE`` (CSV) or ``file row I`` (binary formats).

    CSV line numbers are found only when a message needs one (a second read of the file).
    """

    path: Path
    csv: bool = False

    def at(self, row: int) -> str:
        """Where data row ``row`` (0-based, blank and comment lines not counted) is."""
        if not self.csv:
            return f"{self.path} row {int(row)}"
        return f"{self.path}:{_csv_line_of_row(self.path, int(row))}"

    def where(self, row: int) -> str:
        """Data row ``row`` within the file, without its name: ``line N`` (CSV) or ``row I``."""
        return f"line {_csv_line_of_row(self.path, int(row))}" if self.csv else f"row {int(row)}"


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every CSV line that is not empty or a ``#`` comment, header first.

    Exactly the lines numpy's ``loadtxt`` skips: a line of spaces, or a comment after spaces, is a row it
    refuses, so it is a row here too, and the scan names its line.
    """
    with open_regular(path) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig")  # -sig: a spreadsheet's BOM is not part of the header
        try:
            for i, line in enumerate(text, 1):
                text_line = line.rstrip("\r\n")
                if text_line and not text_line.startswith("#"):
                    yield i, text_line
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV") from None


def _csv_line_of_row(path: Path, row: int) -> int:
    for k, (line, _) in enumerate(_data_lines(path)):
        if k == row + 1:  # +1: the header
            return line
    return -1


def _fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",")]


def _parse(text: str, kind: str) -> str | None:
    """Why ``text`` is not a value of ``kind`` (``id``, ``label``, ``float``), or None if it is one."""
    if kind in ("id", "label"):
        try:
            v = int(text)
        except ValueError:
            return f"{text!r} is not an integer"
        if not -2**63 <= v < 2**63:
            return f"{v} does not fit a 64-bit integer"
        if kind == "id" and v < 0:
            return f"{v} is negative; node ids are 0-based"
        if kind == "label" and v < -1:
            return f"{v} is below -1; labels are 0..C-1, and -1 marks an unlabelled node"
        return None
    try:
        number = float(text)
    except ValueError:
        return f"{text!r} is not a number"
    return None if np.isfinite(number) else f"{text!r} is not finite (NaN or infinite)"


def _scan_for_error(path: Path, names: Sequence[str], kinds: Sequence[str]) -> UsageError:
    """The first bad line of a CSV that numpy refused, as a one-line error."""
    lines = _data_lines(path)
    next(lines)  # the header, already checked
    for line, text in lines:
        fields = _fields(text)
        if len(fields) != len(names):
            return UsageError(f"{path}:{line}: expected {len(names)} values ({','.join(names)}), got {len(fields)}")
        for name, kind, f in zip(names, kinds, fields):
            why = _parse(f, kind)
            if why is not None:
                return UsageError(f"{path}:{line}: {name} {why}")
    return UsageError(f"{path}: not a readable CSV table of {','.join(names)}")


def csv_header(path: Path) -> list[str]:
    """The header row (first non-blank, non-comment line) of a CSV, as stripped fields."""
    for _, text in _data_lines(path):
        return _fields(text)
    raise UsageError(f"{path}: empty file; expected a header row and one row per item")


def read_csv_columns(path: Path, names: Sequence[str] | None, kinds: Sequence[str]) -> tuple[list[np.ndarray], Rows]:
    """Columns of a comma-separated file with one header row, parsed by ``kinds``.

    Args:
        names: the header the file must have (case-insensitive), or None for any
            header (feature columns: any names, but not numbers).
        kinds: per column ``id`` (int >= 0), ``label`` (int >= -1) or ``float``
            (finite); one entry stands for every column.

    Raises:
        UsageError: wrong header, a row with the wrong number of values, a value that does not parse.
    """
    header = csv_header(path)
    if names is not None and [h.lower() for h in header] != [n.lower() for n in names]:
        raise UsageError(f"{path}:1: header row must be '{','.join(names)}', got '{','.join(header)}'")
    if names is None:
        if all(_parse(h, "float") is None for h in header):
            raise UsageError(f"{path}:1: the first row holds numbers, not column names; add a header row "
                             f"(any names, e.g. f0,f1,...)")
        names = header
    if len(kinds) == 1:
        kinds = list(kinds) * len(names)
    # One parse of the whole file: integers when every column is an id or label, else float64 (ids are then
    # checked to be whole numbers below).
    dtype = np.int64 if all(k != "float" for k in kinds) else np.float64
    with open_regular(path) as fh:
        try:
            table = np.loadtxt(io.TextIOWrapper(fh, encoding="utf-8-sig"), delimiter=",", comments="#",
                               skiprows=_header_skip(path), dtype=dtype, ndmin=2)
        except (ValueError, UnicodeDecodeError):
            raise _scan_for_error(path, names, kinds) from None
    if table.shape[0] == 0:
        raise UsageError(f"{path}: no data rows after the header")
    if table.shape[1] != len(names):
        raise _scan_for_error(path, names, kinds)
    rows = Rows(path, csv=True)
    out: list[np.ndarray] = []
    for j, (name, kind) in enumerate(zip(names, kinds)):
        col = table[:, j]
        if kind != "float" and col.dtype != np.int64:
            whole = np.isfinite(col) & (col == np.round(col))
            if not whole.all():
                bad = int(np.flatnonzero(~whole)[0])
                raise UsageError(f"{rows.at(bad)}: {name} {col[bad]!r} is not an integer")
            col = col.astype(np.int64)
        _check_values(col, kind, name, rows)
        out.append(np.ascontiguousarray(col))
    return out, rows


def _header_skip(path: Path) -> int:
    """Lines before and including the header (blank and comment lines above it included)."""
    for line, _ in _data_lines(path):
        return line
    return 0


def _check_values(col: np.ndarray, kind: str, name: str, rows: Rows) -> None:
    """Range and finiteness of a parsed column (numpy accepts 'nan', '-3')."""
    if kind == "float":
        bad = np.flatnonzero(~np.isfinite(col))
        if bad.size:
            raise UsageError(f"{rows.at(bad[0])}: {name} is not finite (NaN or infinite)")
    elif kind == "id":
        bad = np.flatnonzero(col < 0)
        if bad.size:
            raise UsageError(f"{rows.at(bad[0])}: {name} {int(col[bad[0]])} is negative; node ids are 0-based")
    elif kind == "label":
        bad = np.flatnonzero(col < -1)
        if bad.size:
            raise UsageError(f"{rows.at(bad[0])}: {name} {int(col[bad[0]])} is below -1; labels are 0..C-1, "
                             f"and -1 marks an unlabelled node")


def bounded_max_id(src: np.ndarray, dst: np.ndarray, where: Callable[[int], str], rule: str, remedy: str) -> int:
    """The largest node id of the edges ``src -> dst``, checked against :data:`MIN_ID_BOUND` / :data:`ID_BOUND_FACTOR`.

    Raises:
        UsageError: the id is at or above the bound: ``where(edge)`` names the edge holding it, ``rule`` (formatted
            with ``bound``) says which bound applies, ``remedy`` what to do besides renumbering.
    """
    top = int(max(src.max(), dst.max()))
    distinct = int(np.unique(np.concatenate([src, dst])).size)
    bound = max(MIN_ID_BOUND, ID_BOUND_FACTOR * distinct)
    if top >= bound:
        edge = int(np.argmax(np.maximum(src, dst)))
        raise UsageError(f"{where(edge)}: node id {top} is far above the {distinct} distinct ids"
                         f"{rule.format(bound=bound)}; renumber the nodes 0..{distinct - 1}, {remedy}")
    return top
