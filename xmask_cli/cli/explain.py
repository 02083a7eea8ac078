"""``xmask explain``: per-layer, per-head attention maps of a trained run."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, DeviceOpt, FormatOpt, RunDirArg, options
from xmask_cli.render import explain as render


def explain(
    ctx: typer.Context,
    run_dir: RunDirArg,
    graph: Annotated[list[int] | None, typer.Option("--graph", help="Graph id (graph-level runs); repeatable.", show_default=False)] = None,
    node: Annotated[list[int] | None, typer.Option("--node", help="Node id (node, link, edge runs): its neighbourhood; repeatable.", show_default=False)] = None,
    edge: Annotated[list[str] | None, typer.Option("--edge", help="U,V node pair (link, edge runs); repeatable.", show_default=False)] = None,
    image: Annotated[list[int] | None, typer.Option("--image", help="Test image index (image runs): the image beside each head's attention over the patch grid; repeatable.", show_default=False)] = None,
    query_patch: Annotated[int | None, typer.Option("--query-patch", min=0, help="Image runs: show this patch's attention row (row-major index) instead of the attention each patch receives, averaged over all queries.", show_default=False)] = None,
    view: Annotated[str, typer.Option("--view", help="Figures: matrix (layer × kind × head grid), graph (the neighbourhood drawn node-link, one panel per head: the query's attention as node colour and arc width, hop colouring) or all.")] = "all",
    query: Annotated[int | None, typer.Option("--query", min=0, help="Graph view: the node whose attention is drawn [default: node 0 of a graph, the --node itself, U of --edge U,V].", show_default=False)] = None,
    layer: Annotated[int | None, typer.Option("--layer", min=0, help="Graph view and --pyg: the layer drawn / read [default: the last].", show_default=False)] = None,
    head: Annotated[int | None, typer.Option("--head", min=0, help="--pyg: the head the masks read, from 0 [default: the mean over the layer's heads].", show_default=False)] = None,
    pyg: Annotated[bool, typer.Option("--pyg", help="Also save one torch_geometric Explanation per target, OUT/TARGET_explanation.pt (torch.load(..., weights_only=False)).")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Output folder [default `maps/<name>-<seed>`].", show_default=False)] = None,
    max_nodes: Annotated[int, typer.Option("--max-nodes", min=2, help="Largest map kept; bigger targets are cropped to the closest nodes (and say so).")] = 64,
    device: DeviceOpt = "auto",
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Per-layer, per-head attention maps of a trained run (paper 000, Fig. 3).

    For every layer and head: the energy q·k/√d_h, the structural term as it
    enters the logits, their sum, and the attention after softmax, with the
    node ids they refer to. Writes OUT/maps.h5 (one dataset per target / layer /
    head / kind, attributes naming the head's power k and bias type), one PNG
    grid per target (rows layers × kinds, columns heads, node ids on the axes)
    and one graph view per target (TARGET_qQUERY_lLAYER_graph.png: the
    neighbourhood drawn node-link, nodes coloured by hop distance from the query node, then one
    panel per head of --layer with the query's attention to every node as node
    colour and arc colour / width). With --pyg, one PyG Explanation per target
    (TARGET_explanation.pt: edge_mask the attention on the crop's edges,
    node_mask the query's attention per node). Prints each head's attention mass by
    shortest-path distance, averaged over every query row of the targets.

    Examples:

        xmask explain runs/proteins-graph/0 --graph 17 --out maps/

        xmask explain runs/cora-node/0 --node 5 --node 100 --max-nodes 48

        xmask explain runs/mutag-graph/0 --graph 3 --query 7 --layer 0 --view graph

        xmask explain runs/cora-node/0 --node 5 --pyg --head 1

        xmask --format json explain runs/cora-link/0 --edge 12,345

        xmask explain runs/digits-image/0 --image 3 --query-patch 5
    """
    from xmask_cli.engine.runs.plan import resolve_device
    from xmask_cli.explain import ExplainRequest, explain_run

    output = output_for(ctx, fmt)
    folder = out or Path("maps") / f"{run_dir.resolve().parent.name}-{run_dir.resolve().name}"
    dev = resolve_device(device)  # a bad --device is reported before what to explain is checked
    request = ExplainRequest(graphs=graph or (), nodes=node or (), edges=edge or (), images=image or (),
                             max_nodes=max_nodes, query_patch=query_patch, query=query, view=view.lower(),
                             layer=layer, head=head, pyg=pyg)
    result = explain_run(run_dir, request, out_dir=folder, cache_dir=data.cache(), data_root=data.data_root,
                         device=dev, offline=data.no_download, log=output.log)

    output.result(result, lambda con: render.human(con, result, folder))


def register(app: typer.Typer) -> None:
    """Add ``xmask explain`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(explain)))
