"""``explain_run``: the library entry of ``xmask explain``, in three stages.

Target selection (:func:`check_request`: does the request fit the run's level, before any data loads),
recording (:func:`_record_graphs`, :func:`_record_nodes`: ids checked against the data, one forward per
target, :func:`record_targets`) and output (:func:`_write_outputs`: ``maps.h5``, the figures and, with
``pyg``, the Explanations). Image runs take their own
recorder, :func:`~xmask_cli.explain.image.explain_images`.

Files written to ``out_dir``: ``maps.h5`` (see :func:`~xmask_cli.explain.store.write_maps`), one
``<target>.png`` grid per target (see :func:`~xmask_cli.explain.figures.plot_target`) and one
``<target>_q<query>_l<layer>_graph.png`` graph view per target (see :mod:`~xmask_cli.explain.graph_view`):
the name carries the query node and the layer drawn, so views of one target from several queries or
layers sit side by side instead of overwriting each other. With ``pyg``: one ``<target>_explanation.pt``
per target (see :mod:`~xmask_cli.explain.pyg`).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmask_cli.engine.runs.evaluate import SavedRun, read_run, rebuild_run
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.errors import UsageError
from xmask_cli.explain.figures import plot_target, save_png
from xmask_cli.explain.graph_view import graph_view, plot_graph_view
from xmask_cli.explain.hops import DEFAULT_MAX_DISTANCE, hop_buckets, hop_summary
from xmask_cli.explain.image import explain_images
from xmask_cli.explain.pyg import explanation_name, save_explanation, to_explanation
from xmask_cli.explain.record import SingleGraph
from xmask_cli.explain.store import write_maps
from xmask_cli.explain.targets import TargetMaps, explain_graph, explain_nodes, parse_edge, target_dict
from xmask_cli.fs import check_writable, ensure_writable_dir, refuse_links
from xmask_cli.model.model_config import effective_powers, head_labels, head_powers

__all__ = ["VIEWS", "ExplainRequest", "check_request", "explain_run", "graph_view_name", "record_targets"]

#: Figure sets of ``--view``.
VIEWS = ("all", "matrix", "graph")


def _quiet(message: str) -> None:
    """The default progress log: says nothing."""


@dataclass(frozen=True)
class ExplainRequest:
    """What ``xmask explain`` records and draws: the targets, the crop and the figures.

    Built from any sequences (ids as ints, edges as ``(u, v)`` pairs or ``"U,V"`` strings); the fields hold
    tuples of ints. A request with no target, or ``max_nodes`` below 2, is refused here, before any run is read.

    Attributes:
        graphs: graph ids (graph-level runs).
        nodes: node ids (node-, link- and edge-level runs).
        edges: ``(u, v)`` pairs (node-, link- and edge-level runs).
        images: test-image indices (image-level runs; see :mod:`xmask_cli.explain.image`).
        max_nodes: most nodes a map keeps (neighbourhood crop; graphs above it are cropped too).
        query_patch: image runs: one query patch's attention row instead of the mean over queries.
        query: the graph view's query node (default: node 0 of a graph, the node of a node target, ``u`` of an
            edge ``u,v``); on a graph larger than ``max_nodes`` the crop is centred on it.
        view: which figures: ``matrix`` (the layer × kind × head grid), ``graph`` (the neighbourhood drawn
            node-link, see :mod:`~xmask_cli.explain.graph_view`) or ``all``; ``maps.h5`` is written for each.
        layer: the layer the graph view draws and the Explanations read (default: the last one).
        head: the head the Explanations' masks read (default: the mean over the layer's heads); from 0.
        pyg: also save one ``torch_geometric.explain.Explanation`` per target, ``<target>_explanation.pt``
            (see :mod:`~xmask_cli.explain.pyg`).

    Raises:
        UsageError: no target, ``max_nodes < 2`` or an edge that is not a pair of ints.
    """

    graphs: Sequence[int] = ()
    nodes: Sequence[int] = ()
    edges: Sequence[Any] = ()
    images: Sequence[int] = ()
    max_nodes: int = 64
    query_patch: int | None = None
    query: int | None = None
    view: str = "all"
    layer: int | None = None
    head: int | None = None
    pyg: bool = False

    def __post_init__(self) -> None:
        # Frozen: the normalised tuples are set once, here.
        object.__setattr__(self, "graphs", tuple(int(g) for g in self.graphs))
        object.__setattr__(self, "nodes", tuple(int(i) for i in self.nodes))
        object.__setattr__(self, "images", tuple(int(i) for i in self.images))
        object.__setattr__(self, "edges", tuple(parse_edge(e) for e in self.edges))
        if not (self.graphs or self.nodes or self.edges or self.images):
            raise UsageError("nothing to explain: give at least one --graph I, --node I, --edge U,V or --image I")
        if self.max_nodes < 2:
            raise UsageError(f"--max-nodes {self.max_nodes}: must be at least 2")


def explain_run(
    run_dir: str | os.PathLike,
    request: ExplainRequest,
    *,
    out_dir: str | os.PathLike,
    cache_dir: Path,
    data_root: str | os.PathLike | None = None,
    device: str = "cpu",
    offline: bool | None = None,
    log: Callable[[str], None] = _quiet,
) -> dict[str, Any]:
    """Record, save and plot the attention terms of a run's best checkpoint on the request's targets.

    Args:
        run_dir: ``runs/<name>/<seed>`` (``config.json`` and ``best.pt``).
        request: the targets, the crop and the figures (:class:`ExplainRequest`).
        out_dir: where ``maps.h5`` and ``<target>.png`` go (created).
        cache_dir, data_root, offline: as for :func:`~xmask_cli.engine.runs.evaluate.evaluate_run`.
        device: torch device of the forward.
        log: progress lines.

    Returns:
        JSON-able ``{"run_dir", "dataset", "level", "seed", "targets": [{"name", "kind", "target",
        "num_nodes", "cropped", "cropped_from", "node_ids", "query_nodes", "hop_summary"}],
        "graph_view": {"query", "layer", "figure"}}],
        "files": {"maps": path, "figures": {name: path}, "graph_figures": {name: path},
        "explanations": {name: path}}, "hop_buckets": [...],
        "hop_summary": {"layer_0": {"head_0": {"k": 1, "mass": {"0": .., ..., "unreachable": ..}}}}}``.

    Raises:
        RunNotFoundError: ``run_dir`` is not a run.
        UsageError: a target that does not fit the run's level or is out of range.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)  # the figures are built on Figure objects; no GUI backend needed

    run, saved = read_run(run_dir)
    target = check_request(request, run_dir, saved)
    # Before the model runs: the folder the maps go to can take them (it is made once they are recorded).
    check_writable(Path(out_dir), "output folder", "pass another --out")
    if Path(out_dir).is_dir():
        names = [explanation_name(n) for n in _target_names(request)] if request.pyg else []
        refuse_links(Path(out_dir), ("maps.h5", *names), "output folder")
    exp, task, model = rebuild_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                   device=device, log=log)
    cfg = model.cfg
    meta = {"run_dir": str(run.path), "dataset": exp.dataset, "level": exp.level,
            "seed": int(saved["train"]["seed"]), "head_powers": list(head_powers(cfg)), "use_bias": bool(cfg.use_bias)}
    if target == "image":
        meta = {**meta, "level": saved.get("level"), "positional": cfg.positional, "head_biases": head_labels(cfg),
                "mask_scale": cfg.mask_scale}
        out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
        return explain_images(model, task, request.images, query_patch=request.query_patch, out_dir=out,
                              connectivity=exp.cfg.image.connectivity, meta=meta, log=log)
    results, d_max = record_targets(request, exp, model, task, log)
    out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
    meta = {**meta, "head_biases": head_labels(cfg), "mask_scale": cfg.mask_scale, "max_nodes": int(request.max_nodes)}
    return _write_outputs(results, d_max, request, cfg, out, meta)


