"""The fold-protocol peers of ``peers.py --folds K`` (Errica et al. 2020) on xmask's folds.

GIN with 5 layers and the structure-agnostic baseline (node MLP, sum pooling, MLP head), both hidden 64,
AdamW 1e-3 / 1e-2, batch 32, gradient clipping at xmask's 1.0, on the outer folds and inner holdouts of
``xmask train --folds K`` (:func:`xmask_cli.engine.scoring.folds.outer_folds`: the same fold files for a seed),
selected by xmask's rule (holdout accuracy, ties by holdout loss, then the later epoch).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402
from peers_gnn import _gin  # noqa: E402

#: GIN as Errica et al. ran it (5 layers, hidden 64, sum readout) and their structure-agnostic baseline.
FOLD_MODELS = ("GIN", "baseline")


def _baseline(in_dim: int, out_dim: int, hidden: int = 64, dropout: float = 0.5) -> Any:
    """Errica et al.'s structure-agnostic baseline: node MLP, sum pooling over the graph, MLP head."""
    import torch
    from torch_geometric.nn import global_add_pool

    class Baseline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.node = torch.nn.Sequential(torch.nn.Linear(in_dim, hidden), torch.nn.ReLU())
            self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                            torch.nn.Dropout(dropout), torch.nn.Linear(hidden, out_dim))

        def forward(self, x: Any, ei: Any, batch: Any, num_graphs: int | None = None) -> Any:
            return self.head(global_add_pool(self.node(x), batch, size=num_graphs))

    return Baseline()


def run_graph_fold(data_list: list[Any], labels: Any, model_name: str, seed: int, folds: int, fold: int,
                   epochs: int, patience: int, clip_norm: float = 1.0, batch_size: int = 32, lr: float = 1e-3,
                   weight_decay: float = 1e-2, checkpoint: Path | None = None,
                   checkpoint_every: int = 1) -> dict[str, Any]:
    """One (seed, fold) run of a fold-protocol peer: the same outer folds and inner holdout as
    ``xmask train --folds``, the same input features (``data_list``), the same gradient clipping and the same
    selection rule; test scored once on the selected state. ``checkpoint``: a checkpoint file, written every
    ``checkpoint_every`` epochs, that a killed run resumes from (:func:`peers_common.fit_selected`). The result records the budget
    (``epochs``, ``patience``) that ``peers.py --resume`` checks before it reuses the fold."""
    import torch

    from xmask_cli.engine.scoring.folds import outer_folds
    from xmask_cli.engine.scoring.metrics import accuracy

    split = outer_folds(labels, folds, seed)[fold]
    parts = ("train", "val", "test")
    train_loader, eval_loaders, num_classes = common.graph_loaders(data_list, split, parts, batch_size, seed)
    in_dim = data_list[0].x.size(1)
    model = _gin(in_dim, num_classes, hidden=64, layers=5) if model_name == "GIN" else _baseline(in_dim, num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def evaluate(part: str) -> tuple[float, float]:
        out, y = common.graph_logits(model, eval_loaders[part])
        return accuracy(out, y), float(torch.nn.functional.cross_entropy(out, y))

    res = common.fit_selected(model, opt, lambda: common.graph_epoch(model, opt, train_loader, clip_norm),
                              evaluate, epochs, patience, checkpoint=checkpoint, loader_rng=train_loader.generator,
                              every=checkpoint_every)
    return {"metrics": {p: evaluate(p)[0] for p in parts}, "best_epoch": res["best_epoch"],
            "epochs_run": res["epochs_run"], "epochs": epochs, "patience": patience, "fold": fold, "folds": folds,
            "split": common.split_info(split, seed), "resumed_at": res["resumed_at"],
            "seconds_before_resume": res["seconds_before_resume"]}


def finished_fold(runs: list[dict[str, Any]], labels: Any, dataset: str, model: str, seed: int, folds: int,
                  fold: int, epochs: int, patience: int) -> dict[str, Any] | None:
    """The run of ``runs`` that is this (dataset, model, seed, fold) at this budget, on the fold
    :func:`~xmask_cli.engine.scoring.folds.outer_folds` gives now (:func:`peers_common.finished_run`);
    None when there is none such (the fold is trained)."""
    from xmask_cli.engine.scoring.folds import outer_folds

    want = common.split_info(outer_folds(labels, folds, seed)[fold], seed)
    match = {"dataset": dataset, "model": model, "seed": seed, "fold": fold, "folds": folds, "epochs": epochs,
             "patience": patience}
    return common.finished_run(runs, match, want, epochs)


def checkpoint_name(dataset: str, model: str, seed: int, folds: int, fold: int, epochs: int, patience: int) -> str:
    """The checkpoint file name of one fold run; it holds the budget, so another budget starts over."""
    return f"{dataset}-{model}-seed{seed}-fold{fold}-of{folds}-e{epochs}-p{patience}.pt"
