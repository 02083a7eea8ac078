"""Human output of ``xmask train``: one row per seed, mean ± std over seeds."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from xmask_cli.console import fmt_metric

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results import SweepResult


def human(con: Console, result: SweepResult) -> None:
    """The per-seed table of :func:`~xmask_cli.engine.sweep.train_seeds`'s result."""
    t = Table(title=f"{result.dataset} ({result.level}, {result.metric}) -> {result.run_root}",
              title_justify="left")
    for col in ("seed", "best epoch", "epochs", "train", "val", "test"):
        t.add_column(col, justify="right")
    for r in result.runs:
        m = r.metrics
        t.add_row(str(r.seed), str(r.best_epoch), str(r.epochs_run),
                  fmt_metric(m["train"]), fmt_metric(m["val"]), fmt_metric(m["test"]))
    if len(result.runs) > 1 and result.aggregate is not None:
        a = result.aggregate
        t.add_row("mean ± std", "", "", *(f"{a[p].mean:.4f} ± {a[p].std:.4f}" for p in ("train", "val", "test")))
    con.print(t)
    features = result.features
    if features:
        con.print(f"node features: {features['detail']}, width {features['dim']}")
        ns = features.get("node_struct")
        if ns:
            con.print(f"structural input (model.node_struct={ns['kind']}): {ns['detail']}, width {ns['dim']}")