def record_targets(request: ExplainRequest, exp: Any, model: Any, task: Any,
                   log: Callable[[str], None] = _quiet) -> tuple[list[TargetMaps], int]:
    """The recorded maps of the request's graph, node and edge targets, and the hop cut-off ``D``."""
    if LEVELS[exp.level].explain_target == "graph":
        return _record_graphs(request, exp.dataset, model, task, log)
    return _record_nodes(request, exp.level, model, task, log)


def _target_names(request: ExplainRequest) -> list[str]:
    """The names the request's graph, node and edge targets are recorded (and saved) under."""
    return ([f"graph_{g}" for g in request.graphs] + [f"node_{i}" for i in request.nodes]
            + [f"edge_{u}_{v}" for u, v in request.edges])


def check_request(request: ExplainRequest, run_dir: str | os.PathLike[str], saved: SavedRun) -> str | None:
    """What the run's level is explained on (``graph``, ``node``, ``image``; LEVELS), checked against the request.

    Every check here reads only ``config.json``: a target that does not fit the run fails before any data loads.
    """
    level = saved.get("level")
    target = LEVELS[level].explain_target if isinstance(level, str) and level in LEVELS else None
    r = request
    if (target == "image") != bool(r.images) or (r.images and (r.graphs or r.nodes or r.edges)):
        raise UsageError(f"{run_dir} has level '{level}': --image I needs an image-level run, and an image-level "
                         f"run takes --image I only")
    if (r.pyg or r.head is not None) and target == "image":
        raise UsageError("--pyg and --head are for graph, node and edge targets")
    if r.head is not None and not r.pyg:
        raise UsageError(f"--head {r.head} picks the head of the saved Explanations: add --pyg")
    if r.query_patch is not None and target != "image":
        raise UsageError("--query-patch is for image-level runs (with --image I)")
    if r.view not in VIEWS:
        raise UsageError(f"--view {r.view}: expected one of {', '.join(VIEWS)}")
    if target == "image":
        if r.view == "graph" or r.query is not None or r.layer is not None:
            raise UsageError("--view graph, --query and --layer are for graph, node and edge targets; image runs "
                             "take --query-patch")
        return target
    if target == "graph" and (r.nodes or r.edges):
        raise UsageError(f"{run_dir} is a graph-level run: --node/--edge need a node-, link- or edge-level run; "
                         f"use --graph I")
    if target == "node" and r.graphs:
        raise UsageError(f"{run_dir} is a {level}-level run on one graph: --graph needs a graph-level run; "
                         f"use --node I or --edge U,V")
    if saved.get("model", {}).get("experts"):
        raise UsageError(f"{run_dir} uses M3Dphormer attention experts: explain records single-attention heads; "
                         f"read the per-token routing with XMaskNet.routing_weights instead")
    layers = saved.get("model", {}).get("layers", 1)
    if not isinstance(layers, int):
        raise UsageError(f"{run_dir}: config.json's model.layers is not an integer ({layers!r})")
    if r.layer is not None and not 0 <= r.layer < layers:
        raise UsageError(f"--layer {r.layer}: the run's model has layers 0..{layers - 1}")
    heads = saved.get("model", {}).get("heads", 1)
    if r.head is not None and isinstance(heads, int) and not 0 <= r.head < heads:
        raise UsageError(f"--head {r.head}: the run's model has heads 0..{heads - 1}")
    return target


