"""``xmask eval``: a run's metric recomputed from its best checkpoint."""
from __future__ import annotations

from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, DeviceOpt, FormatOpt, RunDirArg, options
from xmask_cli.errors import UsageError
from xmask_cli.render import evaluate as render


def eval_(
    ctx: typer.Context,
    run_dir: RunDirArg,
    split: Annotated[str, typer.Option("--split", help="val, test or all.")] = "test",
    device: DeviceOpt = "auto",
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Reload a run's resolved config and best checkpoint and recompute its metric.

    Prints the recomputed value next to the one summary.json recorded; they
    agree (on the same device) because evaluation batches are fixed.

    Examples:

        xmask eval runs/mutag-graph/0

        xmask eval runs/cora-node/3 --split val --format json
    """
    from xmask_cli.engine.runs.evaluate import evaluate_run
    from xmask_cli.engine.runs.plan import resolve_device

    out = output_for(ctx, fmt)
    parts = {"val": ("val",), "test": ("test",), "all": ("train", "val", "test")}.get(split)
    if parts is None:
        raise UsageError(f"--split must be val, test or all, got '{split}'")
    result = evaluate_run(run_dir, parts=parts, device=resolve_device(device), cache_dir=data.cache(),
                          data_root=data.data_root, offline=data.no_download, log=out.log)

    out.result(result.to_json(), lambda con: render.human(con, result, parts))


def register(app: typer.Typer) -> None:
    """Add ``xmask eval`` to ``app``."""
    app.command("eval", epilog=EXIT_HELP)(handle_errors(options(eval_)))
