"""Output helpers: results on stdout (human or JSON), logs and progress on stderr."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


@dataclass(frozen=True)
class Output:
    """Where and how one command reports. Passed down, never global.

    Attributes:
        fmt: ``human`` or ``json``.
        quiet: suppress log lines on stderr.
    """

    fmt: str = "human"
    quiet: bool = False

    @property
    def json(self) -> bool:
        return self.fmt == "json"

    def stdout(self) -> Console:
        return Console(file=sys.stdout, soft_wrap=True, highlight=False)

    def stderr(self) -> Console:
        return Console(file=sys.stderr, soft_wrap=True, highlight=False)

    def log(self, message: str) -> None:
        """A progress/log line on stderr (never stdout)."""
        if not self.quiet:
            self.stderr().print(message, markup=False)

    def result(self, payload: Any, human: Callable[[Console], None]) -> None:
        """Print the command's result: ``payload`` as JSON, or ``human(console)``."""
        if self.json:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
            sys.stdout.flush()
        else:
            human(self.stdout())

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
        """A rich progress bar on stderr, only when stderr is a terminal and output is human."""
        if self.json or self.quiet or not sys.stderr.isatty():
            yield lambda done, total_: None
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=self.stderr(), transient=True) as prog:
            task = prog.add_task(description, total=total)
            yield lambda done, total_: prog.update(task, completed=done, total=total_)


def kv_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """Two-column table for summaries."""
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GiB"


def fmt_metric(v: Any) -> str:
    """A metric with four decimals, ``-`` when there is none."""
    return "-" if v is None else f"{v:.4f}"