def _record_graphs(request: ExplainRequest, dataset: str, model: Any, task: Any,
                   log: Callable[[str], None]) -> tuple[list[TargetMaps], int]:
    """The maps of each requested graph (ids checked first) and the hop cut-off they were measured with."""
    count = task.eval_streams["test"].num_graphs
    for g in request.graphs:
        if not 0 <= g < count:
            raise UsageError(f"--graph {g}: out of range, {dataset} has graphs 0..{count - 1}")
    results, d_max = [], DEFAULT_MAX_DISTANCE
    for g in request.graphs:
        t, d_max = explain_graph(model, task, g, request.max_nodes, request.query)
        results.append(t)
        log(f"recorded {t.describe()}")
    return results, d_max


def _record_nodes(request: ExplainRequest, level: str, model: Any, task: Any,
                  log: Callable[[str], None]) -> tuple[list[TargetMaps], int]:
    """The maps of each requested node, then each edge, on the run's one graph (ids checked first)."""
    source = SingleGraph(task, level)
    n = source.num_nodes
    for i in request.nodes:
        if not 0 <= i < n:
            raise UsageError(f"--node {i}: out of range, the graph has nodes 0..{n - 1}")
    for u, v in request.edges:
        if not (0 <= u < n and 0 <= v < n):
            raise UsageError(f"--edge {u},{v}: out of range, the graph has nodes 0..{n - 1}")
    targets = [("node", [i]) for i in request.nodes] + [("edge", list(e)) for e in request.edges]
    results, d_max = [], DEFAULT_MAX_DISTANCE
    for kind, centre in targets:
        t, d_max = explain_nodes(model, source, kind, centre, request.max_nodes, request.query)
        results.append(t)
        log(f"recorded {t.describe()}")
    return results, d_max


def graph_view_name(target: str, query: int, layer: int) -> str:
    """File name of a target's graph view: the target, the query node and the layer drawn."""
    return f"{target}_q{query}_l{layer}_graph.png"


def _write_outputs(results: list[TargetMaps], d_max: int, request: ExplainRequest, cfg: Any, out: Path,
                   meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``maps.h5`` and the requested figures of ``results``; return the JSON-able result."""
    buckets = hop_buckets(d_max)
    ks, labels = effective_powers(cfg), head_labels(cfg)
    summary = hop_summary(results, ks, labels, buckets)
    maps_path = write_maps(out / "maps.h5", results, cfg, {**meta, "hop_summary": summary})
    figures: dict[str, str] = {}
    graph_figures: dict[str, str] = {}
    explanations: dict[str, str] = {}
    rows = []
    shown = len(results[0].maps) - 1 if request.layer is None else request.layer
    for t in results:
        row = target_dict(t, ks, labels, buckets)
        if request.view in ("matrix", "all"):
            fig, _ = plot_target(t, cfg)
            figures[t.name] = str(save_png(fig, out / f"{t.name}.png"))
        if request.view in ("graph", "all"):
            fig = plot_graph_view(graph_view(t, shown), labels[shown],
                                  f"{t.describe()} · attention of node {t.query}, layer {shown}", d_max)
            graph_figures[t.name] = str(save_png(fig, out / graph_view_name(t.name, int(t.query), shown), dpi=100))
            row["graph_view"] = {"query": int(t.query), "layer": shown, "figure": graph_figures[t.name]}
        if request.pyg:
            path = out / explanation_name(t.name)
            explanations[t.name] = str(save_explanation(to_explanation(t, shown, request.head), path))
        rows.append(row)
    return {**meta, "targets": rows,
            "files": {"maps": str(maps_path), "figures": figures, "graph_figures": graph_figures,
                      "explanations": explanations},
            "hop_buckets": buckets, "hop_summary": summary}
