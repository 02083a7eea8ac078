"""Load a user's edge-attribute file for edge regression.

Format
------

The edge file is a delimited text file with a **header row**:

* ``.csv``: comma separated; ``.tsv``: tab separated; ``.txt``: any run of
  whitespace (the delimiter follows the extension, nothing is guessed).
* Columns ``src,dst,<target1>[,<target2>...]``: the first two are named
  ``src`` and ``dst`` (case-insensitive), at least one target column follows,
  and target names are unique.
* Every data row has exactly as many fields as the header. ``src`` and
  ``dst`` are integer node ids ``>= 0``; targets are finite numbers.
* Blank lines and lines starting with ``#`` are skipped.
* Edges are undirected: ``(u, v)`` and ``(v, u)`` are the same pair, and a
  pair has one target row (each row is one prediction target). A row repeated
  exactly (same ``src``, ``dst`` and targets) is merged into its first listing
  (one log line counts them); the same pair with other targets, or listed in
  the other direction, is refused naming both lines. A self loop ``(u, u)`` is
  allowed as a target; it adds nothing to the structure.

The node count is ``max id + 1``, or the row count of the features file when
one is given (extra rows are isolated nodes). Without a features file, ids
must lie below ``max(1000, 10 x the number of distinct ids)``: a 10-row file
naming node 10^8 is refused (exit 2) instead of allocating gigabytes; a ``.npy`` features file may
declare at most :data:`~xmask_cli.data.tables.MAX_FEATURE_NODES` rows (``XMASK_MAX_NODES``), checked
from its header before it is read. The optional features file is
a ``.npy`` array ``[N, F]`` (``[N]`` is read as ``[N, 1]``) or a ``.csv``
without header, one row per node, comma separated.

Every problem raises :class:`~xmask_cli.errors.UsageError` (exit 2), or
:class:`~xmask_cli.errors.DataNotFoundError` (exit 3) for a missing file,
with one line naming the file and, for a bad row, its line number
(1-based, the header being line 1).

Example::

    data = load_edge_file("bonds.csv", features_path="atoms.npy")
    data.edge_index   # [2, E] int64, one column per row of the file
    data.targets      # [E, T] float32, columns named data.target_names
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xmask_cli.data.binary_tables import declared_rows, read_npy
from xmask_cli.data.tables import (
    ID_BOUND_FACTOR,
    MIN_ID_BOUND,
    bounded_max_id,
    check_feature_nodes,
    check_regular,
    merge_note,
    open_regular,
)
from xmask_cli.errors import DataNotFoundError, UsageError
from xmask_cli.fs import sha256_of

__all__ = ["EdgeData", "load_edge_file", "file_sha256", "DELIMITERS"]

#: Extension -> delimiter (None: any whitespace).
DELIMITERS: dict[str, str | None] = {".csv": ",", ".tsv": "\t", ".txt": None}


@dataclass(frozen=True, eq=False)
class EdgeData:
    """An edge-regression data set read by :func:`load_edge_file`.

    Attributes:
        edge_index: ``[2, E]`` int64 ``(src, dst)`` of each row, in file order.
        targets: ``[E, T]`` float32 targets of each row.
        num_nodes: ``N``.
        x: ``[N, F]`` float32 node features, or None without a features file.
        target_names: the ``T`` target column names.
        path, features_path: the files read (``features_path`` None without one).
        sha256, features_sha256: content hashes of those files, for the run config.
        merged_rows: rows that repeated an earlier row exactly (same ``src``, ``dst`` and targets), merged.
        notes: log lines for the caller (how many rows were merged, and the first).
    """

    edge_index: np.ndarray
    targets: np.ndarray
    num_nodes: int
    x: np.ndarray | None
    target_names: tuple[str, ...]
    path: str = ""
    features_path: str | None = None
    sha256: str = ""
    features_sha256: str | None = None
    merged_rows: int = 0
    notes: tuple[str, ...] = ()

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (streamed): identifies the data in a run config."""
    with open_regular(Path(path), follow_links=True) as f:  # the file the user named, links included
        return sha256_of(f)


