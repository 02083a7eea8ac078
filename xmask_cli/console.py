"""Output helpers: results on stdout (human or JSON), logs and progress on stderr."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.table import Table
from rich.text import Text


class Bar:
    """A progress bar handle: ``bar(done, total)`` moves it; :meth:`restart` starts it again for the next run
    with a new description; :meth:`status` sets the text after the count. This base class draws nothing: it
    is the bar off a terminal, under ``--format json`` and ``-q``."""

    def __call__(self, done: int, total: int | None) -> None:
        """Show ``done`` of ``total`` steps."""

    def restart(self, total: int | None, description: str, unit: str = "") -> None:
        """Zero the bar (and its time estimate) for a new run of ``total`` steps named ``description``;
        ``unit`` names the steps before the count (``epoch 3/50``)."""

    def status(self, text: str) -> None:
        """The text shown after the count (e.g. the last validation metric)."""


class _LiveBar(Bar):
    """A :class:`Bar` drawn by a rich :class:`Progress` on a terminal."""

    def __init__(self, prog: Progress, task: TaskID) -> None:
        self.prog, self.task = prog, task

    def __call__(self, done: int, total: int | None) -> None:
        self.prog.update(self.task, completed=done, total=total)

    def restart(self, total: int | None, description: str, unit: str = "") -> None:
        self.prog.reset(self.task, total=total, description=description, status="", unit=unit)

    def status(self, text: str) -> None:
        # Drawn at once: a status comes once per epoch, and an epoch shorter than the refresh period would
        # otherwise never be shown.
        self.prog.update(self.task, status=text, refresh=True)


class _Count(ProgressColumn):
    """``epoch 3/50``: the steps done of the total, after the unit's name when the bar has one."""

    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else f"{int(task.total)}"
        unit = task.fields.get("unit", "")
        return Text(f"{unit} {int(task.completed)}/{total}" if unit else f"{int(task.completed)}/{total}",
                    style="progress.download")


class _TimeLeft(ProgressColumn):
    """``0:01:05 left``: the mean time per step since the bar (re)started times the steps left; nothing before
    the first step, without a total or once done."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed
        if task.total is None or not task.completed or elapsed is None or task.finished:
            return Text("")
        left = int(elapsed / task.completed * (task.total - task.completed))
        minutes, seconds = divmod(left, 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours}:{minutes:02d}:{seconds:02d} left", style="progress.remaining")


@dataclass(frozen=True)
class Output:
    """Where and how one command reports. Passed down, never global.

    Attributes:
        fmt: ``human`` or ``json``.
        quiet: suppress log lines on stderr.
    """

    fmt: str = "human"
    quiet: bool = False
    # The live progress display while one is drawn: log lines go through its console, above the bar (a
    # console of their own would write over the bar's last frame and leave the two glued on one line).
    _live: list[Progress] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def json(self) -> bool:
        return self.fmt == "json"

    def stdout(self) -> Console:
        return Console(file=sys.stdout, soft_wrap=True, highlight=False)

    def stderr(self) -> Console:
        return Console(file=sys.stderr, soft_wrap=True, highlight=False)

    def log(self, message: str) -> None:
        """A progress/log line on stderr (never stdout)."""
        if self.quiet:
            return
        console = self._live[-1].console if self._live else self.stderr()
        console.print(message, markup=False, highlight=False)

    def result(self, payload: Any, human: Callable[[Console], None]) -> None:
        """Print the command's result: ``payload`` as JSON, or ``human(console)``."""
        if self.json:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
            sys.stdout.flush()
        else:
            human(self.stdout())

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Bar]:
        """A rich progress bar on stderr, only when stderr is a terminal and output is human (else a :class:`Bar`
        that draws nothing). While it is drawn, :meth:`log` prints above it; it is erased when the block ends."""
        if self.json or self.quiet or not sys.stderr.isatty():
            yield Bar()
            return
        with Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), _Count(),
                      TextColumn("{task.fields[status]}"), _TimeLeft(),
                      console=self.stderr(), transient=True) as prog:
            self._live.append(prog)
            try:
                yield _LiveBar(prog, prog.add_task(description, total=total, status="", unit=""))
            finally:
                self._live.pop()


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
