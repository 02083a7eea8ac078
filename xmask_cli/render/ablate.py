"""Human output of ``xmask ablate``: one row per variant, Δ test against full."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results import AblationResult


def human(con: Console, result: AblationResult, seeds: str, folder: Path) -> None:
    """The ablation table of :func:`~xmask_cli.ablate.run_ablation`'s result (``seeds`` as given)."""
    t = Table(title=f"{result.dataset} ({result.level}, {result.metric}, seeds {seeds}) -> {folder}",
              title_justify="left")
    for col in ("variant", "val", "test", "Δ test vs full", "status"):
        t.add_column(col, justify="right" if col != "variant" else "left")
    for r in result.rows:
        val = "-" if r.val_mean is None else f"{r.val_mean:.4f} ± {r.val_std:.4f}"
        test = "-" if r.test_mean is None else f"{r.test_mean:.4f} ± {r.test_std:.4f}"
        delta = "-" if r.delta_test is None else f"{r.delta_test:+.4f}"
        t.add_row(r.variant, val, test, delta, r.status if r.status == "ok" else f"failed: {r.error}")
    con.print(t)
