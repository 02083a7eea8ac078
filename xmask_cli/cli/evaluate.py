"""``xmask eval``: a run's metric recomputed from its best checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import (EXIT_HELP, CacheDirOpt, DataRootOpt, DeviceOpt, FormatOpt, OfflineOpt, handle_errors,
                               output_for)
from xmask_cli.errors import UsageError
from xmask_cli.render import evaluate as render

def eval_(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run folder, `runs/<name>/<seed>/`.", show_default=False)],
    split: Annotated[str, typer.Option("--split", help="val, test or all.")] = "test",
    device: DeviceOpt = "auto",
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Reload a run's resolved config and best checkpoint and recompute its metric.

    Prints the recomputed value next to the one summary.json recorded; they
    agree (on the same device) because evaluation batches are fixed.

    Examples:

        xmask eval runs/mutag-graph/0

        xmask eval runs/cora-node/3 --split val --format json
    """
    from xmask_cli.engine.evaluate import evaluate_run
    from xmask_cli.engine.experiment import resolve_device
    from xmask_cli.prepare import resolve_cache_dir

    out = output_for(ctx, fmt)
    parts = {"val": ("val",), "test": ("test",), "all": ("train", "val", "test")}.get(split)
    if parts is None:
        raise UsageError(f"--split must be val, test or all, got '{split}'")
    result = evaluate_run(run_dir, parts=parts, device=resolve_device(device), cache_dir=resolve_cache_dir(cache_dir),
                          data_root=data_root, offline=True if offline else None, log=out.log)

    out.result(result, lambda con: render.human(con, result, parts))


def register(app: typer.Typer) -> None:
    """Add ``xmask eval`` to ``app``."""
    app.command("eval", epilog=EXIT_HELP)(handle_errors(eval_))
