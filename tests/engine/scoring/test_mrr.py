"""Link MRR under both protocols against a brute-force ranking."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xmask_cli.engine.scoring import mrr as mrr_mod
from xmask_cli.engine.scoring.mrr import link_mrr


def _brute_rank(p: float, negs: list[float]) -> float:
    rank = 1.0
    for q in negs:
        rank += 1.0 if q > p else 0.5 if q == p else 0.0
    return rank


def test_mrr_protocols_match_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    pos = [0.5, 0.2, 0.9]
    neg = [0.5, 0.1, 0.3, 0.2, 0.95, 0.0]  # M = 2: (0.5, 0.1) for positive 0, ...
    # Pinned by hand. shared: ranks 1 + #higher + 0.5 #ties over all six.
    shared = (1 / (1 + 1 + 0.5) + 1 / (1 + 3 + 0.5) + 1 / (1 + 1)) / 3
    per_pos = (1 / (1 + 0.5) + 1 / (1 + 1 + 0.5) + 1 / (1 + 1)) / 3
    assert link_mrr(pos, neg, "shared", 2) == pytest.approx(shared)
    assert link_mrr(pos, neg, "per-positive", 2) == pytest.approx(per_pos)

    rng = np.random.default_rng(0)
    for m in (1, 3):
        p = rng.integers(0, 5, size=17).astype(float)  # small integers: many ties
        q = rng.integers(0, 5, size=17 * m).astype(float)
        brute_shared = np.mean([1 / _brute_rank(p[i], list(q)) for i in range(17)])
        brute_per = np.mean([1 / _brute_rank(p[i], list(q[i * m:(i + 1) * m])) for i in range(17)])
        assert link_mrr(p, q, "shared", m) == pytest.approx(brute_shared, rel=1e-12)
        assert link_mrr(torch.tensor(p), torch.tensor(q), "per-positive", m) == pytest.approx(brute_per, rel=1e-12)
        monkeypatch.setattr(mrr_mod, "_MRR_CHUNK", 5)  # many chunks: the same number
        assert link_mrr(p, q, "shared", m) == pytest.approx(brute_shared, rel=1e-12)
        monkeypatch.undo()
    with pytest.raises(ValueError, match="protocol"):
        link_mrr(pos, neg, "filtered", 2)
