"""Errica et al.'s protocol for small graph sets: stratified K-fold assessment with an inner holdout.

Errica, Podda, Bacciu, Micheli, "A Fair Comparison of Graph Neural Networks for Graph Classification"
(ICLR 2020): the graphs are split into K stratified outer folds; fold i is the test part of run i and is
read once, after selection. The other K-1 folds are split again, stratified, into a training part and a
10 % holdout that early stopping and model selection read. The folds depend on the labels, K and the
seed only, so every model trained with the same seed sees the same folds.

Example::

    folds = outer_folds(labels, k=10, seed=0)
    split = folds[3]                # train / val (the holdout) / test (fold 3)
    write_fold_files(folds, Path("runs/mutag-graph/0/folds"))
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from xmask_cli.engine.runs.folder import write_text
from xmask_cli.engine.scoring.metrics import ArrayInput
from xmask_cli.engine.scoring.splits import Split
from xmask_cli.errors import ConfigError, RunNotFoundError
from xmask_cli.jsonfile import OptionalInt, read_json

#: The fields of a fold file that :func:`read_fold_file` reads, with their types.
FOLD_FIELDS = {"fold": int, "folds": int, "train": list[int], "val": list[int], "test": list[int]}

__all__ = ["HOLDOUT", "check_fold_count", "outer_folds", "fold_name", "write_fold_files", "read_fold_file"]

#: Share of each outer training part held out for early stopping and selection.
HOLDOUT = 0.1


def fold_name(i: int, k: int) -> str:
    """The split name a fold's run records: ``fold-3-of-10``."""
    return f"fold-{i}-of-{k}"


def check_fold_count(labels: ArrayInput, k: int) -> np.ndarray:
    """``labels`` as one class per graph, once ``k`` folds are known to fit them (the check a sweep runs
    before it makes any run folder).

    Raises:
        ConfigError: ``k < 2``, multi-label ``labels``, more folds than graphs, or a class with fewer
            than ``k`` graphs (it could not appear in every fold): a setting the user chose, exit 2.
    """
    y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.reshape(-1)
    if y.ndim != 1:
        raise ConfigError(f"data.folds: stratified folds need one class label per graph, got labels of shape "
                          f"{y.shape}")
    if k < 2:
        raise ConfigError(f"data.folds must be >= 2, got {k}")
    if k > len(y):
        raise ConfigError(f"data.folds={k}: the dataset has {len(y)} graphs, fewer than the {k} folds; "
                          f"use --folds {len(y)} or fewer")
    counts = np.unique(y, return_counts=True)[1]
    if counts.min() < k:
        raise ConfigError(f"data.folds={k}: the smallest class has {counts.min()} graphs, fewer than the {k} folds; "
                          f"use --folds {counts.min()} or fewer")
    return y


def outer_folds(labels: ArrayInput, k: int, seed: int, holdout: float = HOLDOUT) -> list[Split]:
    """The K splits of the protocol: ``test`` = outer fold i, ``val`` = a stratified ``holdout`` of the rest.

    Uses scikit-learn's ``StratifiedKFold(k, shuffle=True, random_state=seed)`` for the outer folds and
    ``train_test_split(..., stratify=..., random_state=seed)`` for each holdout.

    Raises:
        ConfigError: what :func:`check_fold_count` refuses.
    """
    from sklearn.model_selection import StratifiedKFold, train_test_split

    y = check_fold_count(labels, k)
    outer = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    splits = []
    for i, (rest, test) in enumerate(outer.split(np.zeros(len(y)), y)):
        train, val = train_test_split(rest, test_size=holdout, stratify=y[rest], random_state=seed)
        splits.append(Split(np.sort(train), np.sort(val), np.sort(test), name=fold_name(i, k), seed=seed))
    return splits


def write_fold_files(folds: list[Split], folder: Path) -> list[Path]:
    """``folder/fold-<i>.json`` per fold (its train / val / test graph indices), written atomically.

    A file that already holds the same fold is left as it is.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, split in enumerate(folds):
        path = folder / f"fold-{i}.json"
        text = json.dumps({"fold": i, "folds": len(folds), "seed": split.seed, "holdout": HOLDOUT,
                           **{p: getattr(split, p).tolist() for p in ("train", "val", "test")}})
        if not (path.is_file() and not path.is_symlink() and path.read_text() == text):
            write_text(path, text)
        paths.append(path)
    return paths


def read_fold_file(path: Path) -> Split:
    """One fold file back as a :class:`Split`.

    Raises:
        RunNotFoundError: the file is missing or damaged (exit 6, naming it).
    """
    try:
        d = read_json(path, fields=FOLD_FIELDS, optional={"seed": OptionalInt})
    except FileNotFoundError:
        raise RunNotFoundError(f"{path} is missing; not a complete fold run") from None
    return Split(np.asarray(d["train"]), np.asarray(d["val"]), np.asarray(d["test"]),
                 name=fold_name(int(d["fold"]), int(d["folds"])), seed=d.get("seed"))
