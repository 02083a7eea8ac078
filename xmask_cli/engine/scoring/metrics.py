"""Evaluation metrics, each a function of two arrays returning a float.

``accuracy``, ``mae``, ``rmse`` and ``rocauc`` take ``(prediction, target)``;
``mrr`` takes ``(pos_scores [P], neg_scores [P, M])`` (the link task builds
the negatives of each positive per its protocol). Inputs may be torch tensors
(any device) or numpy arrays; everything is moved to numpy on the CPU first,
so metrics never hold on to the autograd graph. :data:`METRICS` maps the
metric names (``task.metric``) to functions and :data:`HIGHER_IS_BETTER` tells
model selection which way to compare.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, Union

import numpy as np
import numpy.typing as npt

from xmask_cli.versions import require_extra

if TYPE_CHECKING:  # tensors are read through their methods; the module itself loads without torch
    import torch

__all__ = ["accuracy", "ogb_node_accuracy", "mae", "rmse", "rocauc", "mrr", "METRICS", "HIGHER_IS_BETTER",
           "ArrayInput", "Metric"]

#: What a metric reads: a torch tensor (any device; detached and copied to the CPU) or anything numpy reads.
ArrayInput: TypeAlias = Union["torch.Tensor", npt.ArrayLike]
#: A metric: ``(prediction, target) -> float``.
Metric: TypeAlias = Callable[[ArrayInput, ArrayInput], float]


def _np(x: ArrayInput) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def accuracy(logits_or_pred: ArrayInput, y: ArrayInput) -> float:
    """Fraction of correct class predictions.

    ``logits_or_pred`` is either ``[N, C]`` scores (argmax over the last axis is
    taken) or ``[N]`` predicted labels; ``y`` is ``[N]`` or ``[N, 1]`` labels.
    """
    p, t = _np(logits_or_pred), _np(y).reshape(-1)
    if p.ndim == 2 and p.shape[1] > 1:
        p = p.argmax(axis=-1)
    p = p.reshape(-1)
    if p.shape != t.shape:
        raise ValueError(f"accuracy: {p.shape[0]} predictions for {t.shape[0]} labels")
    if t.size == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float((p == t).mean())


def ogb_node_accuracy(name: str) -> Metric:
    """Accuracy computed by OGB's ``Evaluator(name)`` (ogbn-arxiv, ogbn-products): the leaderboard's number.

    Takes what :func:`accuracy` takes (``[N, C]`` logits or ``[N]`` predictions, ``[N]`` or ``[N, 1]``
    labels) and gives the same value; the evaluator is the reference.
    """
    require_extra("ogb", "ogb", f"{name}'s accuracy (OGB's evaluator)")
    from ogb.nodeproppred import Evaluator

    evaluator = Evaluator(name)

    def score(logits_or_pred: ArrayInput, y: ArrayInput) -> float:
        p, t = _np(logits_or_pred), _np(y).reshape(-1, 1)
        if p.ndim == 2 and p.shape[1] > 1:
            p = p.argmax(axis=-1)
        p = p.reshape(-1, 1)
        if p.shape != t.shape or t.size == 0:
            raise ValueError(f"accuracy: {p.shape[0]} predictions for {t.shape[0]} labels")
        return float(evaluator.eval({"y_true": t, "y_pred": p})["acc"])

    return score


def _regression_pair(pred: ArrayInput, y: ArrayInput) -> tuple[np.ndarray, np.ndarray]:
    p, t = _np(pred).astype(np.float64), _np(y).astype(np.float64)
    # [N] against [N, 1] is the usual off-by-a-dim case; anything else must match exactly.
    if p.size == t.size and p.shape != t.shape:
        p, t = p.reshape(-1), t.reshape(-1)
    if p.shape != t.shape or t.size == 0:
        raise ValueError(f"shapes {p.shape} and {t.shape} do not match (or are empty)")
    return p, t


def mae(pred: ArrayInput, y: ArrayInput) -> float:
    """Mean absolute error over all entries."""
    p, t = _regression_pair(pred, y)
    return float(np.abs(p - t).mean())


def rmse(pred: ArrayInput, y: ArrayInput) -> float:
    """Root mean squared error over all entries."""
    p, t = _regression_pair(pred, y)
    return float(np.sqrt(((p - t) ** 2).mean()))


def _rank_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Binary ROC-AUC as the Mann-Whitney U statistic with average ranks.

    AUC = P(score of a random positive > score of a random negative), ties
    counting one half; average ranks give exactly that tie rule.
    """
    y = y.astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC-AUC needs at least one positive and one negative label")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # Runs of equal scores share the mean of the 1-based ranks they span.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    mean_rank = (starts + 1 + ends) / 2.0
    ranks[order] = np.repeat(mean_rank, ends - starts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def rocauc(scores: ArrayInput, y: ArrayInput) -> float:
    """Binary ROC-AUC of ``scores`` against 0/1 labels ``y``.

    ``scores`` is ``[N]``, ``[N, 1]`` (one logit or probability per item) or
    ``[N, 2]`` two-class logits, reduced to ``logit_1 - logit_0`` (monotone in
    the class-1 probability, so the AUC is unchanged). Once reduced to one
    ``[N, 1]`` column it goes through OGB's ``ogbg-molhiv`` evaluator, so the
    number matches the leaderboard's; without ogb installed, the rank-based
    AUC here (ties count one half), which gives the same number.

    Raises:
        ValueError: labels are not 0/1, only one class is present, or scores hold NaN.
    """
    s, t = _np(scores).astype(np.float64), _np(y)
    if s.ndim == 2 and s.shape[1] == 2:
        s = s[:, 1] - s[:, 0]
    s, t = s.reshape(-1), t.reshape(-1)
    if s.shape != t.shape:
        raise ValueError(f"rocauc: {s.shape[0]} scores for {t.shape[0]} labels")
    if np.isnan(s).any():
        raise ValueError("rocauc: scores contain NaN")
    if t.size == 0 or not np.isin(t, (0, 1)).all():
        raise ValueError("rocauc: labels must be 0/1")
    if not ((t == 1).any() and (t == 0).any()):
        raise ValueError("ROC-AUC needs at least one positive and one negative label")
    try:
        from ogb.graphproppred import Evaluator
    except ImportError:  # ogb is optional for node/link work; the fallback is exact
        return _rank_auc(s, t)
    out = Evaluator("ogbg-molhiv").eval({"y_true": t.reshape(-1, 1).astype(np.float64),
                                          "y_pred": s.reshape(-1, 1)})
    return float(out["rocauc"])


def mrr(pos_scores: ArrayInput, neg_scores: ArrayInput) -> float:
    """Mean reciprocal rank of each positive among its own negatives.

    ``pos_scores`` is ``[P]``, ``neg_scores`` ``[P, M]`` (row ``i`` holds the
    negatives of positive ``i``). The rank of positive ``i`` is::

        rank_i = 1 + #{j : neg[i, j] > pos[i]} + 0.5 * #{j : neg[i, j] == pos[i]}

    i.e. the mean of the optimistic rank (ties below the positive) and the
    pessimistic rank (ties above it), as OGB's link evaluators do, so a model
    that scores everything equal gets no credit for the ties. Returns
    ``mean(1 / rank_i)``.
    """
    pos, neg = _np(pos_scores).astype(np.float64).reshape(-1), _np(neg_scores).astype(np.float64)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0] or pos.size == 0:
        raise ValueError(f"mrr: pos_scores {pos.shape} and neg_scores {neg.shape} must be [P] and [P, M], P > 0")
    greater = (neg > pos[:, None]).sum(axis=1)
    ties = (neg == pos[:, None]).sum(axis=1)
    rank = 1.0 + greater + 0.5 * ties
    return float((1.0 / rank).mean())


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "mae": mae,
    "rmse": rmse,
    "rocauc": rocauc,
    "mrr": mrr,
}

HIGHER_IS_BETTER: dict[str, bool] = {
    "accuracy": True,
    "mae": False,
    "rmse": False,
    "rocauc": True,
    "mrr": True,
}
