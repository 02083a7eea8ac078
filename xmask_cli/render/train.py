"""Human output of ``xmask train``: one row per seed, mean ± std over seeds."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.table import Table

from xmask_cli.console import fmt_metric, human_bytes, kv_table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no numpy
    from xmask_cli.results import SweepResult


def human(con: Console, result: SweepResult) -> None:
    """The per-seed table of :func:`~xmask_cli.engine.runs.sweep.train_seeds`'s result."""
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


def dry_run(con: Console, plan: dict[str, Any]) -> None:
    """``xmask train --dry-run``: the resolved config, the run folders, the cache file and the estimate
    (``plan``: :meth:`~xmask_cli.engine.runs.dryrun.DryRun.to_json`)."""
    con.print(f"dry run: {plan['dataset']} ({plan['level']}, {plan['metric']}), nothing written or trained",
              markup=False)
    con.print("\nresolved config:", markup=False)
    con.print(yaml.safe_dump(plan["config"], sort_keys=False).rstrip(), markup=False)
    runs = Table("seed", "fold", "folder", "action", title="runs", title_justify="left")
    for r in plan["runs"]:
        runs.add_row(str(r["seed"]), "-" if r["fold"] is None else str(r["fold"]), r["path"], r["action"])
    con.print(runs)
    cache = plan["cache"]
    if cache is not None:
        state = "present" if cache["present"] else "to prepare"
        con.print(f"structure cache: {cache['path']} ({state}; {', '.join(cache['sections'])})", markup=False)
    est = plan["estimate"]
    if est is not None:
        step = est["largest_step"]
        rows = [("stored pairs (Â^1..Â^K union)", f"{est['pairs']:,} ({est['pairs_from']})"),
                ("pairs per power", ", ".join(f"{p:,}" for p in est["pairs_per_power"])),
                ("parameters", f"{est['parameters']:,}"),
                ("weights + optimizer state", human_bytes(est["model_state_bytes"]))]
        if step is not None:
            rows += [("largest step", f"{step['graphs']} graph(s), {step['nodes']:,} nodes, "
                                      f"{step['attention_entries']:,} attention entries ({step['path']})"),
                     ("gradients + activations per step", human_bytes(est["step_bytes"])),
                     ("peak memory per step", human_bytes(est["peak_bytes"]))]
        con.print(kv_table("estimate", rows))
    for note in plan["notes"]:
        con.print(f"note: {note}", markup=False)
