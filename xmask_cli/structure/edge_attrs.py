"""Edge attributes as per-pair values: which pair of nodes carries which edge's attributes, and how they are coded.

The learned ``edge`` bias (:mod:`xmask_cli.model.biases.edge`) reads, for an ordered pair ``(i, j)``, the
attributes of the edge joining them; this module lays a graph's ``edge_attr`` (the loader's, row ``e``
belonging to column ``e`` of ``edge_index``) out as such pairs, and decides from the data's dtype how the
bias encodes them (:class:`EdgeCoding`).

Pairs follow the structure's convention (graphs are symmetrized): an edge listed ``s -> d`` gives the pair
``(s, d)`` its attributes, and ``(d, s)`` too unless an edge ``d -> s`` is listed, whose own attributes the pair
then carries (so a dataset listing both directions with different attributes keeps each direction's). When a
pair is listed more than once, the first listing wins. Self loops are dropped: the diagonal gets no edge term.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ENCODINGS", "EdgeCoding", "edge_coding", "edge_pairs", "attrs_digest"]

#: ``index``: integer-coded columns, one learned table per column, summed; ``linear``: float columns, a linear map.
ENCODINGS = ("index", "linear")


@dataclass(frozen=True)
class EdgeCoding:
    """How the ``edge`` bias encodes a dataset's edge attributes.

    Attributes:
        encoding: ``index`` (integer attributes: column ``c`` indexes a table of ``dims[c]`` rows) or
            ``linear`` (float attributes: ``dims == (columns,)``, a linear map of the row).
        dims: per column the vocabulary size (``index``), or the column count alone (``linear``).
    """

    encoding: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"edge encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        dims = tuple(int(d) for d in self.dims)
        if not dims or min(dims) < 1 or (self.encoding == "linear" and len(dims) != 1):
            what = "one column count" if self.encoding == "linear" else "one vocabulary size per column"
            raise ValueError(f"edge dims must be positive ({what}), got {list(self.dims)}")
        object.__setattr__(self, "dims", dims)

    @property
    def columns(self) -> int:
        """Attribute columns per edge."""
        return len(self.dims) if self.encoding == "index" else self.dims[0]


def edge_coding(attrs: Sequence[np.ndarray], vocab: Sequence[int] = ()) -> EdgeCoding:
    """The coding of per-graph ``[E_g, C]`` attributes, decided by their dtype.

    Integer (or boolean) attributes are ``index`` coded, each column's vocabulary the larger of ``vocab[c]``
    (a known vocabulary, e.g. OGB's bond features) and the data's largest value + 1; floats are ``linear``.

    Raises:
        ValueError: no graph, columns differing between graphs, or a negative integer code.
    """
    if not len(attrs):
        raise ValueError("edge attributes of no graph")
    cols = {a.shape[1] for a in attrs}
    if len(cols) != 1:
        raise ValueError(f"edge attributes have {sorted(cols)} columns in different graphs")
    width = cols.pop()
    if width < 1:
        raise ValueError("edge attributes have no column")
    kind = np.result_type(*[a.dtype for a in attrs]).kind
    if kind not in "biu":
        return EdgeCoding("linear", (width,))
    top = np.full(width, -1, dtype=np.int64)
    low = 0
    for a in attrs:
        if a.shape[0]:
            top = np.maximum(top, a.max(axis=0).astype(np.int64))
            low = min(low, int(a.min()))
    if low < 0:
        raise ValueError(f"integer edge attributes must be codes >= 0, found {low}")
    known = list(vocab)[:width] + [0] * max(0, width - len(vocab))
    return EdgeCoding("index", tuple(max(int(k), int(t) + 1, 1) for k, t in zip(known, top)))


def edge_pairs(edge_index: np.ndarray, attr: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(counts [n], col [S], attr [S, C])``: graph-local pairs carrying an edge's attributes, row-major.

    ``counts[i]`` pairs have row ``i``; within a row, columns ascend. See the module docstring for which
    edge a pair takes its attributes from.
    """
    src, dst = np.asarray(edge_index[0], dtype=np.int64), np.asarray(edge_index[1], dtype=np.int64)
    keep = src != dst
    src, dst, idx = src[keep], dst[keep], np.flatnonzero(keep)
    n = int(num_nodes)
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    # Listed directions first (in listing order), then the reverse of each edge, for pairs not listed.
    rank = np.arange(rows.size, dtype=np.int64)
    order = np.lexsort((rank, rows * n + cols))
    keys = (rows * n + cols)[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    chosen = order[first]
    source = np.concatenate([idx, idx])[chosen]
    return (np.bincount(rows[chosen], minlength=n).astype(np.int64), cols[chosen],
            np.asarray(attr)[source])


def attrs_digest(attrs: Sequence[np.ndarray]) -> str:
    """sha256 of the attributes (shapes, dtype and values, in order): part of the cache key of a file holding them."""
    h = hashlib.sha256()
    for a in attrs:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()
