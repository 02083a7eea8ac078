"""Per-layer, per-head attention maps of a trained run (the library side of ``xmask explain``).

In the spirit of the paper's Fig. 3 (§5.4.2), for every layer and head of a
run's best checkpoint it records, from the very forward the model runs
(:meth:`XMaskNet.encode_dense` / :meth:`~XMaskNet.encode_sparse` with
``return_terms=True``):

- ``energy``: ``q·k / sqrt(d_h)``;
- ``structural``: the structural term as it enters the logits: X-LogSMask
  (``log(Â^k + eps)``, ``-inf`` outside the head's support under
  ``outside_support='hard'``) plus the head's learned biases (SPD, RRWP, magnetic,
  eigen), divided by ``sqrt(d_h)`` under ``mask_scale='paper'``; 0 for a head
  with no bias. Every head is labelled with its bias types (``Â^2 + SPD``);
- ``logits``: their sum (``-inf`` at keys the query does not attend);
- ``attention``: the softmax of ``logits`` (before attention dropout).

Targets: ``graph I`` (graph-level runs), ``node I`` and ``edge U,V`` (node-,
link- and edge-level runs), each cropped to at most ``max_nodes`` nodes closest
to it (see :mod:`~xmask_cli.explain.targets`); ``image I`` (image-level runs,
see :mod:`~xmask_cli.explain.image`). What a level takes is its
``explain_target`` in :data:`xmask_cli.engine.tasks.LEVELS`.

Cropping keeps the forward's numbers; it only selects rows and columns, so a
cropped attention row sums to at most 1 (its mass outside the crop is left out).
On the sparse path pairs the forward did not attend have ``energy`` and
``structural`` NaN, ``logits`` ``-inf`` and ``attention`` 0. A plain head
(``k_h = 0``, or ``use_bias: false``) attends over every node there too, but
its maps and hop summary hold its weights at the cached pairs only (its mass
beyond them is not recorded); the dense path records all of it.

Hop summary: for every layer and head, the attention mass by shortest-path
hop distance between query and key, averaged over the targets' query rows
(graph: all its nodes; node: the node; edge: both endpoints), taken over the
*full* attention rows (not the crop). Buckets, with ``D`` the cache's SPD
cut-off (``structure.spd.max_distance``, or the large-graph radius): ``"0"``
.. ``"D-1"`` exact distances, ``">=D"`` (distance ``D`` or beyond the cut-off,
same connected component) and ``"unreachable"`` (another component). Each
head's masses are normalised to sum to 1. Distances come from the cache's SPD
pairs, or a breadth-first search on the support of the cached ``Â^1`` when
the cache has no SPD.

Files written to ``out_dir``: ``maps.h5`` (see :func:`write_maps`), one
``<target>.png`` grid per target (see :func:`plot_target`) and one
``<target>_q<query>_l<layer>_graph.png`` per target: its neighbourhood drawn
node-link, one panel per head of one layer, the attention of a query node on nodes and arcs (see
:mod:`~xmask_cli.explain.graph_view`); with ``--pyg``, one ``<target>_explanation.pt`` per target (see
:mod:`~xmask_cli.explain.pyg`).

Modules, one job each: :mod:`~xmask_cli.explain.record` (the forward and its
terms), :mod:`~xmask_cli.explain.hops` (distances, crops, hop summary),
:mod:`~xmask_cli.explain.targets` (graph / node / edge targets),
:mod:`~xmask_cli.explain.store` (``maps.h5``), :mod:`~xmask_cli.explain.figures`
(the grids), :mod:`~xmask_cli.explain.graph_view` (the node-link view), :mod:`~xmask_cli.explain.image` (image-level runs),
:mod:`~xmask_cli.explain.pyg` (a target as a PyG ``Explanation``, ``--pyg``) and
:mod:`~xmask_cli.explain.run` (:func:`explain_run`, the entry ``xmask explain`` calls).
"""
from xmask_cli.explain.figures import plot_target, save_png
from xmask_cli.explain.graph_view import GraphView, graph_view, plot_graph_view
from xmask_cli.explain.hops import hop_buckets, hop_summary
from xmask_cli.explain.record import KINDS, record_terms
from xmask_cli.explain.run import ExplainRequest, explain_run
from xmask_cli.explain.store import write_maps
from xmask_cli.explain.targets import TargetMaps

__all__ = ["ExplainRequest", "GraphView", "KINDS", "TargetMaps", "explain_run", "graph_view", "plot_graph_view", "hop_buckets", "hop_summary", "plot_target", "record_terms",
           "save_png", "write_maps"]
