"""``explain_run``: the library entry of ``xmask explain`` (checks, loads the run, records, writes, plots).

Files written to ``out_dir``: ``maps.h5`` (see :func:`~xmask_cli.explain.store.write_maps`), one
``<target>.png`` grid per target (see :func:`~xmask_cli.explain.figures.plot_target`) and one
``<target>_graph.png`` graph view per target (see :mod:`~xmask_cli.explain.graph_view`).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xmask_cli.engine.evaluate import read_run, rebuild_run
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.errors import UsageError
from xmask_cli.explain.figures import plot_target, save_png
from xmask_cli.explain.graph_view import graph_view, plot_graph_view
from xmask_cli.explain.hops import DEFAULT_MAX_DISTANCE, hop_buckets, hop_summary
from xmask_cli.explain.image import explain_images
from xmask_cli.explain.record import SingleGraph
from xmask_cli.explain.store import write_maps
from xmask_cli.explain.targets import TargetMaps, explain_graph, explain_nodes, parse_edge, target_dict
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.model.model_config import effective_powers, head_labels

__all__ = ["VIEWS", "explain_run"]

#: Figure sets of ``--view``.
VIEWS = ("all", "matrix", "graph")


def explain_run(
    run_dir: str | os.PathLike,
    *,
    graphs: Sequence[int] = (),
    nodes: Sequence[int] = (),
    edges: Sequence[Any] = (),
    out_dir: str | os.PathLike,
    cache_dir: Path,
    data_root: str | os.PathLike | None = None,
    device: str = "cpu",
    max_nodes: int = 64,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
    images: Sequence[int] = (),
    query_patch: int | None = None,
    query: int | None = None,
    view: str = "all",
    layer: int | None = None,
) -> dict[str, Any]:
    """Record, save and plot the attention terms of a run's best checkpoint on the given targets.

    Args:
        run_dir: ``runs/<name>/<seed>`` (``config.json`` and ``best.pt``).
        graphs: graph ids (graph-level runs).
        nodes: node ids (node-, link- and edge-level runs).
        edges: ``(u, v)`` pairs or ``"U,V"`` strings (node-, link- and edge-level runs).
        out_dir: where ``maps.h5`` and ``<target>.png`` go (created).
        cache_dir, data_root, offline: as for :func:`~xmask_cli.engine.evaluate.evaluate_run`.
        device: torch device of the forward.
        max_nodes: most nodes a map keeps (neighbourhood crop; graphs above it are cropped too).
        log: progress lines.
        images: test-image indices (image-level runs; see :mod:`xmask_cli.explain.image`).
        query_patch: image runs: one query patch's attention row instead of the mean over queries.
        query: the graph view's query node (default: node 0 of a graph, the node of a node target, ``u`` of an
            edge ``u,v``); on a graph larger than ``max_nodes`` the crop is centred on it.
        view: which figures: ``matrix`` (the layer × kind × head grid), ``graph`` (the neighbourhood drawn
            node-link, see :mod:`~xmask_cli.explain.graph_view`) or ``all``; ``maps.h5`` is written for each.
        layer: the layer the graph view draws (default: the last one).

    Returns:
        JSON-able ``{"run_dir", "dataset", "level", "seed", "targets": [{"name", "kind", "target",
        "num_nodes", "cropped", "cropped_from", "node_ids", "query_nodes", "hop_summary"}],
        "graph_view": {"query", "layer", "figure"}}],
        "files": {"maps": path, "figures": {name: path}, "graph_figures": {name: path}}, "hop_buckets": [...],
        "hop_summary": {"layer_0": {"head_0": {"k": 1, "mass": {"0": .., ..., "unreachable": ..}}}}}``.

    Raises:
        RunNotFoundError: ``run_dir`` is not a run.
        UsageError: no target, a target that does not fit the run's level or is out of range.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)  # the figures are built on Figure objects; no GUI backend needed

    graphs, nodes, images = [int(g) for g in graphs], [int(i) for i in nodes], [int(i) for i in images]
    pairs = [parse_edge(e) for e in edges]
    if not (graphs or nodes or pairs or images):
        raise UsageError("nothing to explain: give at least one --graph I, --node I, --edge U,V or --image I")
    if max_nodes < 2:
        raise UsageError(f"--max-nodes {max_nodes}: must be at least 2")
    run, saved = read_run(run_dir)
    level = saved.get("level")
    # What the level's runs are explained on (engine.tasks.LEVELS): graph ids, node ids/pairs of one graph, images.
    target = LEVELS[level].explain_target if isinstance(level, str) and level in LEVELS else None
    if (target == "image") != bool(images) or (images and (graphs or nodes or pairs)):
        raise UsageError(f"{run_dir} has level '{level}': --image I needs an image-level run, and an image-level "
                         f"run takes --image I only")
    if query_patch is not None and target != "image":
        raise UsageError("--query-patch is for image-level runs (with --image I)")
    if view not in VIEWS:
        raise UsageError(f"--view {view}: expected one of {', '.join(VIEWS)}")
    if target == "image" and (view == "graph" or query is not None or layer is not None):
        raise UsageError("--view graph, --query and --layer are for graph, node and edge targets; image runs take "
                         "--query-patch")
    if target == "image":
        exp, task, model = rebuild_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                    device=device, log=log)
        meta = {"run_dir": str(run.path), "dataset": exp.dataset, "level": level,
                "seed": int(saved["train"]["seed"]), "head_powers": list(model.cfg.head_powers),
                "use_bias": bool(model.cfg.use_bias), "positional": model.cfg.positional,
                "head_biases": head_labels(model.cfg), "mask_scale": model.cfg.mask_scale}
        out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
        return explain_images(model, task, images, query_patch=query_patch, out_dir=out,
                              connectivity=exp.cfg.image.connectivity, meta=meta, log=log)
    # Checked before loading any data: a wrong target fails at once.
    if target == "graph" and (nodes or pairs):
        raise UsageError(f"{run_dir} is a graph-level run: --node/--edge need a node-, link- or edge-level run; "
                         f"use --graph I")
    if target == "node" and graphs:
        raise UsageError(f"{run_dir} is a {level}-level run on one graph: --graph needs a graph-level run; "
                         f"use --node I or --edge U,V")
    if saved.get("model", {}).get("experts"):
        raise UsageError(f"{run_dir} uses M3Dphormer attention experts: explain records single-attention heads; "
                         f"read the per-token routing with XMaskNet.routing_weights instead")
    layers = int(saved.get("model", {}).get("layers", 1))
    if layer is not None and not 0 <= layer < layers:
        raise UsageError(f"--layer {layer}: the run's model has layers 0..{layers - 1}")
    exp, task, model = rebuild_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                device=device, log=log)
    level, seed, model_cfg = exp.level, int(saved["train"]["seed"]), model.cfg
    target = LEVELS[level].explain_target

    results: list[TargetMaps] = []
    d_max = DEFAULT_MAX_DISTANCE
    if target == "graph":
        count = len(task.eval_streams["test"].features)
        for g in graphs:
            if not 0 <= g < count:
                raise UsageError(f"--graph {g}: out of range, {exp.dataset} has graphs 0..{count - 1}")
        for g in graphs:
            t, d_max = explain_graph(model, task, g, max_nodes, query)
            results.append(t)
            log(f"recorded {t.describe()}")
    else:
        source = SingleGraph(task, level)
        n = source.num_nodes
        for i in nodes:
            if not 0 <= i < n:
                raise UsageError(f"--node {i}: out of range, the graph has nodes 0..{n - 1}")
        for u, v in pairs:
            if not (0 <= u < n and 0 <= v < n):
                raise UsageError(f"--edge {u},{v}: out of range, the graph has nodes 0..{n - 1}")
        targets = [("node", [i]) for i in nodes] + [("edge", list(e)) for e in pairs]
        for kind, centre in targets:
            t, d_max = explain_nodes(model, source, kind, centre, max_nodes, query)
            results.append(t)
            log(f"recorded {t.describe()}")

    out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
    meta = {"run_dir": str(run.path), "dataset": exp.dataset, "level": level, "seed": seed,
            "head_powers": list(model_cfg.head_powers), "use_bias": bool(model_cfg.use_bias),
            "head_biases": head_labels(model_cfg),
            "mask_scale": model_cfg.mask_scale, "max_nodes": int(max_nodes)}
    buckets = hop_buckets(d_max)
    ks, labels = effective_powers(model_cfg), head_labels(model_cfg)
    summary = hop_summary(results, ks, labels, buckets)
    maps_path = write_maps(out / "maps.h5", results, model_cfg, {**meta, "hop_summary": summary})
    figures, graph_figures, rows = {}, {}, []
    shown = len(results[0].maps) - 1 if layer is None else layer
    for t in results:
        row = target_dict(t, ks, labels, buckets)
        if view in ("matrix", "all"):
            fig, _ = plot_target(t, model_cfg)
            figures[t.name] = str(save_png(fig, out / f"{t.name}.png"))
        if view in ("graph", "all"):
            fig = plot_graph_view(graph_view(t, shown), labels[shown],
                                  f"{t.describe()} · attention of node {t.query}, layer {shown}", d_max)
            graph_figures[t.name] = str(save_png(fig, out / f"{t.name}_graph.png", dpi=100))
            row["graph_view"] = {"query": int(t.query), "layer": shown, "figure": graph_figures[t.name]}
        rows.append(row)
    return {**meta, "targets": rows,
            "files": {"maps": str(maps_path), "figures": figures, "graph_figures": graph_figures},
            "hop_buckets": buckets, "hop_summary": summary}
