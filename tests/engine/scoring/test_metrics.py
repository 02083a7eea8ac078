"""Metrics against hand-worked examples, sklearn and OGB's own evaluators."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from xmask_cli.engine.scoring.metrics import HIGHER_IS_BETTER, METRICS, _rank_auc, accuracy, mae, mrr, rmse, rocauc


def test_accuracy_from_logits_and_labels():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.2, 0.1]])
    # argmax -> 0, 1, 0, 0 against 0, 1, 1, 0: three right.
    assert accuracy(logits, torch.tensor([0, 1, 1, 0])) == 0.75
    # Predicted labels against [N, 1] labels (OGB's layout): 2 of 3.
    assert accuracy(np.array([1, 2, 2]), np.array([[1], [2], [0]])) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        accuracy(np.array([1, 2]), np.array([1, 2, 3]))


def test_mae_rmse_hand_worked():
    pred, y = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[2.0], [2.0], [5.0]])
    # errors -1, 0, -2
    assert mae(pred, y) == pytest.approx(1.0)
    assert rmse(pred, y) == pytest.approx(math.sqrt(5 / 3))
    with pytest.raises(ValueError):
        mae(np.ones(3), np.ones(4))


def test_rocauc_hand_worked():
    # Positives 0.35, 0.8 against negatives 0.1, 0.4: 3 of 4 pairs ordered right.
    assert rocauc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    # A tie between a positive and a negative counts one half: (0.5 + 1 + 2) / 4.
    assert rocauc(np.array([0.5, 0.5, 0.2, 0.9]), np.array([1, 0, 0, 1])) == pytest.approx(0.875)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rocauc_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=300)
    scores = np.round(rng.normal(size=300) + y, 1)  # rounding forces many ties
    want = roc_auc_score(y, scores)
    assert rocauc(scores, y) == pytest.approx(want)
    assert rocauc(torch.from_numpy(scores).view(-1, 1).float(), torch.from_numpy(y).view(-1, 1)) == pytest.approx(want, abs=1e-6)
    assert _rank_auc(scores, y) == pytest.approx(want)
    # Two-class logits reduce to logit_1 - logit_0.
    logits = np.stack([np.zeros(300), scores], axis=1)
    assert rocauc(logits, y) == pytest.approx(want)


def test_rocauc_without_ogb_uses_rank_auc(monkeypatch):
    monkeypatch.setitem(sys.modules, "ogb.graphproppred", None)  # makes the import raise ImportError
    y = np.array([0, 1, 1, 0, 1, 0, 0])
    s = np.array([0.3, 0.3, 0.9, 0.1, 0.5, 0.6, 0.3])
    assert rocauc(s, y) == pytest.approx(roc_auc_score(y, s))


def test_rocauc_rejects_undefined_cases():
    with pytest.raises(ValueError):
        rocauc(np.array([0.1, 0.2]), np.array([1, 1]))  # one class only
    with pytest.raises(ValueError):
        rocauc(np.array([0.1, 0.2]), np.array([0, 2]))
    with pytest.raises(ValueError):
        rocauc(np.array([0.1, np.nan]), np.array([0, 1]))


def test_mrr_hand_worked_with_ties():
    pos = np.array([0.5, 0.9, 0.1])
    neg = np.array([[0.5, 0.7, 0.1],   # 1 above, 1 tie -> rank 2.5
                    [0.1, 0.2, 0.3],   # none above     -> rank 1
                    [0.1, 0.1, 0.1]])  # 3 ties         -> rank 2.5
    assert mrr(pos, neg) == pytest.approx((0.4 + 1.0 + 0.4) / 3)
    with pytest.raises(ValueError):
        mrr(pos, neg[:2])


def test_mrr_matches_ogb_link_evaluator():
    from ogb.linkproppred import Evaluator

    rng = np.random.default_rng(0)
    pos = np.round(rng.normal(size=50), 1)
    neg = np.round(rng.normal(size=(50, 20)), 1)
    ref = Evaluator("ogbl-citation2").eval({"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(neg)})
    assert mrr(torch.from_numpy(pos), torch.from_numpy(neg)) == pytest.approx(ref["mrr_list"].mean().item())


def test_metric_tables_agree():
    assert set(METRICS) == set(HIGHER_IS_BETTER)
    assert {"accuracy", "mae", "rmse", "rocauc", "mrr"} <= set(METRICS)
    assert not HIGHER_IS_BETTER["mae"] and not HIGHER_IS_BETTER["rmse"]
    assert HIGHER_IS_BETTER["accuracy"] and HIGHER_IS_BETTER["rocauc"] and HIGHER_IS_BETTER["mrr"]
