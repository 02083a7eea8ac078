"""Human output of ``xmask presets ls`` and ``xmask presets show``."""
from __future__ import annotations

from typing import Any

import yaml
from rich.console import Console
from rich.table import Table


def ls(con: Console, rows: list[dict[str, Any]]) -> None:
    """One row per preset: name, what it extends, its file."""
    t = Table("preset", "extends", "path")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["extends"]), r["path"])
    con.print(t)


def show(con: Console, cfg: dict[str, Any]) -> None:
    """A resolved config as YAML, in the schema's key order."""
    con.print(yaml.safe_dump(cfg, sort_keys=False).rstrip(), markup=False)
