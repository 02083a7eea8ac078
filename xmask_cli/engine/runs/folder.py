"""Run folders: resolved config, per-epoch metrics, checkpoints, summary, seed aggregates.

A run lives in ``runs/<name>/<seed>/``::

    config.json     the resolved config (split, model and train settings)
    metrics.jsonl   one JSON object per epoch
    last.pt         everything needed to continue a killed run
    best.pt         the best state by the validation metric
    summary.json    final metrics of the best state
    curves.png      loss and metrics per epoch (written at the end, and when a run stops on an error or Ctrl-C)
    events.out.tfevents.*  TensorBoard events (only with ``train.loggers: [tensorboard]``)
    .lock           held (``fcntl.flock``) by the process writing the run; holds its pid

Checkpoints hold tensors and plain Python values only, so they load with
``torch.load(..., weights_only=True)``; every file a reader may see half-written
(checkpoints, summary) is written to a temporary file in the same folder and
moved into place with :func:`os.replace`, which is atomic on POSIX and Windows. What the two checkpoints
hold is typed, and checked when read back, in :mod:`~xmask_cli.engine.training.checkpoint`.
No file of a run folder is ever opened through a symbolic link: a folder whose own
files are links is refused (:meth:`RunDir.refuse_links`), and the lock and the
metrics are opened with ``O_NOFOLLOW``.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, TypedDict, cast

import numpy as np
import torch

from xmask_cli.engine.training.checkpoint import BestCheckpoint, LastCheckpoint, check_best, check_last
from xmask_cli.errors import RunNotFoundError, UsageError, first_line
from xmask_cli.fs import DISK_FULL, atomic_write, open_nofollow, refuse_links, write_failed
from xmask_cli.jsonfile import read_json, read_json_lines
from xmask_cli.results import SUMMARY_FIELDS, SUMMARY_OPTIONAL, RunSummary

#: What to do after a run stopped on a full disk (every file is written whole or not at all, so it resumes).
_RESUME_HINT = "free some space, then run the same command again (with --resume a run goes on where it stopped)"


__all__ = ["RunDir", "aggregate", "write_bytes", "write_json", "write_text", "TIMING_KEYS", "input_stall",
           "without_timing", "MetricsRow", "MetricAggregate"]

#: The fields of a ``metrics.jsonl`` row that readers use, with their types: a file without them (or with
#: others there) is damaged (:mod:`xmask_cli.jsonfile`); ``summary.json``'s are :class:`RunSummary`'s.
METRICS_FIELDS = {"epoch": int}
METRICS_OPTIONAL = {name: (int, float, type(None)) for name in ("epoch_s", "train_s", "input_stall", "loss")}

#: Keys of a metrics row that are wall-clock measurements (never reproducible, so resume checks leave them out).
TIMING_KEYS = ("train_s", "epoch_s", "input_stall")


class _MetricsRowRequired(TypedDict):
    epoch: int


class MetricsRow(_MetricsRowRequired, total=False):
    """A ``metrics.jsonl`` row as :meth:`RunDir.read_metrics` returns it: the fields it checked
    (:data:`METRICS_FIELDS`, :data:`METRICS_OPTIONAL`). The row holds more (``lr``, ``val_<metric>``,
    ``val_loss``, ``best_epoch``, ...): read those with ``.get`` and check their type."""

    epoch_s: float | None
    train_s: float | None
    input_stall: float | None
    loss: float | None


class MetricAggregate(TypedDict):
    """One metric over seeds, as :func:`aggregate` gives it (and ``aggregate.json`` holds it)."""

    mean: float
    std: float
    values: list[float]


def without_timing(rows: Iterable[Mapping[str, object]]) -> list[dict[str, object]]:
    """Metrics rows without their :data:`TIMING_KEYS` (what a resumed run reproduces exactly)."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def input_stall(rows: Iterable[MetricsRow]) -> float | None:
    """Share of all training passes' wall time spent waiting for batches (None: no timed epoch)."""
    timed = [(stall * t, t) for r in rows
             if (stall := r.get("input_stall")) is not None and (t := r.get("train_s")) is not None]
    total = sum(t for _, t in timed)
    return sum(w for w, _ in timed) / total if total > 0 else None


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    atomic_write(path, write, _RESUME_HINT)


