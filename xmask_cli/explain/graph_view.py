"""Attention on the graph: a target's neighbourhood drawn node-link, one panel per head of one layer.

The drawn graph is the structure the model saw: the support of the cached
``Â^1`` (self loops left out) among the target's nodes, so for link and edge
runs the training edges only. Layout: networkx's Kamada-Kawai layout of that
subgraph (deterministic: no random start), or a spring layout with a fixed
seed when the subgraph is disconnected (Kamada-Kawai pushes components apart
until each is a dot).

Panels: the first colours every node by its hop distance from the query node
(the ``hops`` the hop table also buckets); then one panel per head, where each
node's fill and the arc query -> node (colour and width) are the attention the
query gives that node in that head (a row of the recorded ``attention`` map),
on one colour scale per figure. Nodes the query gives no attention (outside a
hard support) are drawn hollow. The query node has a red ring; every node
carries its id.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmask_cli.structure.spd import BEYOND, UNREACHABLE

__all__ = ["GraphView", "crop_edges", "graph_layout", "graph_view", "plot_graph_view"]


@dataclass
class GraphView:
    """What one graph-view figure draws.

    Attributes:
        node_ids: ``[m]`` ids of the drawn nodes (the target's crop, in its order).
        edges: ``[2, E]`` positions in ``node_ids`` of the structure's edges among them (``u < v``, once).
        query: position of the query node in ``node_ids``.
        hops: ``[m]`` hop distance from the query (``-1`` beyond the cache's cut-off, ``-2`` unreachable).
        weights: ``[H, m]`` attention of the query to every drawn node, per head of ``layer``.
        layer: the layer drawn.
    """

    node_ids: np.ndarray
    edges: np.ndarray
    query: int
    hops: np.ndarray
    weights: np.ndarray
    layer: int


def crop_edges(cache: Any, g: int, node_ids: np.ndarray) -> np.ndarray:
    """``[2, E]`` positions in ``node_ids`` of the pairs where graph ``g``'s cached ``Â^1`` is non-zero (u < v).

    Only the rows of ``node_ids`` are read, so a node of a large graph costs a few small reads.
    """
    node_ids = np.asarray(node_ids, dtype=np.int64)
    n = cache.num_nodes(g)
    pos = np.full(n, -1, dtype=np.int64)
    pos[node_ids] = np.arange(len(node_ids))
    start = cache.node_slice(g).start
    us, vs = [], []
    for i, r in enumerate(node_ids):
        ip = cache.read_array("powers/indptr", slice(start + int(r), start + int(r) + 2))
        sl = slice(int(ip[0]), int(ip[1]))
        col = cache.read_array("powers/col", sl).astype(np.int64)
        a1 = cache.read_array("powers/values", sl)[:, 0]
        j = pos[col[(a1 > 0) & (col != r)]]
        j = j[j > i]
        us.append(np.full(len(j), i, dtype=np.int64))
        vs.append(j)
    if not us:
        return np.zeros((2, 0), dtype=np.int64)
    return np.stack([np.concatenate(us), np.concatenate(vs)])


def graph_view(t: Any, layer: int) -> GraphView:
    """The :class:`GraphView` of a :class:`~xmask_cli.explain.targets.TargetMaps` at ``layer``.

    ``weights`` is the query's row of the recorded attention maps (the numbers ``maps.h5`` holds), so the
    figure draws exactly what was recorded.
    """
    q = int(np.flatnonzero(np.asarray(t.node_ids) == t.query)[0])
    att = t.maps[layer]["attention"]
    return GraphView(node_ids=np.asarray(t.node_ids), edges=np.asarray(t.edges), query=q, hops=np.asarray(t.hops),
                     weights=np.nan_to_num(att[:, q, :].astype(np.float64), nan=0.0), layer=layer)


def graph_layout(view: GraphView) -> np.ndarray:
    """``[m, 2]`` node positions: Kamada-Kawai on the drawn subgraph, a seeded spring layout if disconnected."""
    import networkx as nx

    m = len(view.node_ids)
    g = nx.Graph()
    g.add_nodes_from(range(m))
    g.add_edges_from(zip(view.edges[0].tolist(), view.edges[1].tolist()))
    if m <= 2:
        return np.array([[float(i), 0.0] for i in range(m)])
    if nx.is_connected(g):
        pos = nx.kamada_kawai_layout(g)
    else:
        pos = nx.spring_layout(g, seed=0, k=1.5 / np.sqrt(m))
    return np.array([pos[i] for i in range(m)], dtype=np.float64)


def _hop_label(d: int, d_max: int) -> str:
    return f">={d_max}" if d == BEYOND else ("unreachable" if d == UNREACHABLE else str(d))


@dataclass
class _Canvas:
    """What every panel of one figure draws with: the graph, its layout, the id labels and their sizes."""

    g: Any  # networkx.Graph of the view's edges
    pos: dict[int, np.ndarray]
    ids: dict[int, str]
    font: float
    node_size: float

    def base(self, ax: Any) -> None:
        """The view's edges, grey, on an axis-free, square panel."""
        import networkx as nx

        nx.draw_networkx_edges(self.g, self.pos, ax=ax, edge_color="0.65", width=1.0)
        ax.set_axis_off()
        ax.set_aspect("equal")

    def ring(self, ax: Any, node: int) -> None:
        """The red ring that marks the query node."""
        import networkx as nx

        nx.draw_networkx_nodes(self.g, self.pos, nodelist=[node], ax=ax, node_color="none",
                               node_size=self.node_size * 2.2, edgecolors="red", linewidths=2.0)


def _canvas(view: GraphView) -> _Canvas:
    """The graph of ``view``, its layout and label sizes."""
    import networkx as nx

    m = len(view.node_ids)
    pos_arr = graph_layout(view)
    g = nx.Graph()
    g.add_nodes_from(range(m))
    g.add_edges_from(zip(view.edges[0].tolist(), view.edges[1].tolist()))
    ids = {i: str(int(view.node_ids[i])) for i in range(m)}
    chars = max((len(v) for v in ids.values()), default=1)
    font = 7 if m <= 30 else 5.5
    # Circles wide enough for the longest id (Cora's run to four digits) at the label's font size.
    node_size = max(260 if m <= 30 else 170, (font * 0.62 * chars + 4) ** 2)
    return _Canvas(g, {i: pos_arr[i] for i in range(m)}, ids, font, node_size)


def plot_graph_view(view: GraphView, labels: Sequence[str], title: str, d_max: int) -> Any:
    """The figure: a hop panel, then one attention panel per head (``labels[h]``: head h's bias label)."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    heads, m = view.weights.shape
    canvas = _canvas(view)
    side = 4.2 if m <= 30 else 5.4
    panels = heads + 1
    cols = panels if panels <= 3 else 3  # rows of three: panels stay large enough to read the ids
    rows = -(-panels // cols)
    fig = Figure(figsize=(side * cols + 0.8, (side + 0.5) * rows + 0.4), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[panels:]:
        ax.set_axis_off()
    axes = grid[:panels]
    _hop_panel(axes[0], canvas, view, d_max)
    # Attention panels: one colour scale for the figure, so heads compare.
    w = view.weights
    top = float(w.max()) if w.size and w.max() > 0 else 1.0
    norm = Normalize(vmin=0.0, vmax=top)
    cmap = colormaps["viridis"]
    for h in range(heads):
        _attention_panel(axes[h + 1], canvas, view, h, labels[h], norm, cmap)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[1:]), fraction=0.02, pad=0.01,
                 label="attention from the query (node fill, arc colour and width)")
    fig.suptitle(title, fontsize=9)
    return fig


def _hop_panel(ax: Any, canvas: _Canvas, view: GraphView, d_max: int) -> None:
    """The first panel: a discrete colour per hop distance (beyond the cut-off and unreachable last)."""
    import networkx as nx
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D

    codes = view.hops.astype(np.int64)
    levels = sorted(set(codes.tolist()), key=lambda d: (d < 0, d if d >= 0 else -d))
    index = np.array([levels.index(int(d)) for d in codes])
    tab = colormaps["tab10"]
    hop_cmap = ListedColormap([tab(i % 10) for i in range(len(levels))])
    canvas.base(ax)
    nx.draw_networkx_nodes(canvas.g, canvas.pos, ax=ax, node_color=index.tolist(), cmap=hop_cmap, vmin=-0.5,
                           vmax=len(levels) - 0.5, node_size=canvas.node_size, edgecolors="black", linewidths=0.5)
    canvas.ring(ax, view.query)
    nx.draw_networkx_labels(canvas.g, canvas.pos, labels=canvas.ids, ax=ax, font_size=canvas.font)
    ax.legend(handles=[Line2D([], [], marker="o", linestyle="", markerfacecolor=hop_cmap(i), markeredgecolor="black",
                              label=f"{_hop_label(d, d_max)} hop{'s' if d != 1 else ''}")
                       for i, d in enumerate(levels)], fontsize=7, loc="lower left", frameon=False,
              title="from the query", title_fontsize=7)
    ax.set_title(f"hop distance from node {canvas.ids[view.query]} (red ring)", fontsize=8)


def _attention_panel(ax: Any, canvas: _Canvas, view: GraphView, h: int, label: str, norm: Any, cmap: Any) -> None:
    """Head ``h``'s panel: the query's attention as node fill and as arcs query -> node (colour and width)."""
    import networkx as nx

    g, pos, ids, node_size = canvas.g, canvas.pos, canvas.ids, canvas.node_size
    m = len(ids)
    top = norm.vmax
    others = [j for j in range(m) if j != view.query]
    canvas.base(ax)
    row = view.weights[h]
    # Arcs query -> node, widest and brightest for the largest weight; drawn faint first, strong on top.
    order = sorted((j for j in others if row[j] > 0), key=lambda j: row[j])
    arcs = [(view.query, j) for j in order]
    if arcs:
        nx.draw_networkx_edges(nx.DiGraph(arcs), pos, edgelist=arcs, ax=ax,
                               width=[0.4 + 5.0 * row[j] / top for j in order],
                               edge_color=[cmap(norm(row[j])) for j in order], alpha=0.85, arrows=True,
                               arrowstyle="-|>", arrowsize=7, connectionstyle="arc3,rad=0.18",
                               node_size=node_size)
    attended = [j for j in range(m) if row[j] > 0]
    silent = [j for j in range(m) if row[j] <= 0]
    nx.draw_networkx_nodes(g, pos, nodelist=attended, ax=ax, node_color=[row[j] for j in attended], cmap=cmap,
                           vmin=0.0, vmax=top, node_size=node_size, edgecolors="black", linewidths=0.5)
    if silent:
        nx.draw_networkx_nodes(g, pos, nodelist=silent, ax=ax, node_color="white", node_size=node_size,
                               edgecolors="0.5", linewidths=0.8)
    canvas.ring(ax, view.query)
    light = {j: ids[j] for j in range(m) if row[j] > 0 and norm(row[j]) < 0.6}
    dark = {j: ids[j] for j in range(m) if j not in light}
    nx.draw_networkx_labels(g, pos, labels=light, ax=ax, font_size=canvas.font, font_color="white")
    nx.draw_networkx_labels(g, pos, labels=dark, ax=ax, font_size=canvas.font, font_color="black")
    shown = row.sum()
    ax.set_title(f"L{view.layer} head {h} · {label}\nself {row[view.query]:.2f} · max other "
                 f"{max((row[j] for j in others), default=0.0):.2f} · drawn mass {shown:.2f}", fontsize=8)
