"""Node features every task level feeds the model: the dataset's, else a one-hot degree.

Example::

    x = node_features(graphs)[0]                  # [N, F] of a one-graph dataset
    x = one_hot_degree(train_edge_index, n)        # a featureless edge file, training edges only
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from xmask_cli.data.graphset import MAX_DEGREE, GraphSet, one_hot_degrees
from xmask_cli.engine.pair_structure import canonical_edges

__all__ = ["node_features", "one_hot_degree", "MAX_DEGREE"]


def node_features(graphs: GraphSet) -> list[Tensor]:
    """Float ``[n_g, F]`` node features of every graph.

    The dataset's ``x`` when its loader gives one (TU node labels/attributes as
    PyG's ``TUDataset`` reads them, OGB atom features, Planetoid bag-of-words);
    otherwise (IMDB-BINARY, COLLAB: no node features) a one-hot node degree,
    capped at :data:`MAX_DEGREE`, as PyG's ``OneHotDegree`` transform does.
    ``GraphSet.feature_info()`` says which one a dataset gets.
    """
    ds = graphs.dataset
    if graphs.has_features():
        return [ds[i].x.float() for i in range(len(ds))]
    return one_hot_degrees(graphs.edge_index, graphs.num_nodes)


def one_hot_degree(edge_index: np.ndarray, num_nodes: int, cap: int = MAX_DEGREE) -> Tensor:
    """``[N, min(max degree, cap) + 1]`` one-hot degree of the (undirected, canonicalised) graph.

    The featureless fallback, as for TU sets; computed on training edges so
    held-out edges cannot leak through the features.
    """
    ei = canonical_edges(edge_index, num_nodes)
    deg = np.bincount(ei[0], minlength=int(num_nodes)) if ei.size else np.zeros(int(num_nodes), dtype=np.int64)
    width = min(int(deg.max(initial=0)), cap) + 1
    return torch.eye(width)[torch.from_numpy(np.minimum(deg, width - 1).astype(np.int64))]
