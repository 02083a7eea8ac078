"""GIN and GIN with a virtual node as OGB's molecule example recipe builds them (``examples/graphproppred/mol``
of ``snap-stanford/ogb``: ``gnn.py`` / ``conv.py``), written here from that recipe.

* input: OGB's ``AtomEncoder`` (one embedding table per atom feature, summed) to ``hidden``;
* ``layers`` GIN layers whose messages carry the bond: for node ``v``,
  ``MLP((1 + eps) h_v + sum_{u -> v} relu(h_u + B(e_uv)))`` with ``B`` a ``BondEncoder`` of the layer's own,
  ``eps`` learnt (starts at 0) and ``MLP = Linear(hidden, 2 hidden) - BatchNorm - ReLU - Linear(2 hidden,
  hidden)``; then BatchNorm, ReLU (not after the last layer) and dropout;
* virtual node (``virtual_node=True``): one learnt vector per graph (starts at 0), added to every node of
  the graph before each layer; after each layer but the last it becomes
  ``dropout(MLP_vn(sum_v h_v + vn))``, summing the layer's *input* (the nodes with the virtual node added),
  ``MLP_vn = Linear(hidden, 2 hidden) - BN - ReLU - Linear(2 hidden, hidden) - BN - ReLU``;
* readout: the last layer's node states (JK "last"), mean over each graph's nodes, one linear map to the
  tasks (molhiv: one logit).

OGB's defaults for these examples: hidden 300, 5 layers, dropout 0.5, no residual connections.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

#: OGB's example recipe for ogbg-mol* (``main_pyg.py`` defaults).
RECIPE = {"hidden": 300, "layers": 5, "dropout": 0.5, "batch_size": 32, "lr": 1e-3, "epochs": 100}


def sum_by(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """Rows of ``values`` summed into ``size`` rows by ``index`` (a node's incoming messages, a graph's nodes)."""
    out = values.new_zeros((size, values.size(1)))
    return out.index_add_(0, index, values)


def mean_by(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """Rows of ``values`` averaged into ``size`` rows by ``index`` (an empty group stays 0)."""
    count = torch.bincount(index, minlength=size).clamp(min=1).to(values.dtype)
    return sum_by(values, index, size) / count.unsqueeze(1)


def _mlp(dim: int, closing_norm: bool) -> nn.Sequential:
    """``dim -> 2 dim -> dim`` with BatchNorm and ReLU between; ``closing_norm``: BN and ReLU after (the
    virtual node's update)."""
    mods: list[nn.Module] = [nn.Linear(dim, 2 * dim), nn.BatchNorm1d(2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)]
    if closing_norm:
        mods += [nn.BatchNorm1d(dim), nn.ReLU()]
    return nn.Sequential(*mods)


class EdgeGINLayer(nn.Module):
    """One GIN layer whose messages add the bond's embedding: ``MLP((1 + eps) h_v + sum_u relu(h_u + B(e_uv)))``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        from ogb.graphproppred.mol_encoder import BondEncoder

        self.mlp = _mlp(dim, closing_norm=False)
        self.eps = nn.Parameter(torch.zeros(1))
        self.bond = BondEncoder(emb_dim=dim)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """New node states; ``edge_index[0]`` sends, ``edge_index[1]`` receives (PyG's direction)."""
        msg = F.relu(h[edge_index[0]] + self.bond(edge_attr))
        return self.mlp((1.0 + self.eps) * h + sum_by(msg, edge_index[1], h.size(0)))


class MolGIN(nn.Module):
    """OGB's GIN (``virtual_node=False``) or GIN-virtual for ogbg-mol* graphs: logits ``[graphs, tasks]``."""

    def __init__(self, num_tasks: int = 1, hidden: int = 300, layers: int = 5, dropout: float = 0.5,
                 virtual_node: bool = False) -> None:
        super().__init__()
        from ogb.graphproppred.mol_encoder import AtomEncoder

        if layers < 2:
            raise ValueError(f"layers must be at least 2 (OGB's recipe), got {layers}")
        self.dropout, self.virtual_node = dropout, virtual_node
        self.atom = AtomEncoder(emb_dim=hidden)
        self.convs = nn.ModuleList(EdgeGINLayer(hidden) for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))
        if virtual_node:
            self.vn_start = nn.Parameter(torch.zeros(1, hidden))
            self.vn_mlps = nn.ModuleList(_mlp(hidden, closing_norm=True) for _ in range(layers - 1))
        self.head = nn.Linear(hidden, num_tasks)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor, batch: torch.Tensor,
                num_graphs: int) -> torch.Tensor:
        """Logits of each of the ``num_graphs`` graphs; ``batch`` maps each node to its graph."""
        h = self.atom(x)
        vn = self.vn_start.expand(num_graphs, -1) if self.virtual_node else None
        last = len(self.convs) - 1
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            if vn is not None:
                h = h + vn[batch]
            out = norm(conv(h, edge_index, edge_attr))
            out = F.dropout(out if i == last else F.relu(out), self.dropout, self.training)
            if vn is not None and i < last:
                vn = F.dropout(self.vn_mlps[i](sum_by(h, batch, num_graphs) + vn), self.dropout, self.training)
            h = out
        return self.head(mean_by(h, batch, num_graphs))


def batch_logits(model: MolGIN, b: Any) -> torch.Tensor:
    """The model on a PyG batch of OGB molecules (``x``, ``edge_index``, ``edge_attr``, ``batch``)."""
    return model(b.x, b.edge_index, b.edge_attr, b.batch, int(b.num_graphs))
