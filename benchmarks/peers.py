#!/usr/bin/env python
"""PyG peer baselines under xmask's evaluation protocol.

What is measured: test metrics of standard PyG models, trained under the same
protocol as ``xmask train``, so the figures sit beside xmask's in one table:

* the splits are xmask's own (:mod:`xmask_cli.engine.splits`): ``node_split("public")``
  for Cora / CiteSeer (seeds vary the initialisation only), ``graph_split("random-8-1-1",
  dataset, seed=s)`` for MUTAG / PROTEINS and ``edge_split(edge_index, N, seed=s,
  fractions=(0.85, 0.05, 0.10), num_neg_per_pos=1)`` for Cora link prediction: seed
  ``s`` gets the same split as xmask's run with seed ``s``;
* selection reads the validation metric only: early stopping on it with a
  patience, the best-validation state restored, the test metric computed once
  on that state and only reported;
* AdamW (no warm-up, no clipping: the peers' usual recipes), torch and numpy
  seeded with the run's seed; ``--optimizer adam-l2`` swaps in Adam with L2
  weight decay, the optimiser the GCN / GAT / GIN papers report with (AdamW's
  decoupled 5e-4 barely regularises: expect lower Planetoid accuracies under it);
* node / link peers read the raw Planetoid features, as xmask does
  (``--normalize-features`` row-normalises them, as PyG's examples do);
* metrics are :func:`xmask_cli.engine.metrics.accuracy` and
  :func:`xmask_cli.engine.metrics.mrr`; mean and population std (``ddof=0``,
  as ``xmask`` reports) over the seeds.

Models:

* node: GCN (2 layers, hidden 64, dropout 0.5, lr 0.01, wd 5e-4) and GAT
  (2 layers, 8 heads x 8, dropout 0.6, lr 0.005, wd 5e-4); full-batch, at most
  ``--node-epochs`` epochs, patience ``--node-patience``;
* graph: GIN (3 ``GINConv`` layers with 2-layer MLPs and BatchNorm, hidden 64,
  sum readout, MLP head, dropout 0.5, lr 0.01), batch 32. Node features: the
  dataset's ``x``, else :func:`xmask_cli.engine.features.node_features`'s one-hot
  degree (the same input xmask gets);
* link: a 2-layer GCN encoder (hidden 128 -> 64) over ``split.train_edge_index``
  only, with a dot-product decoder (``GCN+dot``) and a Hadamard-MLP decoder
  (``GCN+MLP``); BCE on the training positives against as many uniformly drawn
  node pairs per epoch (a generator seeded by the run's seed); MRR with the
  "shared" protocol: every val (test) positive is ranked against *all*
  ``val_neg`` (``test_neg``) pairs.

Published recipes and graph transformers (``--node-models`` / ``--graph-models``), on xmask's splits, under
xmask's selection rule (:class:`xmask_cli.engine.selection.Selection`: best validation metric, ties by the
validation loss, then the later epoch) and with the epoch budget and patience of the dataset's xmask preset:

* ``GCN-example`` / ``GAT-example``: PyG's ``examples/gcn.py`` (2 x GCNConv 16, dropout 0.5, Adam lr 0.01,
  L2 5e-4 on the first layer only) and ``examples/gat.py`` (8 heads x 8, ELU, dropout 0.6 on inputs and
  attention, a 1-head output layer, Adam lr 0.005, L2 5e-4), both on row-normalised features
  (``NormalizeFeatures``);
* ``SGFormer`` and ``Polynormer``: PyG's ``torch_geometric.nn.models`` classes with the authors' published
  settings per dataset (:data:`SGFORMER_HP`, :data:`POLYNORMER_HP`, each naming its source). PyG 2.8.1's
  ``Polynormer`` builds its global attention for ``hidden`` inputs but feeds it ``heads x hidden``, so
  ``heads > 1`` fails at the first global epoch; :func:`polynormer_model` subclasses it and rebuilds the
  global layers with ``heads x hidden`` inputs, as the authors' model does (heads=1: PyG's model unchanged);
* ``GPS``: ``GPSConv`` with a GIN local layer and 4-head attention in PyG's ``examples/graph_gps.py``
  configuration (:data:`GPS_HP`; random-walk encodings of length 20 are its precompute), at the graph level
  and, on the whole graph as one sequence, at the node level. ``--probe-epochs`` / ``--probe-batches``
  time a few epochs (batches) of a row too slow to finish.

Fold protocol (``--folds K``, graph sets): GIN with 5 layers and the structure-agnostic baseline
(node MLP, sum pooling, MLP head), both hidden 64, AdamW 1e-3 / 1e-2, batch 32, gradient clipping at
xmask's 1.0, on the outer folds and inner holdouts of ``xmask train --folds K`` (the same fold files for
a seed), selected by xmask's rule (holdout accuracy, ties by holdout loss, then the later epoch).

Usage (from the repository root)::

    python benchmarks/peers.py                        # everything, seeds 0-4
    python benchmarks/peers.py --only node --seeds 0-1
    python benchmarks/peers.py --only graph --folds 10 --seeds 0 --graph-datasets MUTAG,PROTEINS,IMDB-BINARY
    python benchmarks/peers.py --only link,graph --threads 1
    python benchmarks/peers.py --only node --optimizer adam-l2 --out benchmarks/out/peers-adam-l2.json
    python benchmarks/peers.py --only node --optimizer adam-l2 --normalize-features \
        --out benchmarks/out/peers-published-recipe.json
    python benchmarks/peers.py --only node --node-models GCN-example,GAT-example,SGFormer,Polynormer --seeds 0-2
    python benchmarks/peers.py --only node --node-datasets Computers --node-models SGFormer --epochs 100
    python benchmarks/peers.py --only node --node-models GPS --probe-epochs 2     # s / epoch only
    python benchmarks/peers.py --only graph --graph-datasets PROTEINS --graph-models GIN,GPS --seeds 0-2

Prints a markdown table and writes JSON to ``benchmarks/out/peers.json``
(every run, plus mean / std per row).
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

DEFAULT_DATA_ROOT = Path(os.environ.get("XMASK_DATA_ROOT") or REPO.parent / "shared" / "datasets")
TASKS = ("node", "graph", "link")
NODE_DATASETS = ("Cora", "CiteSeer")
GRAPH_DATASETS = ("MUTAG", "PROTEINS")
LINK_DATASETS = ("Cora",)
LINK_FRACTIONS = (0.85, 0.05, 0.10)


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0..4]; ``"0,2,5"`` -> [0, 2, 5]; ranges and lists mix."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    if not out:
        raise argparse.ArgumentTypeError(f"no seeds in {text!r}")
    return out


def _seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)


def _load(name: str, data_root: Path, cache_dir: Path) -> Any:
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    return load_graphs(get_dataset(name), data_root=data_root, cache_dir=cache_dir, offline=True)


class _Selector:
    """Validation-only selection: best state by val metric (ties keep the earlier epoch), patience."""

    def __init__(self, patience: int):
        self.patience = patience
        self.best: float | None = None
        self.best_epoch = -1
        self.bad = 0
        self.state: dict[str, Any] | None = None

    def update(self, model: Any, val: float, epoch: int) -> bool:
        """Record epoch ``epoch``; returns True when training should stop."""
        if self.best is None or val > self.best:
            self.best, self.best_epoch, self.bad = val, epoch, 0
            self.state = copy.deepcopy(model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience


#: ``adamw`` (the protocol's) or ``adam-l2`` (Adam with coupled L2, the peers' published recipes).
OPTIMIZERS = ("adamw", "adam-l2")
_OPTIMIZER = ["adamw"]


def make_optimizer(params: Any, lr: float, weight_decay: float) -> Any:
    """AdamW (decoupled decay) by default; ``--optimizer adam-l2`` gives Adam with L2 ``weight_decay``."""
    import torch

    cls = torch.optim.AdamW if _OPTIMIZER[0] == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, weight_decay=weight_decay)


#: ``--normalize-features``: row-normalise Planetoid features (PyG's ``NormalizeFeatures``, as the
#: GCN / GAT examples do). Off by default: xmask reads the raw features.
_NORMALIZE = [False]


def _features(data: Any) -> Any:
    x = data.x.float()
    if _NORMALIZE[0]:
        x = x / x.sum(-1, keepdim=True).clamp(min=1.0)
    return x


# ------------------------------------------------------------------ node
def _node_model(kind: str, in_dim: int, out_dim: int, hidden: int | None = None, dropout: float | None = None) -> Any:
    """GCN (hidden 64, dropout 0.5) or GAT (8 heads x ``hidden`` 8, dropout 0.6); ``benchmarks/tune_study.py`` tunes both."""
    import torch
    from torch_geometric.nn import GATConv, GCNConv

    class GCN(torch.nn.Module):
        def __init__(self, h: int = 64, p: float = 0.5) -> None:
            super().__init__()
            self.p = p
            self.c1, self.c2 = GCNConv(in_dim, h), GCNConv(h, out_dim)

        def forward(self, x: Any, ei: Any) -> Any:
            x = torch.nn.functional.dropout(x, self.p, self.training)
            x = torch.relu(self.c1(x, ei))
            x = torch.nn.functional.dropout(x, self.p, self.training)
            return self.c2(x, ei)

    class GAT(torch.nn.Module):
        def __init__(self, h: int = 8, p: float = 0.6) -> None:
            super().__init__()
            self.p = p
            self.c1 = GATConv(in_dim, h, heads=8, dropout=p)
            self.c2 = GATConv(8 * h, out_dim, heads=1, concat=False, dropout=p)

        def forward(self, x: Any, ei: Any) -> Any:
            x = torch.nn.functional.dropout(x, self.p, self.training)
            x = torch.nn.functional.elu(self.c1(x, ei))
            x = torch.nn.functional.dropout(x, self.p, self.training)
            return self.c2(x, ei)

    kw = {k: v for k, v in (("h", hidden), ("p", dropout)) if v is not None}
    return GCN(**kw) if kind == "GCN" else GAT(**kw)



NODE_HPARAMS = {"GCN": {"lr": 0.01, "weight_decay": 5e-4}, "GAT": {"lr": 0.005, "weight_decay": 5e-4}}


def run_node(graphs: Any, kind: str, seed: int, epochs: int, patience: int, hp: dict[str, Any] | None = None,
             parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of a node peer; ``hp`` overrides lr, weight_decay, hidden, dropout; ``parts`` are scored at the end
    (a search leaves test out: it is never computed). The split is the dataset's registry split, as xmask's
    (``public`` for Planetoid; ``random-60-20-20`` for Amazon, drawn with ``seed`` as xmask's run ``seed``)."""
    import torch

    from xmask_cli.engine.metrics import accuracy
    from xmask_cli.engine.splits import node_split

    data = graphs.dataset[0]
    split = node_split(graphs.spec.split, data, seed=seed)
    idx = {p: torch.as_tensor(getattr(split, p)) for p in parts}
    x, ei, y = _features(data), data.edge_index, data.y.view(-1)
    hp = {**NODE_HPARAMS[kind], **(hp or {})}
    _seed(seed)
    model = _node_model(kind, x.size(1), int(y.max()) + 1, hidden=hp.get("hidden"), dropout=hp.get("dropout"))
    opt = make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sel = _Selector(patience)

    @torch.no_grad()
    def scores(which: tuple[str, ...] = parts) -> dict[str, float]:
        model.eval()
        out = model(x, ei)
        return {p: accuracy(out[idx[p]], y[idx[p]]) for p in which}

    epoch = -1
    for epoch in range(epochs):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x, ei)[idx["train"]], y[idx["train"]])
        loss.backward()
        opt.step()
        if sel.update(model, scores(("val",))["val"], epoch):
            break
    model.load_state_dict(sel.state)
    return {"metrics": scores(), "best_epoch": sel.best_epoch, "epochs_run": epoch + 1,
            "split": {"name": split.name, **dict(zip(("train", "val", "test"), split.sizes()))}}


