"""Human output of ``xmask ablate``: one row per variant, its test against full's (of the means and run by run)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results_ablation import AblationResult


def human(con: Console, result: AblationResult, seeds: str, folder: Path) -> None:
    """The ablation table of :func:`~xmask_cli.ablate.run_ablation`'s result (``seeds`` as given).

    ``paired Δ vs full``: the mean ± std over runs of the variant's test minus full's on the same run (same
    seed and fold, same test set), then how many runs it is above (↑), below (↓) and equal to (=) full."""
    folds = f", {result.folds} folds" if result.folds else ""
    t = Table(title=f"{result.dataset} ({result.level}, {result.metric}, seeds {seeds}{folds}) -> {folder}",
              title_justify="left")
    for col in ("variant", "val", "test", "Δ test vs full", "paired Δ vs full", "status"):
        t.add_column(col, justify="right" if col != "variant" else "left")
    for r in result.rows:
        val = "-" if r.val_mean is None else f"{r.val_mean:.4f} ± {r.val_std:.4f}"
        test = "-" if r.test_mean is None else f"{r.test_mean:.4f} ± {r.test_std:.4f}"
        delta = "-" if r.delta_test is None else f"{r.delta_test:+.4f}"
        p = r.paired
        paired = "-" if p is None else f"{p.mean:+.4f} ± {p.std:.4f} ↑{p.above} ↓{p.below} ={p.ties}"
        t.add_row(r.variant, val, test, delta, paired, r.status if r.status == "ok" else f"failed: {r.error}")
    con.print(t)
