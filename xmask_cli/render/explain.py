"""Human output of ``xmask explain``: the targets, the hop table, the files written."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def human(con: Console, result: dict[str, Any], folder: Path) -> None:
    """Targets, attention mass by hop distance per layer and head, and files of an explain result."""
    for t in result["targets"]:
        con.print(f"{t['name']}: {t['target']}")
    buckets = result["hop_buckets"]
    # Every query row of every target enters the means (--query picks only the graph view's node).
    table = Table(title=f"attention mass by hop distance, mean over every query row of "
                        f"{len(result['targets'])} target(s) -> {folder}",
                  title_justify="left", padding=(0, 1), pad_edge=False, box=None)
    table.add_column("layer head", no_wrap=True)
    table.add_column("k", justify="right")
    for b in buckets:
        table.add_column("unr" if b == "unreachable" else b, justify="right", no_wrap=True)
    for layer, heads in result["hop_summary"].items():
        for head, info in heads.items():
            label = f"L{layer.split('_')[-1]} h{head.split('_')[-1]}"  # numbered from 0, as in maps.h5 and the figures
            table.add_row(label, str(info["k"]), *(f"{info['mass'].get(b, 0.0):.2f}" for b in buckets))
    con.print(table)
    con.print(f"maps: {result['files']['maps']}")
    for path in result["files"]["figures"].values():
        con.print(f"figure: {path}")
    for path in result["files"].get("graph_figures", {}).values():
        con.print(f"graph view: {path}")
    for path in result["files"].get("explanations", {}).values():
        con.print(f"explanation: {path}")