# ----------------------------------------------------------------- graph
def _gin(in_dim: int, out_dim: int, hidden: int = 64, layers: int = 3, dropout: float = 0.5,
         encoder: Any = None, pool: str = "sum") -> Any:
    """GIN (Xu et al. 2019); ``encoder``: a module run on ``x`` first (its output width ``in_dim``, e.g. OGB's
    ``AtomEncoder``); ``pool``: ``sum`` or ``mean`` readout."""
    import torch
    from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool

    readout = {"sum": global_add_pool, "mean": global_mean_pool}[pool]

    def mlp(a: int, b: int) -> torch.nn.Sequential:
        return torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.BatchNorm1d(b), torch.nn.ReLU(),
                                   torch.nn.Linear(b, b), torch.nn.ReLU())

    class GIN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.convs = torch.nn.ModuleList(GINConv(mlp(in_dim if i == 0 else hidden, hidden)) for i in range(layers))
            self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                            torch.nn.Dropout(dropout), torch.nn.Linear(hidden, out_dim))

        def forward(self, x: Any, ei: Any, batch: Any, num_graphs: int | None = None) -> Any:
            if self.encoder is not None:
                x = self.encoder(x)
            for conv in self.convs:
                x = conv(x, ei)
            return self.head(readout(x, batch, size=num_graphs))

    return GIN()


#: GIN weight decay: AdamW's default-like 1e-2, or none under Adam (PyG's GIN example uses none).
GRAPH_WEIGHT_DECAY = {"adamw": 1e-2, "adam-l2": 0.0}


def graph_data_list(graphs: Any, node_struct: str = "none") -> list[Any]:
    """PyG ``Data`` per graph with xmask's node features (dataset ``x`` or one-hot degree), plus the
    ``model.node_struct`` channels a preset appends (``degree``: what ``graph-level`` gives its model)."""
    import torch
    from torch_geometric.data import Data

    from xmask_cli.engine.features import input_features
    from xmask_cli.engine.tasks.graph import graph_labels

    feats, labels = input_features(graphs, node_struct)[0], graph_labels(graphs)
    return [Data(x=f, edge_index=torch.from_numpy(np.ascontiguousarray(e, dtype=np.int64)), y=labels[i].view(1),
                 num_nodes=int(n))
            for i, (f, e, n) in enumerate(zip(feats, graphs.edge_index, graphs.num_nodes))]