def _json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_json(path: Path, obj: object) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically (temp file, then rename)."""
    _atomic_write(Path(path), lambda f: f.write(_json_bytes(obj)))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` atomically (temp file, then rename)."""
    _atomic_write(Path(path), lambda f: f.write(text.encode()))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` atomically (temp file, then rename): a figure, for instance."""
    _atomic_write(Path(path), lambda f: f.write(data))


def _holder(fd: int) -> str:
    """The pid a lock file's holder wrote into it (``unknown`` if none)."""
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"


class RunDir:
    """One run folder; created on first use.

    Args:
        path: the folder, typically ``runs/<name>/<seed>``.
    """

    CONFIG = "config.json"
    METRICS = "metrics.jsonl"
    LAST = "last.pt"
    BEST = "best.pt"
    SUMMARY = "summary.json"
    CURVES = "curves.png"
    LOCK = ".lock"
    #: TensorBoard event files (``SummaryWriter`` names them ``events.out.tfevents.<time>.<host>...``).
    EVENTS = "events.out.tfevents.*"
    #: Every file a run writes (the lock and events aside), checkpoints first: removal order of
    #: :meth:`remove_run_files`.
    FILES = (LAST, BEST, SUMMARY, CURVES, METRICS, CONFIG)

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True):
        self.path = Path(path)
        # Folders made here, innermost first: a run that never wrote a file leaves none behind.
        self._made: list[Path] = []
        if create:
            self.make()

    def make(self) -> None:
        """Create the folder (and missing parents); :meth:`lock` does it, so a planned run makes its folder
        only when it starts."""
        made = [p for p in (self.path, *self.path.parents) if not p.exists()]
        self.path.mkdir(parents=True, exist_ok=True)
        self._made = made + [p for p in self._made if p not in made]

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------ integrity
    @contextlib.contextmanager
    def lock(self) -> Iterator[RunDir]:
        """Hold an exclusive lock on the folder for the ``with`` block (the run's life).

        A second process (or a second lock in this one) fails at once instead of
        interleaving its metrics and checkpoints with the first's. The lock is an
        ``fcntl.flock`` on ``.lock``, so a killed holder releases it.

        Raises:
            UsageError: another holder has the lock; the message names its pid.
        """
        path = self.path / self.LOCK
        while True:
            self.make()
            self.refuse_links()
            fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise self._in_use(holder) from None
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # a previous holder removed the file we locked: lock the current one
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield self
        finally:
            if not self.has_run_files():  # nothing was written (e.g. bad input): leave nothing behind
                path.unlink(missing_ok=True)
                for folder in self._made:
                    try:
                        folder.rmdir()
                    except OSError:
                        break
            os.close(fd)  # closing the descriptor releases the lock

    def _in_use(self, holder: str) -> UsageError:
        return UsageError(f"run folder {self.path} is in use by another xmask process (pid {holder}); "
                          f"wait for it to finish or pick another --name")

    def check_free(self) -> None:
        """Refuse (UsageError) an existing folder that another holder has locked; creates nothing.

        What a sweep checks of every planned folder that exists before any work (each run takes
        :meth:`lock` itself when it starts). A folder that does not exist, or has no ``.lock``, is free.
        """
        path = self.path / self.LOCK
        if not self.path.is_dir():
            return
        self.refuse_links()
        try:
            fd = open_nofollow(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._in_use(_holder(fd)) from None
        finally:
            os.close(fd)  # releases the probe's lock at once

    def refuse_links(self) -> None:
        """Refuse (UsageError, exit 2, naming the path) this folder if any of its own files is a symbolic link."""
        refuse_links(self.path, (self.LOCK, *self.FILES))

    def has_run_files(self) -> bool:
        """Whether a run already wrote anything here (config, metrics, checkpoints, summary)."""
        return any(os.path.lexists(self.path / name) for name in self.FILES)

    def remove_run_files(self) -> None:
        """Delete this folder's run files and their temp files, checkpoints first (``--overwrite``).

        Checkpoints go before the config: a kill midway never leaves an old
        checkpoint beside a new ``config.json``.
        """
        for name in self.FILES:
            (self.path / name).unlink(missing_ok=True)
        for p in self.path.glob(self.EVENTS):  # a replaced run's TensorBoard history goes with it
            p.unlink(missing_ok=True)
        temp = re.compile(r"^\.(" + "|".join(re.escape(n) for n in self.FILES) + r")\..+\.tmp$")
        for p in self.path.iterdir():
            if temp.match(p.name):
                p.unlink(missing_ok=True)

    # --------------------------------------------------------------- config
    def save_config(self, config: Mapping[str, object]) -> None:
        """Write the resolved config as JSON (atomically)."""
        _atomic_write(self.path / self.CONFIG, lambda f: f.write(_json_bytes(config)))

    def load_config(self) -> dict[str, object]:
        """The config written by :meth:`save_config` (a JSON object; the caller checks the fields it reads).

        Raises:
            RunNotFoundError: the file is missing, not JSON, or not a JSON object.
        """
        path = self.path / self.CONFIG
        try:
            config: dict[str, object] = read_json(path)
            return config
        except FileNotFoundError:
            raise RunNotFoundError(f"{path} is missing; not a complete run folder") from None

    # -------------------------------------------------------------- metrics
    def append_metrics(self, row: Mapping[str, object]) -> None:
        """Append one epoch's metrics as a JSON line."""
        path = self.path / self.METRICS
        data = (json.dumps(row, sort_keys=True) + "\n").encode()
        fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):  # a short write: the disk filled midway
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as exc:
                os.ftruncate(fd, size)  # never a half line, which resume could not read back
                if exc.errno in DISK_FULL:
                    raise write_failed(exc, path, _RESUME_HINT) from None
                raise
        finally:
            os.close(fd)

    def read_metrics(self) -> list[MetricsRow]:
        """All epoch rows written so far (empty if none)."""
        path = self.path / self.METRICS
        try:
            # The fields MetricsRow names are the ones checked here.
            return cast("list[MetricsRow]", read_json_lines(path, fields=METRICS_FIELDS, optional=METRICS_OPTIONAL))
        except FileNotFoundError:
            return []

    def truncate_metrics(self, num_epochs: int) -> None:
        """Keep the rows of epochs ``< num_epochs`` only.

        A run killed after logging an epoch but before checkpointing it would
        otherwise log that epoch twice on resume.
        """
        rows = [r for r in self.read_metrics() if int(r["epoch"]) < num_epochs]
        data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
        _atomic_write(self.path / self.METRICS, lambda f: f.write(data))

    # ---------------------------------------------------------- checkpoints
    def save_checkpoint(self, state: Mapping[str, object], name: str = LAST) -> Path:
        """``torch.save`` ``state`` to ``<run>/<name>`` atomically; returns the path.

        ``state`` must hold only tensors and plain Python values (see the module docstring).
        """
        path = self.path / name
        # Serialised in memory first: torch.save into a file on a full disk fails with an obscure
        # "unexpected pos" RuntimeError; a plain write fails with ENOSPC, reported as such.
        buf = io.BytesIO()
        torch.save(state, buf)
        _atomic_write(path, lambda f: f.write(buf.getbuffer()))
        return path

    def load_checkpoint(self, name: str = LAST, map_location: str | torch.device = "cpu") -> dict[str, object]:
        """Load ``<run>/<name>`` with ``weights_only=True`` (no arbitrary code runs on load); its fields unchecked
        (:meth:`load_best` and :meth:`load_last` check them).

        Raises:
            RunNotFoundError: the file is missing, truncated, or holds anything but tensors and plain values.
        """
        path = self.path / name
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
        except FileNotFoundError:
            raise RunNotFoundError(f"{path} is missing; not a complete run folder") from None
        except Exception as exc:  # truncated zip, foreign pickle, planted objects
            reason = first_line(exc)
            if "weights_only" in reason.lower() or "weights only" in reason.lower():
                # torch's own message suggests weights_only=False: never pass that advice on.
                reason = "it holds objects other than tensors and plain values, and is not loaded"
            raise RunNotFoundError(f"checkpoint {path} is damaged or not an xmask checkpoint ({reason}); "
                                   f"train again with --overwrite") from None
        if not isinstance(state, dict):
            raise RunNotFoundError(f"checkpoint {path} is not an xmask checkpoint (not a mapping)")
        return state

    def load_best(self) -> BestCheckpoint:
        """``best.pt``, each field checked to be of the type a run writes there.

        Raises:
            RunNotFoundError: the file is missing or damaged (exit 6, naming it).
        """
        return check_best(self.load_checkpoint(self.BEST), self.path / self.BEST)

    def load_last(self) -> LastCheckpoint:
        """``last.pt``, each field checked to be of the type a run writes there.

        Raises:
            RunNotFoundError: the file is missing or damaged (exit 6, naming it).
        """
        return check_last(self.load_checkpoint(self.LAST), self.path / self.LAST)

    def has_checkpoint(self, name: str = LAST) -> bool:
        return (self.path / name).is_file()

    # -------------------------------------------------------------- summary
    def write_summary(self, summary: Mapping[str, object]) -> None:
        """Write ``summary.json`` atomically."""
        _atomic_write(self.path / self.SUMMARY, lambda f: f.write(_json_bytes(summary)))

    def read_summary(self) -> RunSummary:
        """``summary.json``, each field checked to be of the type xmask writes there (:class:`RunSummary`).

        Raises:
            RunNotFoundError: the file is missing or damaged (exit 6, naming it).
        """
        path = self.path / self.SUMMARY
        try:
            return RunSummary.from_json(read_json(path, fields=SUMMARY_FIELDS, optional=SUMMARY_OPTIONAL))
        except FileNotFoundError:
            raise RunNotFoundError(f"{path} is missing; the run has not finished") from None


def aggregate(run_dirs: Iterable[RunDir | str | os.PathLike[str]]) -> dict[str, MetricAggregate]:
    """Mean and standard deviation over seeds of every final metric.

    Reads ``summary["metrics"]`` (e.g. ``{"train": .., "val": .., "test": ..}``)
    of each run. ``std`` is the population standard deviation (``ddof=0``), 0
    for a single run.

    Returns:
        ``{metric: {"mean": float, "std": float, "values": [float, ...]}}``, values in run order.
    """
    values: dict[str, list[float]] = {}
    for run in run_dirs:
        run = run if isinstance(run, RunDir) else RunDir(run)
        for key, value in run.read_summary().metrics.items():
            values.setdefault(key, []).append(float(value))
    out: dict[str, MetricAggregate] = {}
    for key, vals in values.items():
        arr = np.asarray(vals, dtype=np.float64)
        out[key] = {"mean": float(arr.mean()), "std": float(arr.std()), "values": vals}
    return out
