"""The classic GNNs at their strongest: Luo et al. 2024's tuned GCN and GAT ("Classic GNNs are strong
baselines: reassessing GNNs for node classification", NeurIPS 2024 datasets and benchmarks track), as
``peers.py`` node peers ``GCN-tuned`` and ``GAT-tuned``.

The network is the one the paper describes, built from PyG layers: ``L`` message-passing layers, each
``conv(h)`` (plus a linear map of ``h`` when residual connections are on), then LayerNorm or BatchNorm,
ReLU and dropout, and a linear head on the last layer's output; full-batch Adam with L2 weight decay,
cross-entropy on the training nodes. The features are row-normalised (their Amazon loader's
``NormalizeFeatures``); the graph is made undirected with one self-loop per node (GAT's layers add none
of their own). Settings per dataset (:data:`TUNED_HP`) are the authors' published ones,
each naming its source; the budget is theirs (a fixed epoch count, the best validation epoch kept), and
training runs on xmask's split under xmask's selection rule (``peers_transformers.run_node_peer``).
"""
from __future__ import annotations

import types
from typing import Any

#: Node peers of this module.
TUNED_PEERS = ("GCN-tuned", "GAT-tuned")

_SOURCE = "LUOyk1999/tunedGNN medium_graph/run_gnn.sh (amazon-computer lines)"
#: The authors' settings (``--hidden_channels``, ``--local_layers``, ``--dropout``, ``--lr``,
#: ``--weight_decay``, ``--ln`` / ``--bn`` / ``--res``, ``--epochs``; heads: their default 1). Only
#: Amazon-Computers is set here: other datasets are not run with these peers.
TUNED_HP: dict[str, dict[str, dict[str, Any]]] = {
    "Computers": {
        "GCN-tuned": {"hidden": 512, "layers": 3, "dropout": 0.5, "lr": 1e-3, "weight_decay": 5e-5,
                      "norm": "layer", "residual": False, "heads": 1, "epochs": 1000, "source": _SOURCE},
        "GAT-tuned": {"hidden": 64, "layers": 2, "dropout": 0.5, "lr": 1e-3, "weight_decay": 5e-5,
                      "norm": "layer", "residual": False, "heads": 1, "epochs": 1000, "source": _SOURCE},
    },
}


def tuned_hp(dataset: str, kind: str) -> dict[str, Any]:
    """The published settings of ``kind`` on ``dataset``; a ValueError names the datasets that have them."""
    if dataset not in TUNED_HP or kind not in TUNED_HP[dataset]:
        raise ValueError(f"{kind}: Luo et al.'s settings are set for {', '.join(TUNED_HP)} only, not {dataset!r}")
    return TUNED_HP[dataset][kind]


def tuned_model(kind: str, in_dim: int, out_dim: int, hp: dict[str, Any], one_graph: bool = False) -> Any:
    """The tuned classic GNN: ``hp["layers"]`` GCNConv (``GCN-tuned``) or GATConv (``GAT-tuned``) layers of
    width ``hp["hidden"]`` (GAT: ``heads`` concatenated heads of ``hidden // heads``), each followed by the
    optional residual linear map, the norm, ReLU and dropout; a linear head.

    ``one_graph`` (GCN): the model is only ever given one :func:`gcn_adjacency`; each layer then normalises it
    once and keeps it (:func:`symmetric_gcn_conv`) instead of at every call. The network is the same."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv

    width, heads = int(hp["hidden"]), int(hp.get("heads", 1))
    gcn = symmetric_gcn_conv() if one_graph else GCNConv

    def conv(a: int) -> torch.nn.Module:
        if kind == "GCN-tuned":
            return gcn(a, width)
        # self-loops are in the edge index already (tuned_edges); no bias, as the authors' layer
        return GATConv(a, width // heads, heads=heads, concat=True, add_self_loops=False, bias=False)

    def norm() -> torch.nn.Module:
        return {"layer": torch.nn.LayerNorm, "batch": torch.nn.BatchNorm1d}[hp["norm"]](width) \
            if hp.get("norm") else torch.nn.Identity()

    class TunedGNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [width] * (int(hp["layers"]) - 1)
            self.convs = torch.nn.ModuleList(conv(a) for a in dims)
            self.skips = torch.nn.ModuleList(torch.nn.Linear(a, width) for a in dims) if hp["residual"] else None
            self.norms = torch.nn.ModuleList(norm() for _ in dims)
            self.head = torch.nn.Linear(width, out_dim)

        def forward(self, x: Any, ei: Any) -> Any:
            for i, c in enumerate(self.convs):
                h = c(x, ei)
                if self.skips is not None:
                    h = h + self.skips[i](x)
                x = F.dropout(F.relu(self.norms[i](h)), float(hp["dropout"]), self.training)
            return self.head(x)

    return TunedGNN()


def tuned_edges(edge_index: Any, num_nodes: int) -> Any:
    """The authors' graph: undirected, self-loops removed, then one self-loop per node added."""
    from torch_geometric.utils import add_self_loops, remove_self_loops, to_undirected

    ei = remove_self_loops(to_undirected(edge_index, num_nodes=num_nodes))[0]
    return add_self_loops(ei, num_nodes=num_nodes)[0]


