"""Graph partitions into ``P`` parts with METIS (pymetis)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def metis_parts(a: sp.spmatrix, parts: int, *, seed: int = 0) -> np.ndarray:
    """Part id per node from METIS k-way partitioning.

    Args:
        a: symmetric adjacency without self loops.
        parts: number of parts ``P``; ``P <= 1`` puts every node in part 0.
        seed: METIS random seed, so that a cache is reproducible.

    Returns:
        int32 array of length ``n`` with values in ``[0, P)``.
    """
    n = a.shape[0]
    if parts <= 1 or n <= parts:
        return (np.arange(n) if 1 < n <= parts else np.zeros(n)).astype(np.int32)
    import pymetis

    a = sp.csr_matrix(a)
    opts = pymetis.Options(seed=seed)
    adj = pymetis.CSRAdjacency(a.indptr.astype(np.int64), a.indices.astype(np.int64))
    _, membership = pymetis.part_graph(parts, adjacency=adj, options=opts)
    return np.asarray(membership, dtype=np.int32)
