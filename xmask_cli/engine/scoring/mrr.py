"""Link-prediction MRR under the two evaluation protocols, in bounded memory.

Rank = 1 + #negatives scored higher + 0.5 * #negatives scored equal
(:func:`xmask_cli.engine.scoring.metrics.mrr`). Two protocols:

* ``shared`` (default): HeaRT's "existing setting", the one used by the
  papers' Planetoid link benchmarks. Each val/test positive is ranked against
  ALL negatives of its part (``P * M`` negatives shared by all P positives).
* ``per-positive``: positive ``i`` is ranked against its own ``M`` negatives
  only, columns ``i*M .. (i+1)*M-1`` (OGB-style; with ``M = 1`` a rank is 1,
  1.5 or 2).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xmask_cli.config import LinkSection
from xmask_cli.engine.scoring.metrics import ArrayInput, mrr

__all__ = ["PROTOCOLS", "link_mrr"]

#: MRR protocols of :class:`~xmask_cli.engine.tasks.link.LinkTask` (see the module docstring).
PROTOCOLS = ("shared", "per-positive")
# metrics.mrr builds [rows, M] comparison matrices: bound them to ~4M entries per call.
_MRR_CHUNK = 1 << 22


def _chunked_mrr(pos: np.ndarray, neg_rows: Callable[[slice], np.ndarray], width: int) -> float:
    """Mean of :func:`metrics.mrr` over row chunks (bounded memory; same number as one call)."""
    p = int(pos.shape[0])
    step = max(1, _MRR_CHUNK // max(width, 1))
    total = 0.0
    for s in range(0, p, step):
        stop = min(p, s + step)
        total += mrr(pos[s:stop], neg_rows(slice(s, stop))) * (stop - s)
    return total / p


def link_mrr(pos_scores: ArrayInput, neg_scores: ArrayInput, protocol: str = LinkSection.protocol,
             num_neg_per_pos: int = LinkSection.num_neg_per_pos) -> float:
    """MRR of ``P`` positives under ``protocol`` (see the module docstring).

    Args:
        pos_scores: ``[P]`` scores of the positives.
        neg_scores: ``[P * M]`` scores of the part's negatives, columns ``i*M..(i+1)*M-1``
            belonging to positive ``i`` (EdgeSplit's layout).
        protocol: ``shared`` (every positive against all ``P * M`` negatives) or
            ``per-positive`` (against its own ``M``).
    """
    pos = np.asarray(pos_scores.detach().cpu() if hasattr(pos_scores, "detach") else pos_scores,
                     dtype=np.float64).reshape(-1)
    neg = np.asarray(neg_scores.detach().cpu() if hasattr(neg_scores, "detach") else neg_scores,
                     dtype=np.float64).reshape(-1)
    m = int(num_neg_per_pos)
    if pos.size == 0 or neg.size != pos.size * m:
        raise ValueError(f"link_mrr: need P > 0 positives and P*M = {pos.size}*{m} negatives, got {neg.size}")
    if protocol == "shared":
        return _chunked_mrr(pos, lambda sl: np.broadcast_to(neg, (sl.stop - sl.start, neg.size)), neg.size)
    if protocol == "per-positive":
        return mrr(pos, neg.reshape(pos.size, m))
    raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
