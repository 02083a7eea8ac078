"""The published-recipe and graph-transformer peers of ``peers.py``, under xmask's protocol.

Every peer here trains on xmask's split functions (the dataset's registry split, seeded as xmask's run),
under xmask's selection rule (:class:`xmask_cli.engine.training.selection.Selection`: the best validation metric,
ties by the validation loss, then the later epoch; the selected state restored and test scored once on it)
and with the epoch budget and patience of the xmask preset of the row's dataset (``train.epochs`` /
``train.patience``; ``--epochs`` / ``--patience`` cut both sides' budget in a table):

* ``GCN-example`` / ``GAT-example``: PyG's ``examples/gcn.py`` (2 x GCNConv 16, dropout 0.5, Adam lr 0.01,
  L2 5e-4 on the first layer only) and ``examples/gat.py`` (8 heads x 8, ELU, dropout 0.6 on inputs and
  attention, a 1-head output layer, Adam lr 0.005, L2 5e-4), both on row-normalised features;
* ``SGFormer`` and ``Polynormer``: PyG's ``torch_geometric.nn.models`` classes with the authors' published
  settings per dataset (:data:`SGFORMER_HP`, :data:`POLYNORMER_HP`, each naming its source). PyG 2.8.1's
  ``Polynormer`` builds its global attention for ``hidden`` inputs but feeds it ``heads x hidden``, so
  ``heads > 1`` fails at the first global epoch; :func:`polynormer_model` subclasses it and rebuilds the
  global layers with ``heads x hidden`` inputs, as the authors' model does (heads=1: PyG's model unchanged);
* ``GPS``: ``GPSConv`` with a GIN local layer and 4-head attention in PyG's ``examples/graph_gps.py``
  configuration (:data:`GPS_HP`; random-walk encodings of length 20 are its precompute), at the graph level
  and, on the whole graph as one sequence, at the node level. A probe (``probe_epochs`` / ``probe_batches``)
  times a few epochs (batches) of a row too slow to finish.
"""
from __future__ import annotations

import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402
from peers_gnn import _node_model  # noqa: E402
from peers_tuned import TUNED_PEERS, tuned_setup  # noqa: E402

#: Node peers run by :func:`run_node_peer`: the PyG examples' published recipes, Luo et al.'s tuned classic
#: GNNs (``peers_tuned.py``) and the graph transformers PyG ships.
NODE_PEERS = ("GCN-example", "GAT-example", *TUNED_PEERS, "SGFormer", "Polynormer", "GPS")

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


