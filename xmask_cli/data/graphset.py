"""A dataset's graphs as plain arrays (:class:`GraphSet`), what its node features are, and its content hash."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.data.spec import DatasetSpec


@dataclass
class GraphSet:
    """The graphs of one dataset as plain arrays, plus the loaded PyG dataset.

    Attributes:
        spec: registry entry.
        edge_index: list of ``[2, E_g]`` int64 arrays with graph-local node ids,
            in the direction the dataset stores them.
        num_nodes: node count per graph.
        source: folder the raw files were read from.
        dataset: the PyG / OGB dataset object (features and labels for training).
        content: digest of every file read, for datasets whose files hold more than the
            structure (a user's folder): part of :meth:`fingerprint`, so changing any file
            changes the cache key. None for registry datasets.
        merged_edge_rows: repeated ``(src, dst)`` rows of a user's edges file merged into their first
            listing (0 for registry datasets); ``prepare`` records it in the cache.
        notes: log lines about how the files were read (rows merged, a weight column not used), for the
            caller's log (stderr for the CLI).
    """

    spec: DatasetSpec
    edge_index: list[np.ndarray]
    num_nodes: np.ndarray
    source: Path
    dataset: Any
    content: str | None = None
    merged_edge_rows: int = 0
    notes: tuple[str, ...] = ()

    @property
    def num_graphs(self) -> int:
        return len(self.edge_index)

    def fingerprint(self) -> str:
        """sha256 of the graphs' structure (node counts and edge lists, in order), and of :attr:`content`."""
        fp = graphs_fingerprint(self.edge_index, self.num_nodes)
        return fp if self.content is None else hashlib.sha256(f"{fp}:{self.content}".encode()).hexdigest()

    def edge_attr(self) -> list[np.ndarray] | None:
        """The loader's ``edge_attr`` per graph (``[E_g, C]``, row ``e`` for column ``e`` of :attr:`edge_index`),
        as the dataset stores it; None when it has none (NCI1, PROTEINS, a user's folder)."""
        return graph_edge_attrs(self.dataset)

    def edge_vocab(self) -> tuple[int, ...]:
        """A known vocabulary of integer edge attributes: OGB's bond features for the ``ogbg`` molecule sets
        (``ogb.utils.features.get_bond_feature_dims``), else none (the data's own codes decide)."""
        if self.spec.family != "ogbg" or not self.spec.name.startswith("ogbg-mol"):
            return ()
        from ogb.utils.features import get_bond_feature_dims

        return tuple(int(d) for d in get_bond_feature_dims())

    def has_features(self) -> bool:
        """True when the loader gave the nodes features (``x``); False for e.g. IMDB-BINARY, COLLAB."""
        return len(self.dataset) > 0 and getattr(self.dataset[0], "x", None) is not None

    def feature_info(self) -> FeatureInfo:
        """Which node features training feeds the model (see :func:`xmask_cli.engine.batching.features.node_features`)."""
        if self.spec.family == "ogbg":
            x = self.dataset[0].x
            return FeatureInfo("atom", int(x.size(1)), f"OGB atom features ({x.size(1)} integer columns, AtomEncoder)")
        if not self.has_features():
            return FeatureInfo("degree", degree_width(self.edge_index, self.num_nodes),
                               f"one-hot node degree capped at {MAX_DEGREE}: {self.spec.name} has no node features")
        dim = int(self.dataset[0].x.size(1))
        ds = self.dataset
        if self.spec.family == "tu" and hasattr(type(ds), "num_node_labels"):
            parts = [f"one-hot node labels ({ds.num_node_labels})"] if ds.num_node_labels else []
            if ds.num_node_attributes and dim == ds.num_node_labels + ds.num_node_attributes:
                parts.append(f"node attributes ({ds.num_node_attributes})")
            elif ds.num_node_attributes:  # TUDataset's default use_node_attr=False drops them from x
                parts.append(f"node attributes ({ds.num_node_attributes}) not used")
            return FeatureInfo("dataset", dim, "PyG TUDataset x: " + ", ".join(parts))
        if self.spec.family == "folder":
            return FeatureInfo("dataset", dim, f"{self.dataset.files.paths['features'].name} ({dim} columns)")
        return FeatureInfo("dataset", dim, f"the dataset's x ({dim} columns)")


@dataclass(frozen=True)
class FeatureInfo:
    """What the node features are, for logs and results (``prepare`` / ``train`` report it).

    Attributes:
        kind: ``dataset`` (the loader's ``x``), ``atom`` (OGB integer atom
            features for ``AtomEncoder``) or ``degree`` (one-hot degree fallback,
            only for datasets without node features).
        dim: feature width the model's encoder reads.
        detail: one human-readable line.
    """

    kind: str
    dim: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim, "detail": self.detail}