def _graph_epoch(model: Any, opt: Any, loader: Any, clip_norm: float) -> None:
    """One training pass of a graph classifier over ``loader`` (cross-entropy; the gradient norm clipped at
    ``clip_norm`` when > 0)."""
    import torch

    model.train()
    for b in loader:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index, b.batch, b.num_graphs), b.y)
        loss.backward()
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()


def _graph_logits(model: Any, loader: Any) -> tuple[Any, Any]:
    """``(logits, labels)`` of every graph of ``loader``, in its order, in eval mode."""
    import torch

    model.eval()
    outs, ys = [], []
    with torch.no_grad():
        for b in loader:
            outs.append(model(b.x, b.edge_index, b.batch, b.num_graphs))
            ys.append(b.y)
    return torch.cat(outs), torch.cat(ys)


def run_graph(graphs: Any, data_list: list[Any], seed: int, epochs: int, patience: int,
              batch_size: int = 32, hp: dict[str, Any] | None = None,
              parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of GIN; ``hp`` overrides lr, weight_decay, hidden, layers, dropout, batch_size; ``parts`` are
    scored at the end (a search leaves test out: it is never computed)."""
    import torch
    from torch_geometric.loader import DataLoader

    from xmask_cli.engine.metrics import METRICS
    from xmask_cli.engine.splits import graph_split

    split = graph_split(graphs.spec.split, graphs.dataset, seed=seed)  # random-8-1-1 for TU sets, OGB's scaffold
    metric = METRICS[graphs.spec.metric]
    hp = {"lr": 0.01, "weight_decay": GRAPH_WEIGHT_DECAY[_OPTIMIZER[0]], "batch_size": batch_size, **(hp or {})}
    batch_size = int(hp["batch_size"])
    sets = {p: [data_list[int(i)] for i in getattr(split, p)] for p in parts}
    _seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(sets["train"], batch_size=batch_size, shuffle=True, generator=gen)
    eval_loaders = {p: DataLoader(s, batch_size=batch_size, shuffle=False) for p, s in sets.items()}
    num_classes = int(max(int(d.y) for d in data_list)) + 1
    model = _gin(data_list[0].x.size(1), num_classes,
                 **{k: hp[k] for k in ("hidden", "layers", "dropout") if k in hp})
    opt = make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sel = _Selector(patience)

    def score(part: str) -> float:
        return metric(*_graph_logits(model, eval_loaders[part]))

    epoch = -1
    for epoch in range(epochs):
        _graph_epoch(model, opt, train_loader, clip_norm=0.0)
        if sel.update(model, score("val"), epoch):
            break
    model.load_state_dict(sel.state)
    return {"metrics": {p: score(p) for p in parts}, "best_epoch": sel.best_epoch,
            "epochs_run": epoch + 1, "params": count_parameters(model),
            "split": {"name": split.name, "seed": seed, **dict(zip(("train", "val", "test"), split.sizes()))}}


# ------------------------------------------------- graph, fold protocol
#: Peers of the fold protocol (Errica et al. 2020): GIN as that paper ran it (5 layers, hidden 64, sum readout)
#: and its structure-agnostic baseline (a per-node MLP, sum pooling, an MLP classifier).
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
    """One (seed, fold) run of a fold-protocol peer on xmask's folds (:func:`xmask_cli.engine.folds.outer_folds`):
    the same outer folds and inner holdout as ``xmask train --folds``, the same input features (``data_list``),
    the same gradient clipping and the same selection rule (best holdout accuracy, ties broken by the holdout
    loss, then the later epoch); test scored once on the selected state."""
    import torch
    from torch_geometric.loader import DataLoader

    from xmask_cli.engine import selection
    from xmask_cli.engine.folds import outer_folds
    from xmask_cli.engine.metrics import accuracy

    split = outer_folds(labels, folds, seed)[fold]
    sets = {p: [data_list[int(i)] for i in getattr(split, p)] for p in ("train", "val", "test")}
    _seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(sets["train"], batch_size=batch_size, shuffle=True, generator=gen)
    eval_loaders = {p: DataLoader(v, batch_size=batch_size, shuffle=False) for p, v in sets.items()}
    num_classes = int(max(int(d.y) for d in data_list)) + 1
    in_dim = data_list[0].x.size(1)
    model = _gin(in_dim, num_classes, hidden=64, layers=5) if model_name == "GIN" else _baseline(in_dim, num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def evaluate(part: str) -> tuple[float, float]:
        out, y = _graph_logits(model, eval_loaders[part])
        return accuracy(out, y), float(torch.nn.functional.cross_entropy(out, y))

    sel, state, epoch = selection.Selection(), None, -1
    for epoch in range(epochs):
        _graph_epoch(model, opt, train_loader, clip_norm)
        val, val_loss = evaluate("val")
        if sel.update(val, val_loss, epoch, higher=True):
            state = copy.deepcopy(model.state_dict())
        if sel.bad_epochs >= patience:
            break
    model.load_state_dict(state)
    return {"metrics": {p: evaluate(p)[0] for p in ("train", "val", "test")}, "best_epoch": sel.best_epoch,
            "epochs_run": epoch + 1, "fold": fold, "folds": folds,
            "split": {"name": split.name, "seed": seed, **dict(zip(("train", "val", "test"), split.sizes()))}}


# ------------------------------------------------------------------ link
def _link_model(in_dim: int, decoder: str, hidden: int = 128, dropout: float = 0.5) -> Any:
    """GCN encoder ``in -> hidden -> hidden / 2`` (128 -> 64 by default) with a dot or Hadamard-MLP decoder."""
    import torch
    from torch_geometric.nn import GCNConv

    out = hidden // 2

    class LinkGCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = GCNConv(in_dim, hidden), GCNConv(hidden, out)
            self.mlp = (torch.nn.Sequential(torch.nn.Linear(out, out), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                            torch.nn.Linear(out, 1)) if decoder == "mlp" else None)

        def encode(self, x: Any, ei: Any) -> Any:
            x = torch.nn.functional.dropout(x, dropout, self.training)
            x = torch.relu(self.c1(x, ei))
            x = torch.nn.functional.dropout(x, dropout, self.training)
            return self.c2(x, ei)

        def decode(self, h: Any, pairs: Any) -> Any:
            had = h[pairs[0]] * h[pairs[1]]
            return had.sum(-1) if self.mlp is None else self.mlp(had).view(-1)

    return LinkGCN()


def shared_mrr(pos: Any, neg: Any) -> float:
    """MRR of each positive against all negatives of its part ("shared" protocol)."""
    from xmask_cli.engine.metrics import mrr

    return mrr(pos.view(-1), neg.view(1, -1).expand(pos.numel(), -1))


def run_link(graphs: Any, decoder: str, seed: int, epochs: int, patience: int, hp: dict[str, Any] | None = None,
             parts: tuple[str, ...] = ("val", "test")) -> dict[str, Any]:
    """One seed of the GCN link peer; ``hp`` overrides lr, weight_decay, hidden, dropout and decoder; ``parts``
    are scored at the end (a search leaves test out: it is never computed)."""
    import torch

    from xmask_cli.engine.splits import edge_split

    data = graphs.dataset[0]
    n = int(data.num_nodes)
    split = edge_split(data.edge_index, n, seed=seed, fractions=LINK_FRACTIONS, num_neg_per_pos=1)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    mp_ei, train_pos = t(split.train_edge_index), t(split.train_pos)
    pos = {"val": t(split.val_pos), "test": t(split.test_pos)}
    neg = {"val": t(split.val_neg), "test": t(split.test_neg)}
    x = _features(data)
    hp = {"lr": 0.01, "weight_decay": 5e-4, "decoder": decoder, **(hp or {})}
    _seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = _link_model(x.size(1), hp["decoder"], **{k: hp[k] for k in ("hidden", "dropout") if k in hp})
    opt = make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sel = _Selector(patience)

    @torch.no_grad()
    def score(part: str) -> float:
        model.eval()
        h = model.encode(x, mp_ei)
        return shared_mrr(model.decode(h, pos[part]), model.decode(h, neg[part]))

    epoch = -1
    p = train_pos.size(1)
    for epoch in range(epochs):
        model.train()
        opt.zero_grad(set_to_none=True)
        negs = torch.randint(0, n, (2, p), generator=gen)
        h = model.encode(x, mp_ei)
        logits = torch.cat([model.decode(h, train_pos), model.decode(h, negs)])
        target = torch.cat([torch.ones(p), torch.zeros(p)])
        torch.nn.functional.binary_cross_entropy_with_logits(logits, target).backward()
        opt.step()
        if sel.update(model, score("val"), epoch):
            break
    model.load_state_dict(sel.state)
    return {"metrics": {part: score(part) for part in parts}, "best_epoch": sel.best_epoch,
            "epochs_run": epoch + 1,
            "split": {"seed": seed, "train_pairs": p, "val": int(pos["val"].size(1)), "test": int(pos["test"].size(1)),
                      "val_neg": int(neg["val"].size(1)), "test_neg": int(neg["test"].size(1))}}


# ------------------------------- published recipes and graph transformers
# Every peer of this section trains under xmask's protocol: xmask's split functions (the dataset's registry
# split, seeded as xmask's run), xmask's selection rule (:class:`xmask_cli.engine.selection.Selection`: the
# best validation metric, ties by the validation loss, then the later epoch; the selected state restored and
# test scored once on it) and the epoch budget and patience of the xmask preset of the row's dataset
# (``train.epochs`` / ``train.patience``; ``--epochs`` / ``--patience`` cut both sides' budget in a table).

#: Node peers: the protocol GCN / GAT (tuned space, above), the PyG examples' published recipes, and the
#: graph transformers PyG ships.
NODE_MODELS = ("GCN", "GAT", "GCN-example", "GAT-example", "SGFormer", "Polynormer", "GPS")
#: Graph peers: GIN (above) and GPS.
GRAPH_MODELS = ("GIN", "GPS")
TRANSFORMER_PEERS = ("SGFormer", "Polynormer", "GPS")

# SGFormer (``torch_geometric.nn.models.SGFormer``), the authors' settings mapped onto PyG's arguments:
# Cora / CiteSeer from github.com/qitianwu/SGFormer ``medium/run.sh`` (``--num_layers`` -> gnn_num_layers,
# ``--ours_layers`` -> trans_num_layers, ``--dropout`` / ``--ours_dropout`` -> gnn / trans dropout,
# ``--weight_decay`` / ``--ours_weight_decay`` -> the GNN+head / attention parameter groups, raw features:
# ``--no_feat_norm``). The authors publish no Amazon / Coauthor setting; those rows take their full-batch
# ogbn-arxiv setting (``large/run.sh``: hidden 256, lr 1e-3, 3 GCN layers, dropout 0.5, no weight decay).
SGFORMER_HP: dict[str, dict[str, Any]] = {
    "Cora": {"hidden": 64, "trans_layers": 1, "trans_dropout": 0.2, "gnn_layers": 4, "gnn_dropout": 0.5,
             "graph_weight": 0.8, "lr": 0.01, "weight_decay": 5e-4, "trans_weight_decay": 1e-3,
             "source": "qitianwu/SGFormer medium/run.sh (cora)"},
    "CiteSeer": {"hidden": 64, "trans_layers": 1, "trans_dropout": 0.3, "gnn_layers": 4, "gnn_dropout": 0.5,
                 "graph_weight": 0.7, "lr": 0.005, "weight_decay": 0.01, "trans_weight_decay": 0.01,
                 "source": "qitianwu/SGFormer medium/run.sh (citeseer)"},
    "default": {"hidden": 256, "trans_layers": 1, "trans_dropout": 0.5, "gnn_layers": 3, "gnn_dropout": 0.5,
                "graph_weight": 0.5, "lr": 0.001, "weight_decay": 0.0, "trans_weight_decay": 0.0,
                "source": "qitianwu/SGFormer large/run.sh (ogbn-arxiv; no published Amazon / Coauthor setting)"},
}

# Polynormer: the authors' settings from github.com/cornell-zhang/Polynormer ``run.sh`` (homophilic block).
# ``local_epochs`` / ``global_epochs`` are theirs; a run scales both to the row's budget (see
# :func:`polynormer_phases`). Cora / CiteSeer have no published setting: they take coauthor-cs's (the
# closest: a citation-type graph with bag-of-words features). The authors' ``--beta -1`` default (a learned
# beta in their code) has no PyG counterpart: PyG's fixed 0.9 where run.sh leaves it unset.
POLYNORMER_HP: dict[str, dict[str, Any]] = {
    "Computers": {"hidden": 64, "local_layers": 5, "global_layers": 1, "heads": 8, "in_dropout": 0.2,
                  "dropout": 0.7, "global_dropout": 0.7, "lr": 0.001, "weight_decay": 5e-5, "beta": 0.9,
                  "local_epochs": 200, "global_epochs": 1000,
                  "source": "cornell-zhang/Polynormer run.sh (amazon-computer)"},
    "Physics": {"hidden": 32, "local_layers": 5, "global_layers": 4, "heads": 8, "in_dropout": 0.1,
                "dropout": 0.5, "global_dropout": 0.5, "lr": 0.001, "weight_decay": 5e-4, "beta": 0.9,
                "local_epochs": 100, "global_epochs": 1500,
                "source": "cornell-zhang/Polynormer run.sh (coauthor-physics)"},
    "default": {"hidden": 64, "local_layers": 5, "global_layers": 2, "heads": 8, "in_dropout": 0.1,
                "dropout": 0.3, "global_dropout": 0.3, "lr": 0.001, "weight_decay": 5e-4, "beta": 0.9,
                "local_epochs": 100, "global_epochs": 1500,
                "source": "cornell-zhang/Polynormer run.sh (coauthor-cs; no published Cora / CiteSeer setting)"},
}

# GPS: PyG's examples/graph_gps.py configuration: channels 64 (56 for the input, 8 for the random-walk
# encoding of walk length 20, batch-normalised), 10 GPSConv layers with a GIN local layer (a 2-layer MLP; the
# example's GINE reads ZINC's bond types, which these sets do not have) and 4-head multi-head attention
# (dropout 0.5), sum pooling and a 64-32-16 MLP head; Adam lr 1e-3, weight decay 1e-5, ReduceLROnPlateau
# (factor 0.5, patience 20, min 1e-5) on the validation loss. Node level: the same network on the whole
# graph as one sequence (attention over all N nodes), the head applied per node.
GPS_HP: dict[str, Any] = {"channels": 64, "pe_dim": 8, "walk_length": 20, "layers": 10, "heads": 4,
                          "attn_dropout": 0.5, "lr": 1e-3, "weight_decay": 1e-5,
                          "source": "pyg-team/pytorch_geometric examples/graph_gps.py"}


def preset_name(dataset: str) -> str:
    """The xmask preset whose budget a dataset's row shares (``cora``, ``computers``, ``ogbg-molhiv``, ...)."""
    return dataset.lower()


def preset_budget(dataset: str, preset: str | None = None) -> dict[str, int]:
    """``train.epochs``, ``train.patience`` and ``train.batch_size`` of the dataset's xmask preset (or ``preset``)."""
    from xmask_cli.config_resolve import resolve

    t = resolve(preset or preset_name(dataset)).train
    return {"epochs": int(t.epochs), "patience": int(t.patience), "batch_size": int(t.batch_size)}


def polynormer_phases(local_epochs: int, global_epochs: int, budget: int) -> tuple[int, int]:
    """``(local, global)`` epochs within ``budget``: the authors' local warm-up, at most half the budget,
    the rest global (their runs total 1,100-1,600 epochs; xmask's presets 200-1,000)."""
    if local_epochs + global_epochs <= budget:
        return local_epochs, global_epochs
    local = min(local_epochs, budget // 2)
    return local, budget - local


def count_parameters(model: Any) -> int:
    """Trainable parameters of a torch module."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def polynormer_model(in_dim: int, out_dim: int, hidden: int, heads: int, local_layers: int, global_layers: int,
                     in_dropout: float, dropout: float, global_dropout: float, beta: float,
                     qk_shared: bool = False) -> Any:
    """PyG's ``Polynormer`` whose global layers take the width they receive.

    PyG 2.8.1 builds each ``PolynormerAttention`` with ``channels=hidden_channels`` while the local stack
    hands it ``heads * hidden_channels`` features, so ``heads > 1`` fails at the first global epoch. The
    authors' model builds them with ``heads * hidden`` inputs and ``hidden`` channels per head; this
    subclass rebuilds ``global_attn`` that way (``heads == 1`` leaves PyG's model untouched)."""
    import torch
    from torch_geometric.nn.attention import PolynormerAttention
    from torch_geometric.nn.models import Polynormer

    class WidePolynormer(Polynormer):
        def __init__(self) -> None:
            super().__init__(in_dim, hidden, out_dim, local_layers=local_layers, global_layers=global_layers,
                             in_dropout=in_dropout, dropout=dropout, global_dropout=global_dropout, heads=heads,
                             beta=beta, qk_shared=qk_shared)
            if heads > 1:
                self.global_attn = torch.nn.ModuleList(
                    PolynormerAttention(channels=heads * hidden, heads=heads, head_channels=hidden, beta=beta,
                                        dropout=global_dropout, qk_shared=qk_shared)
                    for _ in range(global_layers))

    return WidePolynormer()


def _gps_model(in_dim: int, out_dim: int, level: str, hp: dict[str, Any] = GPS_HP) -> Any:
    """GPS as PyG's example builds it (see :data:`GPS_HP`); ``level`` ``graph`` pools, ``node`` does not."""
    import torch
    from torch.nn import BatchNorm1d, Linear, ReLU, Sequential
    from torch_geometric.nn import GINConv, GPSConv, global_add_pool

    c, pe_dim, walk = int(hp["channels"]), int(hp["pe_dim"]), int(hp["walk_length"])

    class GPS(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.node_lin = Linear(in_dim, c - pe_dim)
            self.pe_norm, self.pe_lin = BatchNorm1d(walk), Linear(walk, pe_dim)
            self.convs = torch.nn.ModuleList(
                GPSConv(c, GINConv(Sequential(Linear(c, c), ReLU(), Linear(c, c))), heads=int(hp["heads"]),
                        attn_type="multihead", attn_kwargs={"dropout": float(hp["attn_dropout"])})
                for _ in range(int(hp["layers"])))
            self.head = Sequential(Linear(c, c // 2), ReLU(), Linear(c // 2, c // 4), ReLU(),
                                   Linear(c // 4, out_dim))

        def forward(self, x: Any, pe: Any, ei: Any, batch: Any, num_graphs: int | None = None) -> Any:
            h = torch.cat([self.node_lin(x), self.pe_lin(self.pe_norm(pe))], dim=1)
            for conv in self.convs:
                h = conv(h, ei, batch)
            if level == "graph":
                h = global_add_pool(h, batch, size=num_graphs)
            return self.head(h)

    return GPS()


def random_walk_pe(data: Any, walk_length: int) -> tuple[Any, float]:
    """``(pe, seconds)``: PyG's ``AddRandomWalkPE`` of one graph (the GPS peer's precompute) and its time."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE

    t = time.perf_counter()
    out = AddRandomWalkPE(walk_length=walk_length, attr_name="pe")(
        Data(edge_index=data.edge_index, num_nodes=int(data.num_nodes)))
    return out.pe, time.perf_counter() - t


def fit_selected(model: Any, opt: Any, train_epoch: Callable[[], None],
                 evaluate: Callable[[str], tuple[float, float]], epochs: int, patience: int,
                 on_epoch: Callable[[int, Any], None] | None = None,
                 after_eval: Callable[[float, float], None] | None = None) -> dict[str, Any]:
    """Train under xmask's selection rule; the selected state is loaded into ``model`` on return.

    ``evaluate(part)`` gives ``(metric, loss)``; ``on_epoch(epoch, fit)`` runs before an epoch (Polynormer's
    phase switch; ``fit`` holds the best state and the :class:`Selection`); ``after_eval(val, val_loss)``
    after each validation (a scheduler). Returns the best / run epochs and the training seconds per epoch."""
    from xmask_cli.engine.selection import Selection

    fit = types_namespace(sel=Selection(), state=None, opt_state=None)
    times: list[float] = []
    epoch = -1
    for epoch in range(epochs):
        if on_epoch is not None:
            on_epoch(epoch, fit)
        t = time.perf_counter()
        train_epoch()
        times.append(time.perf_counter() - t)
        val, val_loss = evaluate("val")
        if after_eval is not None:
            after_eval(val, val_loss)
        if fit.sel.update(val, val_loss, epoch, higher=True):
            fit.state, fit.opt_state = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
        if fit.sel.bad_epochs >= patience:
            break
    model.load_state_dict(fit.state)
    return {"best_epoch": fit.sel.best_epoch, "epochs_run": epoch + 1, "epoch_seconds": times,
            "seconds_per_epoch": float(np.median(times)) if times else None}


def types_namespace(**kw: Any) -> Any:
    """A mutable record (``types.SimpleNamespace``)."""
    import types

    return types.SimpleNamespace(**kw)


def _row_normalize(x: Any) -> Any:
    return x / x.sum(-1, keepdim=True).clamp(min=1.0)


def run_node_peer(graphs: Any, kind: str, seed: int, epochs: int, patience: int, probe_epochs: int = 0,
                  parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of a published-recipe or graph-transformer node peer (``kind`` in :data:`NODE_MODELS`,
    not GCN / GAT), on the dataset's registry split (xmask's ``node_split``) and under xmask's selection
    rule, at most ``epochs`` epochs with ``patience``. ``probe_epochs > 0`` trains that many epochs only and
    reports their time (no selection, no metrics): what a row too slow to finish is measured with."""
    import torch
    import torch.nn.functional as F

    from xmask_cli.engine.metrics import METRICS
    from xmask_cli.engine.splits import node_split

    data = graphs.dataset[0]
    split = node_split(graphs.spec.split, data, seed=seed)
    idx = {p: torch.as_tensor(getattr(split, p)) for p in parts}
    x, ei, y = data.x.float(), data.edge_index, data.y.view(-1)
    if x.is_sparse:
        x = x.to_dense()
    n, in_dim, out_dim = int(data.num_nodes), x.size(1), int(y.max()) + 1
    metric = METRICS[graphs.spec.metric]
    batch = torch.zeros(n, dtype=torch.long)
    _seed(seed)
    info: dict[str, Any] = {"precompute_seconds": None}
    on_epoch = None
    if kind in ("GCN-example", "GAT-example"):
        # PyG's examples/gcn.py and gat.py: NormalizeFeatures, Adam with L2 5e-4 (GCN: first layer only).
        x = _row_normalize(x)
        if kind == "GCN-example":
            model = _node_model("GCN", in_dim, out_dim, hidden=16, dropout=0.5)
            opt = torch.optim.Adam([{"params": model.c1.parameters(), "weight_decay": 5e-4},
                                    {"params": model.c2.parameters(), "weight_decay": 0.0}], lr=0.01)
        else:
            model = _node_model("GAT", in_dim, out_dim, hidden=8, dropout=0.6)
            opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        def forward() -> Any:
            return model(x, ei)

        info["hp"] = {"source": f"pyg-team/pytorch_geometric examples/{kind.split('-')[0].lower()}.py"}
    elif kind == "SGFormer":
        from torch_geometric.nn.models import SGFormer

        hp = SGFORMER_HP.get(graphs.spec.name, SGFORMER_HP["default"])
        model = SGFormer(in_dim, hp["hidden"], out_dim, trans_num_layers=hp["trans_layers"], trans_num_heads=1,
                         trans_dropout=hp["trans_dropout"], gnn_num_layers=hp["gnn_layers"],
                         gnn_dropout=hp["gnn_dropout"], graph_weight=hp["graph_weight"])
        # The authors' optimiser: Adam, the attention with its own weight decay, the GNN and head another.
        opt = torch.optim.Adam([{"params": model.params1, "weight_decay": hp["trans_weight_decay"]},
                                {"params": model.params2, "weight_decay": hp["weight_decay"]}], lr=hp["lr"])
        def forward() -> Any:
            return model(x, ei, batch)

        info["hp"] = hp
    elif kind == "Polynormer":
        hp = POLYNORMER_HP.get(graphs.spec.name, POLYNORMER_HP["default"])
        model = polynormer_model(in_dim, out_dim, **{k: hp[k] for k in (
            "hidden", "heads", "local_layers", "global_layers", "in_dropout", "dropout", "global_dropout",
            "beta")})
        opt = torch.optim.Adam(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        local, glob = polynormer_phases(hp["local_epochs"], hp["global_epochs"], probe_epochs or epochs)
        if probe_epochs:  # time both phases: half the probe each
            local = probe_epochs // 2
        def forward() -> Any:
            return model(x, ei, batch)

        def on_epoch(epoch: int, fit: Any) -> None:
            # The authors' switch: the best local state (weights and optimiser) reloaded, then global attention;
            # the local warm-up runs in full (patience counts from the switch).
            if epoch == local:
                if fit.state is not None:
                    model.load_state_dict(fit.state)
                    opt.load_state_dict(fit.opt_state)
                model._global = True
                fit.sel.bad_epochs = 0

        info["hp"] = {**hp, "phases": [local, glob]}
    elif kind == "GPS":
        pe, info["precompute_seconds"] = random_walk_pe(data, GPS_HP["walk_length"])
        model = _gps_model(in_dim, out_dim, "node")
        opt = torch.optim.Adam(model.parameters(), lr=GPS_HP["lr"], weight_decay=GPS_HP["weight_decay"])
        def forward() -> Any:
            return model(x, pe, ei, None)

        info["hp"] = GPS_HP
    else:
        raise ValueError(f"unknown node peer {kind!r}: expected one of {NODE_MODELS[2:]}")
    info["params"] = count_parameters(model)

    def train_epoch() -> None:
        model.train()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(forward()[idx["train"]], y[idx["train"]]).backward()
        opt.step()

    @torch.no_grad()
    def evaluate(part: str) -> tuple[float, float]:
        model.eval()
        out = forward()[idx[part]]
        return metric(out, y[idx[part]]), float(F.cross_entropy(out, y[idx[part]]))

    split_info = {"name": split.name, "seed": seed, **dict(zip(("train", "val", "test"), split.sizes()))}
    if probe_epochs:
        times = []
        for epoch in range(probe_epochs):
            if on_epoch is not None:
                on_epoch(epoch, types_namespace(state=None, opt_state=None, sel=types_namespace(bad_epochs=0)))
            t = time.perf_counter()
            train_epoch()
            times.append(time.perf_counter() - t)
        return {"metrics": None, "probe_epochs": probe_epochs, "epoch_seconds": times,
                "seconds_per_epoch": float(np.median(times)), "best_epoch": None, "epochs_run": probe_epochs,
                "split": split_info, **info}
    res = fit_selected(model, opt, train_epoch, evaluate, epochs, patience, on_epoch=on_epoch)
    return {"metrics": {p: evaluate(p)[0] for p in parts}, **res, "split": split_info, **info}


def gps_graph_data(data_list: list[Any], walk_length: int = GPS_HP["walk_length"]) -> tuple[list[Any], float]:
    """``(graphs with .pe, seconds)``: the random-walk encodings of every graph (GPS's precompute)."""
    out, total = [], 0.0
    for d in data_list:
        pe, s = random_walk_pe(d, walk_length)
        g = d.clone()
        g.pe = pe
        out.append(g)
        total += s
    return out, total


def run_graph_gps(graphs: Any, data_list: list[Any], seed: int, epochs: int, patience: int, batch_size: int = 32,
                  probe_batches: int = 0, precompute_seconds: float | None = None,
                  parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of the GPS graph peer on xmask's ``graph_split`` of the dataset, under xmask's selection rule.
    ``data_list`` carries ``.pe`` (:func:`gps_graph_data`). ``probe_batches > 0`` times that many training
    batches and extrapolates one epoch (no selection, no metrics)."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.loader import DataLoader

    from xmask_cli.engine.metrics import METRICS
    from xmask_cli.engine.splits import graph_split

    split = graph_split(graphs.spec.split, graphs.dataset, seed=seed)
    metric = METRICS[graphs.spec.metric]
    sets = {p: [data_list[int(i)] for i in getattr(split, p)] for p in parts}
    _seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(sets["train"], batch_size=batch_size, shuffle=True, generator=gen)
    eval_loaders = {p: DataLoader(s, batch_size=batch_size, shuffle=False) for p, s in sets.items()}
    num_classes = int(max(int(d.y) for d in data_list)) + 1
    model = _gps_model(data_list[0].x.size(1), num_classes, "graph")
    opt = torch.optim.Adam(model.parameters(), lr=GPS_HP["lr"], weight_decay=GPS_HP["weight_decay"])
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=20, min_lr=1e-5)

    def fwd(b: Any) -> Any:
        return model(b.x, b.pe, b.edge_index, b.batch, b.num_graphs)

    info = {"params": count_parameters(model), "precompute_seconds": precompute_seconds, "hp": GPS_HP,
            "split": {"name": split.name, "seed": seed, **dict(zip(("train", "val", "test"), split.sizes()))}}

    def train_epoch(limit: int = 0) -> int:
        model.train()
        done = 0
        for b in train_loader:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(fwd(b), b.y).backward()
            opt.step()
            done += 1
            if limit and done >= limit:
                break
        return done

    @torch.no_grad()
    def evaluate(part: str) -> tuple[float, float]:
        model.eval()
        outs, ys = [], []
        for b in eval_loaders[part]:
            outs.append(fwd(b))
            ys.append(b.y)
        out, y = torch.cat(outs), torch.cat(ys)
        return metric(out, y), float(F.cross_entropy(out, y))

    if probe_batches:
        t = time.perf_counter()
        done = train_epoch(probe_batches)
        per_batch = (time.perf_counter() - t) / done
        return {"metrics": None, "probe_batches": done, "seconds_per_batch": per_batch,
                "seconds_per_epoch": per_batch * len(train_loader), "best_epoch": None, "epochs_run": 0, **info}
    res = fit_selected(model, opt, train_epoch, evaluate, epochs, patience,
                       after_eval=lambda val, loss: sched.step(loss))
    return {"metrics": {p: evaluate(p)[0] for p in parts}, **res, **info}


# ---------------------------------------------------------------- driver
def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean / population std of val and test per (task, dataset, model), in first-seen order."""
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        rows.setdefault((r["task"], r["dataset"], r["model"]), []).append(r)
    out = []
    for (task, ds, model), rs in rows.items():
        row: dict[str, Any] = {"task": task, "dataset": ds, "model": model, "metric": rs[0]["metric"],
                               "seeds": [r["seed"] for r in rs]}
        scored = [r for r in rs if r["metrics"] is not None]  # a probe (--probe-epochs) scores nothing
        for part in ("val", "test"):
            vals = np.array([r["metrics"][part] for r in scored], dtype=np.float64)
            row[part] = ({"mean": float(vals.mean()), "std": float(vals.std()), "values": vals.tolist()}
                         if scored else None)
        row["epochs_run_mean"] = float(np.mean([r["epochs_run"] for r in rs]))
        row["seconds_per_run_mean"] = float(np.mean([r["seconds"] for r in rs]))
        for key in ("seconds_per_epoch", "precompute_seconds", "params"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
        row["probe"] = not scored
        out.append(row)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = ["task", "dataset", "model", "metric", "seeds", "val (mean ± std)", "test (mean ± std)", "epochs", "s / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 5 + ["---:"] * 4) + "|"]
    for r in rows:
        scale = 100.0 if r["metric"] == "accuracy" else 1.0
        fmt = "{:.2f} ± {:.2f}" if scale == 100.0 else "{:.4f} ± {:.4f}"

        def cell(v: dict[str, Any] | None, fmt: str = fmt, scale: float = scale) -> str:
            return "probe only" if v is None else fmt.format(v["mean"] * scale, v["std"] * scale)

        cells = [r["task"], r["dataset"], r["model"], r["metric"] + (" (%)" if scale == 100.0 else ""),
                 str(len(r["seeds"])), cell(r["val"]), cell(r["test"]),
                 f"{r['epochs_run_mean']:.0f}", f"{r['seconds_per_run_mean']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def peak_rss_mb() -> float | None:
    """This process's peak resident set size so far, MB (``ru_maxrss``; None where unavailable)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch_geometric

    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "seeds": args.seeds, "only": args.only, "optimizer": args.optimizer,
            "normalize_features": args.normalize_features, "data_root": str(args.data_root),
            "epochs": {"node": [args.node_epochs, args.node_patience], "graph": [args.graph_epochs, args.graph_patience],
                       "link": [args.link_epochs, args.link_patience]},
            "node_models": args.node_models, "graph_models": args.graph_models,
            "node_datasets": args.node_datasets, "budget_override": [args.epochs, args.patience],
            "probe": {"epochs": args.probe_epochs, "batches": args.probe_batches},
            "command": " ".join([Path(sys.executable).name, *sys.argv])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Graph-transformer peers: SGFormer, Polynormer (--node-models), GPS "
                                       "(--node-models, --graph-models).")
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT, help="raw datasets (default: %(default)s)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the loaders write processed/ (default: a temporary dir)")
    p.add_argument("--seeds", type=parse_seeds, default=list(range(5)), help="e.g. 0-4 or 0,3 (default: 0-4)")
    p.add_argument("--only", default=",".join(TASKS), help="comma-separated subset of node,graph,link (default: all)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw",
                   help="adamw: the protocol's (decoupled weight decay); adam-l2: Adam with L2, as the peers' "
                        "papers train (default: %(default)s)")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise Cora / CiteSeer features for node and link peers, as PyG's examples do "
                        "(default: raw features, the input xmask gets)")
    p.add_argument("--node-epochs", type=int, default=300)
    p.add_argument("--node-patience", type=int, default=50)
    p.add_argument("--graph-datasets", default=",".join(GRAPH_DATASETS),
                   help="comma-separated graph datasets for GIN (default: %(default)s; NCI1 also works)")
    p.add_argument("--graph-epochs", type=int, default=150)
    p.add_argument("--graph-patience", type=int, default=30)
    p.add_argument("--folds", type=int, default=0,
                   help="graph: run the fold protocol (Errica et al.) with this many outer folds on "
                        "--graph-datasets for GIN (5 layers) and the structure-agnostic baseline, on xmask's folds")
    p.add_argument("--clip-norm", type=float, default=1.0, help="fold protocol: gradient clipping (xmask's default)")
    p.add_argument("--link-epochs", type=int, default=300)
    p.add_argument("--link-patience", type=int, default=50)
    p.add_argument("--out", type=Path, default=HERE / "out" / "peers.json", help="JSON results (default: %(default)s)")
    p.add_argument("--node-datasets", default=",".join(NODE_DATASETS),
                   help="comma-separated node datasets (default: %(default)s; Computers, Physics also work)")
    p.add_argument("--node-models", default="GCN,GAT",
                   help=f"comma-separated node peers among {', '.join(NODE_MODELS)} (default: %(default)s). "
                        "GCN-example / GAT-example: PyG's examples/gcn.py and gat.py recipes; graph transformers: "
                        "SGFormer, Polynormer (PyG's classes, the authors' settings), GPS (GPSConv, PyG's "
                        "graph_gps.py configuration) on the whole graph")
    p.add_argument("--graph-models", default="GIN",
                   help=f"comma-separated graph peers among {', '.join(GRAPH_MODELS)} (default: %(default)s); "
                        "GPS: GPSConv with a GIN local layer and 4-head attention, PyG's graph_gps.py configuration")
    p.add_argument("--epochs", type=int, default=None,
                   help="epoch budget of the published-recipe and graph-transformer peers (default: the train.epochs "
                        "of the dataset's xmask preset)")
    p.add_argument("--patience", type=int, default=None,
                   help="their patience (default: the train.patience of the dataset's xmask preset)")
    p.add_argument("--probe-epochs", type=int, default=0,
                   help="node transformer / recipe peers: train this many epochs and report their time only "
                        "(no selection, no test): for rows too slow to finish")
    p.add_argument("--probe-batches", type=int, default=0,
                   help="graph GPS: time this many training batches and extrapolate an epoch (no test)")
    args = p.parse_args(argv)
    only = [t.strip() for t in args.only.split(",") if t.strip()]
    bad = [t for t in only if t not in TASKS]
    if bad:
        p.error(f"--only: unknown task(s) {bad}; expected {', '.join(TASKS)}")
    node_models = [m.strip() for m in args.node_models.split(",") if m.strip()]
    graph_models = [m.strip() for m in args.graph_models.split(",") if m.strip()]
    node_datasets = [d.strip() for d in args.node_datasets.split(",") if d.strip()]
    for flag, got, known in (("--node-models", node_models, NODE_MODELS), ("--graph-models", graph_models, GRAPH_MODELS)):
        if [m for m in got if m not in known]:
            p.error(f"{flag}: unknown peer(s) {[m for m in got if m not in known]}; expected {', '.join(known)}")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    _OPTIMIZER[0] = args.optimizer
    _NORMALIZE[0] = args.normalize_features
    meta = environment(args)
    tmp = tempfile.TemporaryDirectory(prefix="xmask-peers-") if args.cache_dir is None else None
    cache_dir = args.cache_dir or Path(tmp.name)
    runs: list[dict[str, Any]] = []

    def save() -> list[dict[str, Any]]:
        rows = summarize(runs)
        meta["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        meta["peak_rss_mb"] = peak_rss_mb()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=2) + "\n")
        return rows

    def record(task: str, ds: str, model: str, metric: str, seed: int, fn: Callable[..., dict[str, Any]],
               *fn_args: Any, **fn_kwargs: Any) -> None:
        t = time.perf_counter()
        res = fn(*fn_args, **fn_kwargs)
        res = {"task": task, "dataset": ds, "model": model, "metric": metric, "seed": seed,
               "seconds": time.perf_counter() - t, **res}
        runs.append(res)
        scores = ("probe" if res["metrics"] is None else
                  f"val {res['metrics']['val']:.4f} test {res['metrics']['test']:.4f}")
        print(f"{task} {ds} {model} seed {seed}: {scores} (best epoch {res['best_epoch']}, {res['epochs_run']} "
              f"epochs, {res['seconds']:.1f}s)", file=sys.stderr, flush=True)
        save()

    try:
        if "node" in only:
            for ds in node_datasets:
                graphs = _load(ds, args.data_root, cache_dir)
                budget = preset_budget(ds)
                epochs, patience = args.epochs or budget["epochs"], args.patience or budget["patience"]
                for model in node_models:
                    for s in args.seeds:
                        if model in ("GCN", "GAT"):  # the protocol peers, tuned space (their own budget flags)
                            record("node", ds, model, "accuracy", s,
                                   run_node, graphs, model, s, args.node_epochs, args.node_patience)
                        else:
                            record("node", ds, model, graphs.spec.metric, s,
                                   run_node_peer, graphs, model, s, epochs, patience, probe_epochs=args.probe_epochs)
        if "graph" in only and args.folds:
            from xmask_cli.config_resolve import resolve
            from xmask_cli.engine.tasks.graph import graph_labels

            for ds in args.graph_datasets.split(","):
                graphs = _load(ds, args.data_root, cache_dir)
                # The input xmask's shipped preset for the set reads (its model.node_struct channels included).
                preset = ds.lower() if ds.lower() in ("mutag", "proteins", "nci1", "dd", "imdb-binary") else "graph-level"
                data_list = graph_data_list(graphs, resolve(preset).model.node_struct)
                labels = graph_labels(graphs)
                for model in FOLD_MODELS:
                    for s in args.seeds:
                        for i in range(args.folds):
                            record("graph-folds", ds, model, "accuracy", s,
                                   run_graph_fold, data_list, labels, model, s, args.folds, i,
                                   args.graph_epochs, args.graph_patience, args.clip_norm)
        elif "graph" in only:
            from xmask_cli.config_resolve import resolve

            for ds in args.graph_datasets.split(","):
                graphs = _load(ds, args.data_root, cache_dir)
                if "GIN" in graph_models:
                    data_list = graph_data_list(graphs)
                    for s in args.seeds:
                        record("graph", ds, "GIN", graphs.spec.metric, s,
                               run_graph, graphs, data_list, s, args.graph_epochs, args.graph_patience)
                if "GPS" in graph_models:
                    budget = preset_budget(ds)
                    epochs, patience = args.epochs or budget["epochs"], args.patience or budget["patience"]
                    # The input the dataset's xmask preset reads (its model.node_struct channels included).
                    gps_list, pe_seconds = gps_graph_data(
                        graph_data_list(graphs, resolve(preset_name(ds)).model.node_struct))
                    for s in args.seeds:
                        record("graph", ds, "GPS", graphs.spec.metric, s,
                               run_graph_gps, graphs, gps_list, s, epochs, patience, budget["batch_size"],
                               probe_batches=args.probe_batches, precompute_seconds=pe_seconds)
        if "link" in only:
            for ds in LINK_DATASETS:
                graphs = _load(ds, args.data_root, cache_dir)
                for dec, name in (("dot", "GCN+dot"), ("mlp", "GCN+MLP")):
                    for s in args.seeds:
                        record("link", ds, name, "mrr", s,
                               run_link, graphs, dec, s, args.link_epochs, args.link_patience)
    finally:
        rows = save()
        if tmp is not None:
            tmp.cleanup()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