def polynormer_phases(local_epochs: int, global_epochs: int, budget: int) -> tuple[int, int]:
    """``(local, global)`` epochs within ``budget``: the authors' local warm-up, at most half the budget,
    the rest global (their runs total 1,100-1,600 epochs; xmask's presets 200-1,000)."""
    if local_epochs + global_epochs <= budget:
        return local_epochs, global_epochs
    local = min(local_epochs, budget // 2)
    return local, budget - local


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


def _node_setup(kind: str, graphs: Any, data: Any, x: Any, out_dim: int, epochs: int,
                probe_epochs: int) -> types.SimpleNamespace:
    """One node peer's model, optimiser, ``forward()`` over the whole graph, ``on_epoch`` hook (Polynormer's
    phase switch, else None) and ``info`` (its settings and their source), as its recipe builds them.
    Polynormer's phases fit in ``epochs``, or in ``probe_epochs`` when > 0."""
    import torch

    ei, n, in_dim = data.edge_index, int(data.num_nodes), x.size(1)
    batch = torch.zeros(n, dtype=torch.long)
    info: dict[str, Any] = {"precompute_seconds": None}
    on_epoch = None
    if kind in TUNED_PEERS:
        peer = tuned_setup(kind, graphs.spec.name, data, x, out_dim)
        peer.info["params"] = common.count_parameters(peer.model)
        return peer
    if kind in ("GCN-example", "GAT-example"):
        # PyG's examples/gcn.py and gat.py: NormalizeFeatures, Adam with L2 5e-4 (GCN: first layer only).
        x = common.row_normalize(x)
        if kind == "GCN-example":
            model = _node_model("GCN", in_dim, out_dim, hidden=16, dropout=0.5)
            opt = torch.optim.Adam([{"params": model.c1.parameters(), "weight_decay": 5e-4},
                                    {"params": model.c2.parameters(), "weight_decay": 0.0}], lr=0.01)
        else:
            model = _node_model("GAT", in_dim, out_dim, hidden=8, dropout=0.6)
            opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        args: tuple[Any, ...] = (x, ei)
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
        args, info["hp"] = (x, ei, batch), hp
    elif kind == "Polynormer":
        hp = POLYNORMER_HP.get(graphs.spec.name, POLYNORMER_HP["default"])
        model = polynormer_model(in_dim, out_dim, **{k: hp[k] for k in (
            "hidden", "heads", "local_layers", "global_layers", "in_dropout", "dropout", "global_dropout",
            "beta")})
        opt = torch.optim.Adam(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        on_epoch, phases = _polynormer_switch(model, opt, hp, epochs, probe_epochs)
        args, info["hp"] = (x, ei, batch), {**hp, "phases": phases}
    elif kind == "GPS":
        pe, info["precompute_seconds"] = random_walk_pe(data, GPS_HP["walk_length"])
        model = _gps_model(in_dim, out_dim, "node")
        opt = torch.optim.Adam(model.parameters(), lr=GPS_HP["lr"], weight_decay=GPS_HP["weight_decay"])
        args, info["hp"] = (x, pe, ei, None), GPS_HP
    else:
        raise ValueError(f"unknown node peer {kind!r}: expected one of {NODE_PEERS}")
    info["params"] = common.count_parameters(model)
    return types.SimpleNamespace(model=model, opt=opt, forward=lambda: model(*args), on_epoch=on_epoch, info=info)


def _polynormer_switch(model: Any, opt: Any, hp: dict[str, Any], epochs: int,
                       probe_epochs: int) -> tuple[Any, list[int]]:
    """Polynormer's ``on_epoch`` hook and its ``[local, global]`` epochs within the budget (a probe: half of
    ``probe_epochs`` local). The authors' switch: the best local state (weights and optimiser) reloaded, then
    global attention; the local warm-up runs in full (patience counts from the switch)."""
    local, glob = polynormer_phases(hp["local_epochs"], hp["global_epochs"], probe_epochs or epochs)
    if probe_epochs:  # time both phases: half the probe each
        local = probe_epochs // 2

    def on_epoch(epoch: int, fit: Any) -> None:
        if epoch == local:
            if fit.state is not None:
                model.load_state_dict(fit.state)
                opt.load_state_dict(fit.opt_state)
            fit.sel.bad_epochs = 0
        model._global = epoch >= local  # set every epoch: a run resumed after the switch is global too

    return on_epoch, [local, glob]


def run_node_peer(graphs: Any, kind: str, seed: int, epochs: int, patience: int, probe_epochs: int = 0,
                  parts: tuple[str, ...] = ("train", "val", "test"), checkpoint: Path | None = None,
                  checkpoint_every: int = 1) -> dict[str, Any]:
    """One seed of a published-recipe or graph-transformer node peer (``kind`` in :data:`NODE_PEERS`), on the
    dataset's registry split (xmask's ``node_split``) and under xmask's selection rule, at most ``epochs``
    epochs with ``patience``. ``probe_epochs > 0`` trains that many epochs only and reports their time (no
    selection, no metrics): what a row too slow to finish is measured with. ``checkpoint``: a file written
    every ``checkpoint_every`` epochs that a killed run goes on from (:func:`peers_common.fit_selected`); the
    result records the budget (``epochs``, ``patience``) that ``peers.py --resume`` checks before reusing it."""
    import torch
    import torch.nn.functional as F

    from xmask_cli.engine.scoring.metrics import METRICS
    from xmask_cli.engine.scoring.splits import node_split

    data = graphs.dataset[0]
    split = node_split(graphs.spec.split, data, seed=seed)
    idx = {p: torch.as_tensor(getattr(split, p)) for p in parts}
    x, y = data.x.float(), data.y.view(-1)
    if x.is_sparse:
        x = x.to_dense()
    metric = METRICS[graphs.spec.metric]
    common.seed(seed)
    peer = _node_setup(kind, graphs, data, x, int(y.max()) + 1, epochs, probe_epochs)
    model, opt, forward = peer.model, peer.opt, peer.forward

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

    split_info = common.split_info(split, seed)
    if probe_epochs:
        times = []
        for epoch in range(probe_epochs):
            if peer.on_epoch is not None:
                peer.on_epoch(epoch, types.SimpleNamespace(state=None, opt_state=None,
                                                           sel=types.SimpleNamespace(bad_epochs=0)))
            t = time.perf_counter()
            train_epoch()
            times.append(time.perf_counter() - t)
            progress(epoch, 1, 1, times[-1])
        return {"metrics": None, "probe_epochs": probe_epochs, "epoch_seconds": times,
                "seconds_per_epoch": float(np.median(times)), "best_epoch": None, "epochs_run": probe_epochs,
                "split": split_info, **peer.info}
    res = common.fit_selected(model, opt, train_epoch, evaluate, epochs, patience, on_epoch=peer.on_epoch,
                              checkpoint=checkpoint, every=checkpoint_every)
    return {"metrics": {p: evaluate(p)[0] for p in parts}, **res, "epochs": epochs, "patience": patience,
            "split": split_info, **peer.info}


def progress(epoch: int, done: int, total: int, seconds: float) -> None:
    """One ``progress:`` line on stderr (what ``peers_epochs.py`` reads back from a run it stopped)."""
    print(f"progress: epoch {epoch} batch {done}/{total} {seconds:.2f} s", file=sys.stderr, flush=True)


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
                  parts: tuple[str, ...] = ("train", "val", "test"), probe_epochs: int = 0) -> dict[str, Any]:
    """One seed of the GPS graph peer on xmask's ``graph_split`` of the dataset, under xmask's selection rule.
    ``data_list`` carries ``.pe`` (:func:`gps_graph_data`). ``probe_epochs > 0`` times that many whole training
    epochs, ``probe_batches > 0`` that many batches extrapolated to an epoch (neither selects nor scores).
    Probes print a ``progress:`` line on stderr after every batch, so a run stopped at a wall limit shows
    how far it got."""
    import torch
    import torch.nn.functional as F

    from xmask_cli.engine.scoring.metrics import METRICS
    from xmask_cli.engine.scoring.splits import graph_split

    split = graph_split(graphs.spec.split, graphs.dataset, seed=seed)
    metric = METRICS[graphs.spec.metric]
    train_loader, eval_loaders, num_classes = common.graph_loaders(data_list, split, parts, batch_size, seed)
    model = _gps_model(data_list[0].x.size(1), num_classes, "graph")
    opt = torch.optim.Adam(model.parameters(), lr=GPS_HP["lr"], weight_decay=GPS_HP["weight_decay"])
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=20, min_lr=1e-5)

    def fwd(b: Any) -> Any:
        return model(b.x, b.pe, b.edge_index, b.batch, b.num_graphs)

    info = {"params": common.count_parameters(model), "precompute_seconds": precompute_seconds, "hp": GPS_HP,
            "split": common.split_info(split, seed)}

    def train_epoch(limit: int = 0, epoch: int | None = None) -> int:
        model.train()
        done, t = 0, time.perf_counter()
        for b in train_loader:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(fwd(b), b.y).backward()
            opt.step()
            done += 1
            if epoch is not None:
                progress(epoch, done, len(train_loader), time.perf_counter() - t)
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

    if probe_epochs:
        times = []
        for epoch in range(probe_epochs):
            t = time.perf_counter()
            train_epoch(epoch=epoch)
            times.append(time.perf_counter() - t)
        return {"metrics": None, "probe_epochs": probe_epochs, "epoch_seconds": times,
                "seconds_per_epoch": float(np.median(times)), "best_epoch": None, "epochs_run": probe_epochs, **info}
    if probe_batches:
        t = time.perf_counter()
        done = train_epoch(probe_batches, epoch=0)
        per_batch = (time.perf_counter() - t) / done
        return {"metrics": None, "probe_batches": done, "seconds_per_batch": per_batch,
                "seconds_per_epoch": per_batch * len(train_loader), "best_epoch": None, "epochs_run": 0, **info}
    res = common.fit_selected(model, opt, train_epoch, evaluate, epochs, patience,
                       after_eval=lambda val, loss: sched.step(loss))
    return {"metrics": {p: evaluate(p)[0] for p in parts}, **res, **info}


