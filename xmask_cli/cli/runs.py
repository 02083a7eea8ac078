"""``xmask runs compare``: finished runs side by side, one plot of their validation curves."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import add_group, output_for
from xmask_cli.cli.completion import complete_run_dir
from xmask_cli.cli.options import FormatOpt
from xmask_cli.render import runs as render


def runs_compare(
    ctx: typer.Context,
    dirs: Annotated[list[Path], typer.Argument(help="Run folders (`runs/<name>/<seed>`) or folders of them (`runs/<name>`).", show_default=False, autocompletion=complete_run_dir)],
    out: Annotated[Path | None, typer.Option("--out", help="Where the plot of the validation curves goes (PNG) [default `runs-compare.png`].", show_default=False)] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Print the table only.")] = False,
    fmt: FormatOpt = None,
) -> None:
    """A table of finished runs (name, seed, selected epoch, train / val / test metric, wall time) and one plot
    of their validation curves, the selected epoch of each marked.

    Wall time: the epochs' training passes and validations, summed over metrics.jsonl.

    Examples:

        xmask runs compare runs/mutag-graph runs/mutag-graph-k1

        xmask runs compare runs/cora-node/0 runs/cora-node/1 --out cora.png

        xmask runs compare runs/mutag-graph --format json --no-plot
    """
    from xmask_cli.engine.runs.compare import compare_runs

    output = output_for(ctx, fmt)
    result = compare_runs(dirs, None if no_plot else (out or Path("runs-compare.png")))
    output.result(result.to_json(), lambda con: render.compare(con, result))


def register(app: typer.Typer) -> None:
    """Add the ``xmask runs`` group (``compare``) to ``app``."""
    add_group(app, "runs", "Look at finished runs.\n\nExamples:\n\n    xmask runs compare runs/mutag-graph runs/proteins-graph",
              {"compare": runs_compare})
