"""The cache's ``edge`` section: the loader's edge attributes laid out per pair of nodes, as ``/spd`` lays out
distances (``edge/indptr`` per node, ``edge/col``, ``edge/attr [S, C]``; attributes ``encoding``, ``dims``).

Nothing is derived: each pair carries the attribute row of one listed edge
(:func:`~xmask_cli.structure.edge_attrs.edge_pairs` says which). The parameters of a file holding the section
record the coding and a digest of the attributes, so the cache key changes with them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xmask_cli.config import StructureSection
from xmask_cli.data.graphset import GraphSet
from xmask_cli.errors import ConfigError, UsageError
from xmask_cli.structure.edge_attrs import EdgeCoding, attrs_digest, edge_coding, edge_pairs

__all__ = ["EdgeInputs", "edge_inputs", "no_edge_attr", "write_edge_section"]

#: Graphs laid out per append: bounds the memory of the pass whatever the dataset's size.
_GRAPHS_PER_STEP = 4096


class EdgeInputs:
    """A dataset's edge attributes (per graph ``[E_g, C]``, aligned with its ``edge_index``) and their coding."""

    def __init__(self, attrs: Sequence[np.ndarray], vocab: Sequence[int] = ()):
        self.attrs = [np.asarray(a) for a in attrs]
        self.coding: EdgeCoding = edge_coding(self.attrs, vocab)

    def params(self) -> dict[str, Any]:
        """What the cache key records of them: the coding and a digest of the values."""
        return {"encoding": self.coding.encoding, "dims": list(self.coding.dims), "digest": attrs_digest(self.attrs)}


def edge_inputs(graphs: GraphSet, cfg: StructureSection, required: bool,
                placeholder: bool = False) -> EdgeInputs | None:
    """The edge attributes ``prepare`` stores for ``cfg`` (None when ``structure.edge`` is off, or when the
    dataset has none and nothing reads them: ``prepare.compute: all`` then leaves the section out).

    Args:
        required: an ``edge`` bias reads them (:func:`~xmask_cli.prepare.needs.edge_readers`).
        placeholder: the architecture reads the edges themselves (``model.arch: gps``): a dataset without
            attributes stores one column of zeros (a vocabulary of one, which carries nothing).

    Raises:
        ConfigError: ``required`` but the loader gives no ``edge_attr``.
        UsageError: the attributes do not match the edge lists, or are negative integer codes.
    """
    if not cfg.edge.enabled:
        return None
    attrs = graphs.edge_attr()
    name = graphs.spec.name
    if attrs is None:
        if required:
            raise no_edge_attr(name)
        if not placeholder:
            return None
        attrs = [np.zeros((e.shape[1], 1), dtype=np.uint8) for e in graphs.edge_index]
    for g, (a, e) in enumerate(zip(attrs, graphs.edge_index)):
        if a.shape[0] != e.shape[1]:
            raise UsageError(f"{name}: graph {g} has {e.shape[1]} edges but {a.shape[0]} edge_attr rows")
    try:
        return EdgeInputs(attrs, graphs.edge_vocab())
    except ValueError as exc:
        raise UsageError(f"{name}: edge_attr: {exc}") from None


def no_edge_attr(dataset: str) -> ConfigError:
    """The error of an ``edge`` bias on a dataset whose loader gives no ``edge_attr``."""
    return ConfigError(f"model.biases: type 'edge' reads edge attributes, but {dataset}'s loader gives no "
                       f"edge_attr; remove the edge bias, or use a dataset with edge attributes (ogbg-mol*, MUTAG)")


def _small_int(coding: EdgeCoding, attr: np.ndarray) -> np.ndarray:
    """Index codes in the narrowest unsigned type that holds them; floats as float32."""
    if coding.encoding == "linear":
        return attr.astype(np.float32, copy=False)
    top = max(coding.dims)
    dtype = np.uint8 if top <= 1 << 8 else np.uint16 if top <= 1 << 16 else np.int32
    return attr.astype(dtype, copy=False)


def write_edge_section(w: Any, edge_index: Sequence[np.ndarray], num_nodes: np.ndarray, edges: EdgeInputs) -> None:
    """Append ``edge/{indptr,col,attr}`` of every graph to the writer ``w`` and set the section's attributes."""
    coding = edges.coding
    nn = np.asarray(num_nodes, dtype=np.int64)
    col_dtype = np.uint16 if int(nn.max(initial=0)) <= np.iinfo(np.uint16).max else np.int32
    w.append("edge/indptr", np.zeros(1, dtype=np.int64))
    total = 0
    for start in range(0, len(nn), _GRAPHS_PER_STEP):
        counts, cols, attrs = [], [], []
        for g in range(start, min(len(nn), start + _GRAPHS_PER_STEP)):
            c, col, a = edge_pairs(edge_index[g], edges.attrs[g], int(nn[g]))
            counts.append(c)
            cols.append(col)
            attrs.append(a)
        cnt = np.concatenate(counts)
        w.append("edge/indptr", total + np.cumsum(cnt))
        total += int(cnt.sum())
        w.append("edge/col", np.concatenate(cols).astype(col_dtype))
        w.append("edge/attr", _small_int(coding, np.concatenate(attrs).reshape(-1, coding.columns)))
    w.set_attrs("edge", encoding=coding.encoding, dims=np.asarray(coding.dims, dtype=np.int64))
