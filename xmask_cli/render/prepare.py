"""Human output of ``xmask prepare``: the summary table and the truncation report."""
from __future__ import annotations

from typing import Any

from rich.console import Console

from xmask_cli.console import human_bytes, kv_table


def human(con: Console, summary: Any, name: str) -> None:
    """The prepare summary of dataset ``name`` (a :class:`~xmask_cli.prepare.PrepareSummary`)."""
    from xmask_cli.cache.manage import holds  # imported here: the cache package loads h5py, and the CLI starts cheap

    state = "already cached" if summary.cached else f"prepared in {summary.seconds:.2f}s"
    con.print(kv_table(f"{name}: {state}", [
        ("graphs", summary.graphs), ("nodes", summary.nodes), ("edges", summary.edges),
        *([("merged rows", f"{summary.merged_edge_rows} repeated edge rows merged")]
          if getattr(summary, "merged_edge_rows", 0) else []),
        ("features", f"{summary.features['detail']}, width {summary.features['dim']}" if summary.features else "-"),
        ("file", summary.path), ("holds", ", ".join(holds(summary.params))),
        *([("served from", summary.served_from)] if getattr(summary, "served_from", None) else []),
        ("size", human_bytes(summary.size_bytes)), ("seconds", summary.seconds),
        *truncation_rows(summary.truncation),
    ]))


def truncation_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Human rows for prepare's truncation report: rule and dropped mass per power."""
    if not report.get("large_graphs"):
        return [("truncation", "none (no large graph: every power exact)")]
    fanout = report.get("fanout", 0)
    cap = f", fanout={fanout} ({report.get('capped_rows', 0)} hub row(s) capped)" if fanout else ", no fan-out cap"
    rows = [("truncation", f"tau={report['tau']:g}, topk={report['topk']}{cap} on {report['large_graphs']} large "
                           f"graph(s); Â^1 and real edges kept whole")]
    for group, label, name in (("powers", "k", "dropped Â^k mass"), ("rrwp", "step", "dropped P^k mass")):
        if group in report:
            d = report[group]
            cells = [f"{label}={j}: mean {m:.2%} max {x:.2%}" for j, m, x in zip(d[label], d["mean"], d["max"])]
            rows.append((f"{name} (per row)", "; ".join(cells)))
    return rows
