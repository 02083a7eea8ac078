"""Human output of ``xmask runs compare``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results import CompareResult


def _cell(v: Any) -> str:
    return "-" if v is None else f"{v:.4f}"


def compare(con: Console, result: CompareResult) -> None:
    """One row per run: name/seed, dataset, metric, selected epoch / epochs run, train / val / test, wall."""
    t = Table(box=None, padding=(0, 1), pad_edge=False)
    for col, right in (("run", False), ("dataset", False), ("metric", False), ("best/epochs", True),
                       ("train", True), ("val", True), ("test", True), ("wall s", True)):
        t.add_column(col, justify="right" if right else "left", no_wrap=True)
    for r in result.runs:
        run = f"{r.name}/{r.seed}" + ("" if r.fold is None else f"/fold-{r.fold}")
        t.add_row(run, str(r.dataset), r.metric, f"{r.best_epoch}/{r.epochs_run}",
                  _cell(r.train), _cell(r.val), _cell(r.test), f"{r.wall_s:.1f}")
    con.print(t)
    for pkg, by_version in result.version_differences.items():
        made = "; ".join(f"{ver}: {', '.join(runs)}" for ver, runs in by_version.items())
        con.print(f"note: these runs were made with different {pkg} versions ({made})", markup=False)
    if result.plot:
        con.print(f"plot: {result.plot}", markup=False)
