"""Human output of ``xmask env``."""
from __future__ import annotations

from typing import Any

from rich.console import Console

from xmask_cli.console import kv_table


def env(con: Console, record: dict[str, Any]) -> None:
    """The versions, the platform, the device and the thread counts, one table each (as a bug report quotes them)."""
    con.print(kv_table("versions", list(record["versions"].items())))
    device = record["device"]
    con.print(kv_table("device", [("platform", record["platform"]), ("device", device["name"]),
                                  *[(k, v) for k, v in device.items() if k != "name"]]))
    con.print(kv_table("threads", list(record["threads"].items())))
    if record.get("other_packages"):
        con.print(kv_table("other packages", list(record["other_packages"].items())))