def _existing(path: str | os.PathLike, what: str) -> Path:
    """``path`` if a regular file is there (through links: the user named it), checked without opening it.

    Raises:
        DataNotFoundError: nothing there.
        UsageError: a FIFO, socket, device or folder there (a FIFO would block the read forever).
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise DataNotFoundError(f"{what} {p} not found; check the path "
                                f"(read as given, relative to the current directory)")
    check_regular(p)
    return p


def _rows(path: Path, delimiter: str | None) -> list[tuple[int, list[str]]]:
    """``(line number, fields)`` of every non-blank, non-comment line."""
    try:
        with open_regular(path, follow_links=True) as fh:
            text = fh.read().decode("utf-8-sig")  # -sig: a BOM from spreadsheet exports is not part of 'src'
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV/TSV") from exc
    def fields(line: str) -> list[str]:
        if delimiter is None:  # whitespace-separated
            return line.split()
        # One line at a time keeps the line number exact; quoted fields with newlines are not supported.
        return [f.strip() for f in next(csv.reader([line], delimiter=delimiter))]

    return [(i, fields(line)) for i, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def _parse_id(text: str, path: Path, line: int, column: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{path}:{line}: {column} {text!r} is not an integer node id") from None
    if value < 0:
        raise UsageError(f"{path}:{line}: {column} {value} is negative; node ids must be >= 0")
    return value


def _parse_target(text: str, path: Path, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{path}:{line}: target {column!r} value {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{path}:{line}: target {column!r} value {text!r} is not finite")
    return value


def _load_features(path: Path) -> np.ndarray:
    """``[N, F]`` float32 features from ``.npy`` or a header-less ``.csv``."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        declared = declared_rows(path, follow_links=True)
        if declared is not None:  # the features alone give the node count: bounded before the file is read
            check_feature_nodes(path, declared)
        x = read_npy(path, follow_links=True)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise UsageError(f"{path}: features must be a [N, F] array, got shape {list(x.shape)}")
        try:
            x = x.astype(np.float32)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{path}: features must be numeric, got dtype {x.dtype}") from exc
        if not np.isfinite(x).all():
            raise UsageError(f"{path}: features contain NaN or infinite values")
        return x
    if suffix == ".csv":
        rows = _rows(path, ",")
        if not rows:
            raise UsageError(f"{path}: no feature rows")
        width = len(rows[0][1])
        out = np.empty((len(rows), width), dtype=np.float32)
        for r, (line, fields) in enumerate(rows):
            if len(fields) != width:
                raise UsageError(f"{path}:{line}: expected {width} feature values (as on line {rows[0][0]}), "
                                 f"got {len(fields)}")
            for c, f in enumerate(fields):
                try:
                    out[r, c] = float(f)
                except ValueError:
                    raise UsageError(f"{path}:{line}: feature value {f!r} is not a number "
                                     f"(the features file has no header row)") from None
                if not math.isfinite(out[r, c]):
                    raise UsageError(f"{path}:{line}: feature value {f!r} is not finite")
        return out
    raise UsageError(f"{path}: unknown features extension {path.suffix!r}; use .npy [N, F] or a header-less .csv")


def load_edge_file(path: str | os.PathLike, features_path: str | os.PathLike | None = None) -> EdgeData:
    """Read an edge-attribute file (and optional node features); see the module docstring for the format.

    Validates everything up front so that a bad file fails before any
    structure is computed, with the file and line to fix.

    Raises:
        DataNotFoundError: a file does not exist.
        UsageError: unknown extension, missing header, bad row, a pair given twice with other targets or in
            both directions,
            no rows, features with fewer rows than ``max id + 1``, or (without
            features) ids above the bound in the module docstring.
    """
    p = _existing(path, "edge file")
    suffix = p.suffix.lower()
    if suffix not in DELIMITERS:
        raise UsageError(f"{p}: unknown edge-file extension {p.suffix!r}; use .csv (comma), .tsv (tab) "
                         f"or .txt (whitespace)")
    rows = _rows(p, DELIMITERS[suffix])
    names = _target_names(p, rows)
    edges = _edge_rows(p, rows, names)
    notes: tuple[str, ...] = ()
    if edges.merged:
        notes = (merge_note(len(edges.merged), p.name, f"line {edges.merged[0][0]}", f"line {edges.merged[0][1]}"),)
    x, fpath, fsha = None, None, None
    if features_path is None:
        num_nodes = _bounded_node_count(p, edges)
    else:
        fp = _existing(features_path, "features file")
        x = _features_for(fp, p, edges)
        num_nodes = int(x.shape[0])
        fpath, fsha = str(fp), file_sha256(fp)
    return EdgeData(edge_index=np.stack([edges.src, edges.dst]), targets=edges.targets.astype(np.float32),
                    num_nodes=num_nodes, x=x, target_names=names, path=str(p), features_path=fpath,
                    sha256=file_sha256(p), features_sha256=fsha, merged_rows=len(edges.merged), notes=notes)


