"""What a run leaves to look at while and after it trains: ``curves.png`` and, on request, TensorBoard events.

:class:`RunWatch` is called once per logged epoch (:meth:`RunWatch.epoch`) and
once when training ends, however it ends (:meth:`RunWatch.close`): the
training loop wraps itself in it, so a finished run, one stopped by Ctrl-C and
one stopped by a diverged loss all leave ``curves.png`` in the run folder.

``train.loggers: [tensorboard]`` (``xmask train --logger tensorboard``) also
writes TensorBoard event files into the run folder: every numeric key of each
metrics row as a scalar at step ``epoch``, grouped by :func:`scalar_tag`
(``train/loss``, ``train/lr``, ``val/<metric>``, ``val/loss``, ``time/train_s``,
``time/epoch_s``, ``time/input_stall``); the resolved config as text (tag
``config``) and the final summary as text (tag ``summary``); and, when the run
finishes, the HParams record (:func:`hparams_of`: the resolved config's
hyper-parameters and the seed) with the final metrics as scalars
``final/<part>_<metric>`` at the selected epoch, so TensorBoard's HParams tab
compares seeds and configs.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training.curves import write_curves
from xmask_cli.errors import UsageError

if TYPE_CHECKING:  # tensorboard is optional; the writer loads only when asked for
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["RunWatch", "check_loggers", "hparams_of", "scalar_tag", "summary_writer_class"]


#: Row keys that are not a curve (bookkeeping, not a measurement).
_NOT_SCALAR = ("epoch", "best_epoch")
#: Config sections that are no hyper-parameter of the run (its text, where it writes, the search space).
_NOT_HPARAM = ("description", "run", "tune")


def scalar_tag(key: str) -> str:
    """The TensorBoard tag of a metrics-row key: timings (``*_s``, ``input_stall``) under ``time/``, ``val_*``
    under ``val/``, the rest (``loss``, ``lr``, ``train_*``, ``skipped_batches``) under ``train/``."""
    if key.endswith("_s") or key == "input_stall":
        return f"time/{key}"
    if key.startswith("val_"):
        return f"val/{key[4:]}"
    return f"train/{key.removeprefix('train_')}"


def _flat(prefix: str, value: object, out: dict[str, float | str]) -> None:
    """``value`` as dotted keys under ``prefix``: numbers kept, bools and strings as text, lists as JSON
    text; None left out (TensorBoard has no null)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, bool):
        out[prefix] = "true" if value else "false"
    elif isinstance(value, (int, float, str)):
        out[prefix] = value
    elif value is not None:
        out[prefix] = json.dumps(value, sort_keys=True)


def hparams_of(saved: Mapping[str, object]) -> dict[str, float | str]:
    """A run's hyper-parameters from its ``config.json``: the resolved config flattened to dotted keys
    (``model.hidden``, ``train.lr``, ``data.dataset``, …; its description, run and tune sections left out)
    and ``seed``."""
    out: dict[str, float | str] = {}
    config = saved.get("config")
    if isinstance(config, Mapping):
        for section, body in config.items():
            if section not in _NOT_HPARAM:
                _flat(str(section), body, out)
    train = saved.get("train")
    if isinstance(train, Mapping) and _epoch(train.get("seed")) is not None:
        out["seed"] = int(train["seed"])
    return out


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
                tb.add_scalar(scalar_tag(key), float(value), step)
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
                self._hparams(self._writer, summary)
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def _hparams(self, tb: SummaryWriter, summary: Mapping[str, object]) -> None:
        """The HParams record of a finished run into its own event file (not the subfolder torch's
        ``add_hparams`` makes): the hyper-parameters and the final metrics, also as ``final/`` scalars."""
        from torch.utils.tensorboard.summary import hparams

        metrics = summary.get("metrics")
        name = summary.get("metric", "metric")
        final = {f"final/{part}_{name}": float(v) for part, v in (metrics.items() if isinstance(metrics, Mapping)
                 else ()) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        step = _epoch(summary.get("best_epoch")) or 0
        records = hparams(hparams_of(self.run.load_config()), final)  # type: ignore[no-untyped-call]
        if tb.file_writer is not None:  # None only after close()
            for record in records:
                tb.file_writer.add_summary(record, step)
        for tag, value in final.items():
            tb.add_scalar(tag, value, step)
        tb.flush()
