"""Human output of ``xmask eval``: each split's metric beside the recorded one."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from xmask_cli.console import fmt_metric, kv_table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results import EvalResult


def human(con: Console, result: EvalResult, parts: Sequence[str]) -> None:
    """The recomputed metric of each of ``parts`` (:func:`~xmask_cli.engine.runs.evaluate.evaluate_run`'s result)."""
    rows = [(f"{p} {result.metric}", f"{result.metrics[p]:.4f} (recorded {fmt_metric(result.recorded[p])})")
            for p in parts]
    con.print(kv_table(f"{result.dataset} {result.level} seed {result.seed}: {result.run_dir}", rows))