#: Degrees above this share the last one-hot slot (as PyG's ``OneHotDegree`` with a cap).
MAX_DEGREE = 64


def _degrees(edge_index: list[np.ndarray], num_nodes: np.ndarray) -> list[np.ndarray]:
    return [np.bincount(e[0], minlength=int(n)) if e.size else np.zeros(int(n), dtype=np.int64)
            for e, n in zip(edge_index, num_nodes)]


def one_hot_width(degrees: list[np.ndarray]) -> int:
    """``min(max degree, MAX_DEGREE) + 1``: the one-hot degree width of a dataset."""
    return min(max((int(d.max()) for d in degrees if d.size), default=0), MAX_DEGREE) + 1


def degree_width(edge_index: list[np.ndarray], num_nodes: np.ndarray) -> int:
    """Width of the one-hot degree features: ``min(max degree, MAX_DEGREE) + 1``."""
    return one_hot_width(_degrees(edge_index, num_nodes))


def one_hot_degrees(edge_index: list[np.ndarray], num_nodes: np.ndarray) -> list[Any]:
    """Float ``[n_g, W]`` one-hot out-degree per graph, capped at :data:`MAX_DEGREE` (PyG's ``OneHotDegree``)."""
    return one_hot(_degrees(edge_index, num_nodes))


def one_hot(degrees: list[np.ndarray]) -> list[Any]:
    """Float ``[n_g, W]`` one-hot of given per-graph degrees, ``W = min(max degree, MAX_DEGREE) + 1``.

    Degrees above :data:`MAX_DEGREE` share the last slot; ``W`` is the dataset's, so every graph has the same width.
    """
    import torch

    width = one_hot_width(degrees)
    eye = torch.eye(width)
    return [eye[torch.from_numpy(np.minimum(d, width - 1).astype(np.int64))] for d in degrees]


def graphs_fingerprint(edge_index: list[np.ndarray], num_nodes: np.ndarray) -> str:
    """Content hash of a list of graphs: changes whenever any edge or node count does."""
    h = hashlib.sha256()
    nn = np.asarray(num_nodes, dtype=np.int64)
    h.update(nn.tobytes())
    h.update(np.asarray([e.shape[1] for e in edge_index], dtype=np.int64).tobytes())
    for e in edge_index:
        h.update(np.ascontiguousarray(e, dtype=np.int64).tobytes())
    return h.hexdigest()


def graph_arrays(ds: Any) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-graph local edge lists and node counts of a PyG in-memory dataset."""
    if len(ds) == 1:
        d = ds[0]
        return [d.edge_index.numpy().astype(np.int64)], np.asarray([d.num_nodes], dtype=np.int64)
    # The collated storage, where edge ids stay graph-local: PyG's public per-graph access (ds[i]) costs ~6 s
    # on ogbg-molhiv's 41k graphs and its stacked `ds.edge_index` offsets the ids; PyG itself points to `_data`.
    data, slices = ds._data, ds.slices
    eptr = slices["edge_index"].numpy()
    ei = data.edge_index.numpy().astype(np.int64)
    if "x" in slices and data.x is not None:
        nodes = np.diff(slices["x"].numpy())
    else:  # featureless sets (IMDB-BINARY) keep only a node count per graph
        nodes = np.asarray([ds[i].num_nodes for i in range(len(ds))])
    edges = [ei[:, eptr[i]:eptr[i + 1]] for i in range(len(ds))]
    return edges, np.asarray(nodes, dtype=np.int64)


def graph_edge_attrs(ds: Any) -> list[np.ndarray] | None:
    """Per-graph ``edge_attr`` arrays of a PyG dataset (``[E_g, C]``; a 1-d attribute as one column), or None."""
    if ds is None or not hasattr(ds, "__len__") or len(ds) == 0:
        return None
    slices = getattr(ds, "slices", None)
    data = getattr(ds, "_data", None)
    if len(ds) == 1 or slices is None or data is None:
        attr = getattr(ds[0], "edge_attr", None) if len(ds) == 1 else None
        return None if attr is None else [_columns(attr.numpy())]
    if "edge_attr" not in slices or getattr(data, "edge_attr", None) is None:
        return None
    # The collated storage, as graph_arrays reads edge_index (slices shared with edge_index's).
    ptr = slices["edge_attr"].numpy()
    flat = _columns(data.edge_attr.numpy())
    return [flat[ptr[i]:ptr[i + 1]] for i in range(len(ds))]


def _columns(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, 1) if a.ndim == 1 else a.reshape(a.shape[0], -1)
