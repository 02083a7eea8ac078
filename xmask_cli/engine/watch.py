"""What a run leaves to look at while and after it trains: ``curves.png`` and, on request, TensorBoard events.

:class:`RunWatch` is called once per logged epoch (:meth:`RunWatch.epoch`) and
once when training ends, however it ends (:meth:`RunWatch.close`): the
training loop wraps itself in it, so a finished run, one stopped by Ctrl-C and
one stopped by a diverged loss all leave ``curves.png`` in the run folder.

``train.loggers: [tensorboard]`` (``xmask train --logger tensorboard``) also
writes TensorBoard event files into the run folder: every numeric key of each
metrics row as a scalar at step ``epoch``, the resolved config as text (tag
``config``) and the final metrics as text (tag ``summary``).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xmask_cli.engine.curves import write_curves
from xmask_cli.engine.runs import RunDir
from xmask_cli.errors import UsageError

if TYPE_CHECKING:  # tensorboard is optional; the writer loads only when asked for
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["RunWatch", "check_loggers", "summary_writer_class"]


#: Row keys that are not a curve (bookkeeping, not a measurement).
_NOT_SCALAR = ("epoch", "best_epoch")


def _epoch(value: object) -> int | None:
    """A row's or summary's epoch field as an int (None: absent or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def summary_writer_class() -> type[SummaryWriter]:
    """``torch.utils.tensorboard.SummaryWriter``; :class:`UsageError` (exit 2) with the install hint if missing."""
    try:
        import tensorboard  # noqa: F401  torch's writer needs the package itself
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError('train.loggers names tensorboard, which is not installed; install it with '
                         'pip install "xmask-cli[tensorboard]" (or drop --logger tensorboard)') from None
    return SummaryWriter


def check_loggers(loggers: Sequence[str]) -> None:
    """Fail at once (before any data is loaded) when a requested logger cannot run."""
    if "tensorboard" in loggers:
        summary_writer_class()


class RunWatch:
    """Per-epoch and end-of-run hooks of one run folder (rank 0 only; see the module docstring).

    Args:
        run: the run folder.
        loggers: ``train.loggers`` (``[]``: ``curves.png`` only).
    """

    def __init__(self, run: RunDir, loggers: Sequence[str] = ()):
        self.run = run
        self._writer_cls = summary_writer_class() if "tensorboard" in loggers else None
        self._writer: SummaryWriter | None = None
        self.epochs_seen = 0

    def _tb(self) -> SummaryWriter | None:
        # Opened at the first epoch: a run refused before training leaves no event file behind.
        if self._writer is None and self._writer_cls is not None:
            config = self.run.load_config()  # written before the first epoch
            self._writer = self._writer_cls(log_dir=str(self.run.path))
            self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, sort_keys=True) + "\n```", 0)
        return self._writer

    def epoch(self, row: Mapping[str, object]) -> None:
        """One epoch's metrics row, after it is written to ``metrics.jsonl``."""
        self.epochs_seen += 1
        tb = self._tb()
        if tb is None:
            return
        step = _epoch(row["epoch"])
        if step is None:
            raise ValueError(f"a metrics row's epoch must be a number, got {row['epoch']!r}")
        for key, value in row.items():
            if key in _NOT_SCALAR or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                tb.add_scalar(key, float(value), step)
        tb.flush()

    def close(self, summary: Mapping[str, object] | None = None) -> None:
        """End of training: ``summary`` when it finished, None when it stopped on an error or interrupt.

        Writes ``curves.png`` from the whole ``metrics.jsonl`` (earlier epochs of a resumed run included)
        when this call trained an epoch or the run finished; a run refused before its first epoch is left as
        it was.
        """
        try:
            if self.epochs_seen or summary is not None:
                rows = self.run.read_metrics()
                best = _epoch(summary.get("best_epoch") if summary else (rows[-1].get("best_epoch") if rows else None))
                state = "" if summary is not None else " (stopped before the end)"
                write_curves(self.run.path / RunDir.CURVES, rows, best, f"{self.run.path}{state}")
            if summary is not None and self._writer is not None:
                self._writer.add_text("summary", "```\n" + json.dumps(summary, indent=2, sort_keys=True) + "\n```",
                                      _epoch(summary.get("best_epoch", 0)))
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
