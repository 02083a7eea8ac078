"""``xmask export``: a run's trained model as a program for inference (torch.export or ONNX)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, FormatOpt, RunDirArg, options
from xmask_cli.render import export as render


def export(
    ctx: typer.Context,
    run_dir: RunDirArg,
    out: Annotated[Path | None, typer.Option("--out", help="File to write [default RUN/model.pt2, RUN/model.onnx with --to onnx].", show_default=False)] = None,
    to: Annotated[str, typer.Option("--to", help="torch (a torch.export program, .pt2) or onnx (needs the [onnx] extra).")] = "torch",
    path: Annotated[str, typer.Option("--path", help="Attention path of the program: auto (the one `xmask eval` runs), dense (padded batches) or pairs (node level: one graph's attended pairs).")] = "auto",
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Write a run's best model as a program for inference, with dynamic graph and node counts.

    The dense path takes x [B, N, F], powers [B, K, N, N] (Â^1..Â^K) and mask
    [B, N] (True for real nodes) and returns [B, classes] (graph level) or
    [1, N, classes] (node level); the pairs path (node level) takes x [N, F],
    edge_index [2, E] and values [E, K] and returns [N, classes]. B, N and E
    may be any size. The program is run on the test part and compared with the
    outputs `xmask eval` scores (the largest difference is printed). Models with
    attention experts or learned biases, and partition-batched runs, are refused
    (exit 2) with the reason. Inputs and loading: docs/export.md.

    Examples:

        xmask export runs/mutag-graph/0

        xmask export runs/cora-node/0 --path dense --out cora.pt2

        xmask export runs/mutag-graph/0 --to onnx --format json
    """
    from xmask_cli.export import export_run

    output = output_for(ctx, fmt)
    result = export_run(run_dir, out=out, to=to.lower(), path=path.lower(), cache_dir=data.cache(),
                        data_root=data.data_root, offline=data.no_download, log=output.log)
    output.result(result.to_json(), lambda con: render.human(con, result))


def register(app: typer.Typer) -> None:
    """Add ``xmask export`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(export)))
