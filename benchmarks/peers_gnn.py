"""The message-passing peers of ``peers.py`` under xmask's protocol, the ones ``tune_study.py`` searches:
GCN and GAT on nodes, GIN on graph sets, a GCN encoder with a dot or Hadamard-MLP decoder on links.

* node: GCN (2 layers, hidden 64, dropout 0.5, lr 0.01, wd 5e-4) and GAT (2 layers, 8 heads x 8, dropout
  0.6, lr 0.005, wd 5e-4); full-batch, on the dataset's registry split (``node_split``);
* graph: GIN (``GINConv`` layers with 2-layer MLPs and BatchNorm, hidden 64, sum readout, MLP head,
  dropout 0.5, lr 0.01), batch 32, on ``graph_split`` (random-8-1-1 for TU sets);
* link: a 2-layer GCN encoder (hidden 128 -> 64) over ``split.train_edge_index`` only; BCE on the training
  positives against as many uniformly drawn node pairs per epoch (a generator seeded by the run's seed);
  MRR with the "shared" protocol (:func:`xmask_cli.engine.scoring.mrr.link_mrr`): every val (test) positive is
  ranked against *all* ``val_neg`` (``test_neg``) pairs.

Selection reads the validation metric only (:class:`_Selector`: the first epoch reaching the best value,
early stopping with a patience); the best state is restored and the asked-for parts scored once on it.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402

#: Node peers of this family and their learning rate / weight decay (``tune_study.py`` searches both).
NODE_HPARAMS = {"GCN": {"lr": 0.01, "weight_decay": 5e-4}, "GAT": {"lr": 0.005, "weight_decay": 5e-4}}
#: Cora link prediction: xmask's ``edge_split`` fractions (train, val, test).
LINK_FRACTIONS = (0.85, 0.05, 0.10)
#: GIN weight decay: AdamW's default-like 1e-2, or none under Adam (PyG's GIN example uses none).
GRAPH_WEIGHT_DECAY = {"adamw": 1e-2, "adam-l2": 0.0}


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


def run_node(graphs: Any, kind: str, seed: int, epochs: int, patience: int, hp: dict[str, Any] | None = None,
             parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of a node peer; ``hp`` overrides lr, weight_decay, hidden, dropout; ``parts`` are scored at the end
    (a search leaves test out: it is never computed). The split is the dataset's registry split, as xmask's
    (``public`` for Planetoid; ``random-60-20-20`` for Amazon, drawn with ``seed`` as xmask's run ``seed``)."""
    import torch

    from xmask_cli.engine.scoring.metrics import accuracy
    from xmask_cli.engine.scoring.splits import node_split

    data = graphs.dataset[0]
    split = node_split(graphs.spec.split, data, seed=seed)
    idx = {p: torch.as_tensor(getattr(split, p)) for p in parts}
    x, ei, y = common.features(data), data.edge_index, data.y.view(-1)
    hp = {**NODE_HPARAMS[kind], **(hp or {})}
    common.seed(seed)
    model = _node_model(kind, x.size(1), int(y.max()) + 1, hidden=hp.get("hidden"), dropout=hp.get("dropout"))
    opt = common.make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
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


def run_graph(graphs: Any, data_list: list[Any], seed: int, epochs: int, patience: int,
              batch_size: int = 32, hp: dict[str, Any] | None = None,
              parts: tuple[str, ...] = ("train", "val", "test")) -> dict[str, Any]:
    """One seed of GIN; ``hp`` overrides lr, weight_decay, hidden, layers, dropout, batch_size; ``parts`` are
    scored at the end (a search leaves test out: it is never computed)."""
    from xmask_cli.engine.scoring.metrics import METRICS
    from xmask_cli.engine.scoring.splits import graph_split

    split = graph_split(graphs.spec.split, graphs.dataset, seed=seed)  # random-8-1-1 for TU sets, OGB's scaffold
    metric = METRICS[graphs.spec.metric]
    hp = {"lr": 0.01, "weight_decay": GRAPH_WEIGHT_DECAY[common.OPTIONS["optimizer"]], "batch_size": batch_size,
          **(hp or {})}
    train_loader, eval_loaders, num_classes = common.graph_loaders(data_list, split, parts, int(hp["batch_size"]),
                                                                    seed)
    model = _gin(data_list[0].x.size(1), num_classes,
                 **{k: hp[k] for k in ("hidden", "layers", "dropout") if k in hp})
    opt = common.make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sel = _Selector(patience)

    def score(part: str) -> float:
        return metric(*common.graph_logits(model, eval_loaders[part]))

    epoch = -1
    for epoch in range(epochs):
        common.graph_epoch(model, opt, train_loader, clip_norm=0.0)
        if sel.update(model, score("val"), epoch):
            break
    model.load_state_dict(sel.state)
    return {"metrics": {p: score(p) for p in parts}, "best_epoch": sel.best_epoch,
            "epochs_run": epoch + 1, "params": common.count_parameters(model),
            "split": common.split_info(split, seed)}


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


def run_link(graphs: Any, decoder: str, seed: int, epochs: int, patience: int, hp: dict[str, Any] | None = None,
             parts: tuple[str, ...] = ("val", "test")) -> dict[str, Any]:
    """One seed of the GCN link peer; ``hp`` overrides lr, weight_decay, hidden, dropout and decoder; ``parts``
    are scored at the end (a search leaves test out: it is never computed)."""
    import torch

    from xmask_cli.engine.scoring.mrr import link_mrr
    from xmask_cli.engine.scoring.splits import edge_split

    data = graphs.dataset[0]
    n = int(data.num_nodes)
    split = edge_split(data.edge_index, n, seed=seed, fractions=LINK_FRACTIONS, num_neg_per_pos=1)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    mp_ei, train_pos = t(split.train_edge_index), t(split.train_pos)
    pos = {"val": t(split.val_pos), "test": t(split.test_pos)}
    neg = {"val": t(split.val_neg), "test": t(split.test_neg)}
    x = common.features(data)
    hp = {"lr": 0.01, "weight_decay": 5e-4, "decoder": decoder, **(hp or {})}
    common.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = _link_model(x.size(1), hp["decoder"], **{k: hp[k] for k in ("hidden", "dropout") if k in hp})
    opt = common.make_optimizer(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sel = _Selector(patience)

    @torch.no_grad()
    def score(part: str) -> float:
        model.eval()
        h = model.encode(x, mp_ei)
        return link_mrr(model.decode(h, pos[part]), model.decode(h, neg[part]), "shared", num_neg_per_pos=1)

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