def symmetric_gcn_conv() -> Any:
    """A GCNConv class for one fixed, undirected graph in CSR form (:func:`gcn_adjacency`): the normalised
    adjacency is computed at the first call and kept (PyG's ``cached``), and the backward pass multiplies by
    that adjacency instead of building its transpose every step: D^-1/2 (A + I) D^-1/2 of an undirected
    graph is its own transpose, entry for entry. Same forward (PyG's ``spmm``) and gradient as GCNConv."""
    import torch
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import spmm

    class SymmetricSpmm(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, adj: Any, h: Any) -> Any:
            ctx.adj = adj
            return spmm(adj, h, reduce="sum")

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return None, spmm(ctx.adj, grad, reduce="sum")

    class SymmetricGCNConv(GCNConv):
        def __init__(self, in_channels: int, out_channels: int) -> None:
            super().__init__(in_channels, out_channels, cached=True)
            self._symmetric: Any = None  # the normalised adjacency once checked equal to its transpose

        def message_and_aggregate(self, adj_t: Any, x: Any) -> Any:
            if adj_t is not self._symmetric:
                a = adj_t.to_sparse_coo().coalesce()
                t = a.t().coalesce()
                if not (torch.equal(a.indices(), t.indices()) and torch.equal(a.values(), t.values())):
                    raise ValueError("symmetric_gcn_conv: the normalised adjacency is not symmetric; "
                                     "pass gcn_adjacency(...) of the graph, which is undirected")
                self._symmetric = adj_t
            return SymmetricSpmm.apply(adj_t, x)

    return SymmetricGCNConv


def gcn_adjacency(edge_index: Any, num_nodes: int) -> Any:
    """The GCN layers' input as a transposed CSR adjacency without self-loops (GCNConv adds one per node and
    normalises): the same operator as the authors' edge list, as one sparse product per layer instead of
    a message per edge (8x faster on one CPU thread at width 512 on Computers). Symmetric, as
    :func:`symmetric_gcn_conv` needs."""
    from torch_geometric.utils import remove_self_loops, to_torch_csr_tensor

    ei = remove_self_loops(tuned_edges(edge_index, num_nodes))[0]
    return to_torch_csr_tensor(ei.flip(0), size=(num_nodes, num_nodes))


def tuned_setup(kind: str, dataset: str, data: Any, x: Any, out_dim: int,
                one_graph: bool = True) -> types.SimpleNamespace:
    """``run_node_peer``'s setup of a tuned peer: model, Adam with L2, the whole-graph ``forward`` and
    ``info`` (settings and source). The features are row-normalised, as the authors' Amazon loader does.
    ``one_graph=False``: PyG's GCNConv as it is (normalising at every call), what the fast path is checked
    and timed against."""
    import peers_common as common
    import torch

    hp = tuned_hp(dataset, kind)
    x = common.row_normalize(x)
    n = int(data.num_nodes)
    ei = gcn_adjacency(data.edge_index, n) if kind == "GCN-tuned" else tuned_edges(data.edge_index, n)
    model = tuned_model(kind, x.size(1), out_dim, hp, one_graph=one_graph)
    opt = torch.optim.Adam(model.parameters(), lr=float(hp["lr"]), weight_decay=float(hp["weight_decay"]))
    return types.SimpleNamespace(model=model, opt=opt, forward=lambda: model(x, ei), on_epoch=None,
                                 info={"precompute_seconds": None, "hp": hp})