def _target_names(p: Path, rows: list[tuple[int, list[str]]]) -> tuple[str, ...]:
    """The target columns' names, from the header row ``src,dst,<target>...`` (checked, as is one edge row)."""
    if not rows:
        raise UsageError(f"{p}: empty file; expected a header row 'src,dst,<target>...' and one row per edge")
    header_line, header = rows[0]
    if len(header) < 3 or header[0].lower() != "src" or header[1].lower() != "dst":
        raise UsageError(f"{p}:{header_line}: header row required: 'src,dst,<target1>[,<target2>...]', "
                         f"got {','.join(header)!r}")
    names = tuple(header[2:])
    if any(not n for n in names) or len(set(names)) != len(names):
        raise UsageError(f"{p}:{header_line}: target column names must be non-empty and unique, got {list(names)}")
    if len(rows) == 1:
        raise UsageError(f"{p}: no edge rows after the header")
    return names


@dataclass
class _EdgeRows:
    """The edge rows of a file as parsed: one per pair, and the lines they came from."""

    src: np.ndarray
    dst: np.ndarray
    targets: np.ndarray  # [E, targets] float64
    kept_lines: list[int]  # the file line of each kept row
    merged: list[tuple[int, int]]  # (line, line it repeats)


def _edge_rows(p: Path, rows: list[tuple[int, list[str]]], names: tuple[str, ...]) -> _EdgeRows:
    """Parse the rows after the header; a pair given again with the same targets is merged into its first row.

    Raises:
        UsageError: a row with the wrong width or a bad field, a pair given in both directions, or again with
            other targets.
    """
    header = rows[0][1]
    width = len(header)
    src = np.empty(len(rows) - 1, dtype=np.int64)
    dst = np.empty(len(rows) - 1, dtype=np.int64)
    targets = np.empty((len(rows) - 1, len(names)), dtype=np.float64)
    seen: dict[tuple[int, int], tuple[int, int, int]] = {}  # pair -> (line, src, index in the arrays)
    merged: list[tuple[int, int]] = []
    r = 0
    for line, fields in rows[1:]:
        if len(fields) != width:
            raise UsageError(f"{p}:{line}: expected {width} columns ({','.join(header)}), got {len(fields)}")
        u = _parse_id(fields[0], p, line, "src")
        v = _parse_id(fields[1], p, line, "dst")
        values = [_parse_target(fields[2 + c], p, line, name) for c, name in enumerate(names)]
        pair = (min(u, v), max(u, v))
        if pair in seen:
            first_line, first_src, at = seen[pair]
            if first_src != u:  # the other direction: a second target row for the pair
                raise UsageError(f"{p}:{line}: pair ({u}, {v}) already given on line {first_line} as ({v}, {u}); "
                                 f"edges are undirected and each pair may appear once")
            if list(targets[at]) != values:
                here = ", ".join(f"{t:g}" for t in values)
                there = ", ".join(f"{t:g}" for t in targets[at])
                raise UsageError(f"{p}:{line}: edge ({u}, {v}) repeats line {first_line} with other targets "
                                 f"({here} here, {there} there); each pair has one target row (a repeat with the "
                                 f"same targets is merged)")
            merged.append((line, first_line))  # the same row again: the same target, merged into the first
            continue
        seen[pair] = (line, u, r)
        src[r], dst[r] = u, v
        targets[r] = values
        r += 1
    kept_lines = [ln for ln, _, _ in sorted(seen.values(), key=lambda t: t[2])]
    return _EdgeRows(src[:r], dst[:r], targets[:r], kept_lines, merged)


def _bounded_node_count(p: Path, edges: _EdgeRows) -> int:
    """Nodes of a file without features: every id up to the largest, which must lie below the id bound."""
    # Every id up to the largest becomes a node: a 10-row file naming node 10^8 would allocate gigabytes.
    max_id = bounded_max_id(edges.src, edges.dst, lambda edge: f"{p}:{edges.kept_lines[edge]}",
                            f" in the file (without a features file ids must lie below max({MIN_ID_BOUND}, "
                            f"{ID_BOUND_FACTOR} x distinct ids) = {{bound}})",
                            "or give edge.features with one row per node id")
    return max_id + 1


def _features_for(fp: Path, p: Path, edges: _EdgeRows) -> np.ndarray:
    """The features file's rows, which must cover every node id the edge file ``p`` names."""
    max_id = int(max(edges.src.max(), edges.dst.max()))
    x = _load_features(fp)
    if x.shape[0] < max_id + 1:
        worst = int(np.argmax(np.maximum(edges.src, edges.dst)))
        raise UsageError(f"{fp}: {x.shape[0]} feature rows but {p}:{edges.kept_lines[worst]} uses node id {max_id}; "
                         f"need one row per node id 0..{max_id}")
    return x
