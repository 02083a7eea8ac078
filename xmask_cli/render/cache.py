"""Human output of ``xmask cache ls``, ``verify`` and ``clear``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from xmask_cli.console import human_bytes


def ls(con: Console, rows: list[dict[str, Any]], cache_dir: Path) -> None:
    """One row per cache or temp file of :func:`~xmask_cli.cache.listing` (``cache_dir``: named when empty)."""
    if not rows:
        con.print(f"no cache files under {cache_dir}", markup=False)
        return
    t = Table("dataset", "key", "graphs", "size", "created", "K", "norm", "parts", "holds", "status")
    for r in rows:
        pw = r["params"].get("powers", {})
        status = r["status"] if "writer_pid" not in r else f"{r['status']} temp (pid {r['writer_pid']})"
        t.add_row(r["dataset"], r["key"], str(r["num_graphs"]), human_bytes(r["size_bytes"]), r["created"],
                  str(pw.get("k", "?")), str(pw.get("normalization", "?")),
                  str(r["params"].get("partition", {}).get("parts", "?")), ", ".join(r.get("holds", [])), status)
    con.print(t)


def verify(con: Console, report: list[dict[str, Any]]) -> None:
    """``ok`` or ``BAD`` per verified file, with its problems."""
    if not report:
        con.print("no cache files to verify")
    for r in report:
        con.print(f"{'ok ' if r['ok'] else 'BAD'} {r['path']}" + ("" if r["ok"] else ": " + "; ".join(r["problems"])), markup=False)


def clear(con: Console, removed: list[str], kept: list[Any]) -> None:
    """How many items were removed, and the first of those kept (not xmask's)."""
    con.print(f"removed {len(removed)} item(s)", markup=False)
    if kept:
        con.print(f"kept {len(kept)} item(s) that are not xmask cache files: "
                  + ", ".join(str(p) for p in kept[:5]) + (" ..." if len(kept) > 5 else ""), markup=False)
