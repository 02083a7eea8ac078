"""Checks of a user's folder (:mod:`xmask_cli.data.folder`) across its files and rows.

Ids against the node count, repeated edge rows (merged, weights agreeing), both directions of a
weighted pair, and every class in the training split; an error is one line naming the file and row.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xmask_cli.data.tables import Rows, merge_note
from xmask_cli.errors import UsageError

__all__ = ["check_ids", "check_reverse_weights", "check_train_classes", "repeated_rows"]


def check_ids(ids: np.ndarray, n: int, rows: Rows, name: str, why_n: str) -> None:
    """Every id is below ``n`` (``why_n``: what sets ``n``, said in the error)."""
    bad = np.flatnonzero(ids >= n)
    if bad.size:
        raise UsageError(f"{rows.at(bad[0])}: {name} {int(ids[bad[0]])} is out of range: the graph has {n} nodes "
                         f"({why_n}), ids 0..{n - 1}")


def repeated_rows(src: np.ndarray, dst: np.ndarray, w: np.ndarray | None, n: int,
                  rows: Rows) -> tuple[np.ndarray | None, str | None]:
    """Which rows to keep when every later copy of a ``(src, dst)`` row is merged into its first:
    ``(keep mask, log line)``, or ``(None, None)`` when no row repeats.

    An edge list from a log, a join or an export repeats rows; a repeated row is the same edge, so the
    first one stands for all (file order kept). With weights, the copies must carry the row's weight.

    Raises:
        UsageError: two copies of one row with different weights (both lines named).
    """
    keys = src * n + dst
    if not (np.diff(np.sort(keys)) == 0).any():  # the common case: one sort, no index arrays
        return None, None
    order = np.argsort(keys, kind="stable")  # stable: of equal keys, the earlier row first
    ks = keys[order]
    starts = np.ones(ks.size, dtype=bool)
    starts[1:] = ks[1:] != ks[:-1]
    first = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]  # per sorted position: its group's first row
    later, original = order[~starts], first[~starts]
    if w is not None:
        clash = np.flatnonzero(w[later] != w[original])
        if clash.size:
            i = clash[np.argmin(later[clash])]
            r, f = int(later[i]), int(original[i])
            raise UsageError(f"{rows.at(r)}: edge ({int(src[r])}, {int(dst[r])}) has weight {w[r]} but the same row "
                             f"{rows.at(f)} has {w[f]}; a repeated row is merged only when its weight is the same")
    keep = np.ones(src.size, dtype=bool)
    keep[later] = False
    i = int(np.argmin(later))
    return keep, merge_note(int(later.size), rows.path.name, rows.where(int(later[i])), rows.where(int(original[i])))


def check_reverse_weights(src: np.ndarray, dst: np.ndarray, w: np.ndarray, n: int, rows: Rows) -> None:
    """Both directions of a pair carry the same weight (repeated rows, if any, already checked to agree)."""
    keys = src * n + dst
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    rev = dst * n + src
    pos = np.searchsorted(ks, rev)
    pos = np.minimum(pos, len(ks) - 1)
    has = ks[pos] == rev
    partner = order[pos]
    bad = np.flatnonzero(has & (w[partner] != w))
    if bad.size:
        r = int(bad[0])
        raise UsageError(f"{rows.at(r)}: edge ({int(src[r])}, {int(dst[r])}) has weight {w[r]} but its reverse "
                         f"{rows.at(int(partner[r]))} has {w[partner[r]]}; an edge is one pair with one weight")


def check_train_classes(y: np.ndarray, train: np.ndarray, labels_path: Path | str, split_what: str) -> None:
    """Every class ``0..max label`` has a node in ``train``; else one line naming the labels file.

    Raises:
        UsageError: a class without a training node (or without any labelled node).
    """
    y = np.asarray(y).reshape(-1)
    num_classes = int(y.max()) + 1 if y.size and y.max() >= 0 else 0
    have = np.bincount(y[train][y[train] >= 0], minlength=num_classes)
    missing = np.flatnonzero(have == 0)
    if missing.size:
        c = int(missing[0])
        anywhere = bool((y == c).any())
        detail = "" if anywhere else f"; no node has label {c} at all (labels must be 0..{num_classes - 1})"
        raise UsageError(f"{labels_path}: class {c} has no node in the training split ({split_what}){detail}; "
                         f"every class needs a training node")
