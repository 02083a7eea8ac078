"""The fold-protocol peers of ``peers.py --folds K`` (Errica et al. 2020) on xmask's folds.

GIN with 5 layers and the structure-agnostic baseline (node MLP, sum pooling, MLP head), both hidden 64,
AdamW 1e-3 / 1e-2, batch 32, gradient clipping at xmask's 1.0, on the outer folds and inner holdouts of
``xmask train --folds K`` (:func:`xmask_cli.engine.folds.outer_folds`: the same fold files for a seed),
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
                   weight_decay: float = 1e-2) -> dict[str, Any]:
    """One (seed, fold) run of a fold-protocol peer: the same outer folds and inner holdout as
    ``xmask train --folds``, the same input features (``data_list``), the same gradient clipping and the same
    selection rule; test scored once on the selected state."""
    import torch

    from xmask_cli.engine.folds import outer_folds
    from xmask_cli.engine.metrics import accuracy

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
                              evaluate, epochs, patience)
    return {"metrics": {p: evaluate(p)[0] for p in parts}, "best_epoch": res["best_epoch"],
            "epochs_run": res["epochs_run"], "fold": fold, "folds": folds, "split": common.split_info(split, seed)}
