"""``xmask runs compare``: finished runs side by side, and one plot of their validation curves.

A path is a run folder (``runs/<name>/<seed>/`` holding ``summary.json``) or a
folder of them (``runs/<name>/``: every seed folder with a summary, in seed
order). Each run gives one row: its name (the parent folder), seed, dataset,
metric, selected epoch, epochs run, the summary's train / val / test metrics
and its wall time: the epochs' ``epoch_s`` (training pass and validation)
summed over ``metrics.jsonl`` (a row without ``epoch_s`` counts its training
pass, ``train_s``). Runs made with different versions of xmask, Python or the packages a run records
(``config.json``'s ``environment``) are flagged: their numbers may differ for that reason alone.

A number read back that is not finite (``NaN``, ``1e999`` in ``summary.json``, an epoch's time in
``metrics.jsonl``) is refused as damaged (exit 6, naming the file and the field): a row never shows or
sums such a value as if it were a result.
"""
from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xmask_cli.engine.runs.folder import MetricsRow, RunDir, write_bytes
from xmask_cli.errors import RunNotFoundError
from xmask_cli.fs import ensure_writable_dir, refuse_links
from xmask_cli.results import CompareResult, RunRow
from xmask_cli.versions import version_differences

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["compare_runs", "find_runs", "plot_compare", "run_row"]


def _numeric_order(c: Path) -> tuple[bool, int, str]:
    """Seed folders ``0, 1, 10`` and fold folders ``fold-2, fold-10`` in numeric order."""
    tail = c.name.rsplit("-", 1)[-1]
    return (not tail.isdigit(), int(tail) if tail.isdigit() else 0, c.name)


def _finished_below(folder: Path) -> list[Path]:
    """The finished runs among ``folder``'s sub-folders; a sub-folder that is no run (a seed folder of a
    ``--folds`` run) contributes its ``fold-<i>`` runs."""
    if not folder.is_dir():
        return []
    found: list[Path] = []
    for c in sorted((c for c in folder.iterdir() if c.is_dir() and not c.is_symlink()), key=_numeric_order):
        if (c / RunDir.SUMMARY).is_file():
            found.append(c)
        elif not c.name.startswith("fold-"):
            found.extend(f for f in _finished_below(c) if f.name.startswith("fold-"))
    return found


def find_runs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The finished run folders under ``paths`` (each a run, a folder of seed runs, or a seed folder of fold
    runs), in the order given.

    Raises:
        RunNotFoundError: a path that is neither a finished run nor holds one.
    """
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / RunDir.SUMMARY).is_file():
            found.append(p)
            continue
        kids = _finished_below(p)
        if not kids:
            raise RunNotFoundError(f"{p}: no finished run here (a run folder holds summary.json; "
                                   f"a folder of runs holds seed folders that do, or their fold-<i> folders)")
        found.extend(kids)
    return found


def _damaged(path: Path, what: str, value: float) -> RunNotFoundError:
    return RunNotFoundError(f"{path} is damaged ({what} is {value!r}, not a finite number); restore it, "
                            f"or train again with --overwrite")


def _epoch_wall(row: MetricsRow, path: Path, line: int) -> float:
    """An epoch's wall time: ``epoch_s`` (training pass and validation), else its training pass ``train_s``."""
    seconds = row.get("epoch_s", row.get("train_s", 0.0))
    if seconds is not None and not math.isfinite(seconds):
        raise _damaged(path, f"row {line}'s epoch time", float(seconds))
    return 0.0 if seconds is None else float(seconds)


def run_row(path: Path) -> RunRow:
    """One run's row: its summary's numbers, its wall time and its validation curve (:class:`RunRow`)."""
    run = RunDir(path, create=False)  # an existing folder (find_runs)
    summary = run.read_summary()  # both checked by xmask_cli.jsonfile: a damaged file is exit 6, named
    rows = run.read_metrics()
    metric = summary.metric or ""
    key = f"val_{metric}"
    curve: list[tuple[int, float | None]] = []
    for n, r in enumerate(rows, 1):
        if key not in r:
            continue
        value = r.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
            raise RunNotFoundError(f"{run.path / RunDir.METRICS} row {n} is damaged ('{key}' is not a number); "
                                   f"restore it, or train again with --overwrite")
        curve.append((r["epoch"], value))
    wall = sum(_epoch_wall(r, run.path / RunDir.METRICS, n) for n, r in enumerate(rows, 1))
    metrics = summary.metrics
    for part, value in metrics.items():  # json reads NaN, Infinity and 1e999 as floats: never a result
        if not math.isfinite(value):
            raise _damaged(run.path / RunDir.SUMMARY, f"metrics.{part}", float(value))
    name = path.parent.name if summary.fold is None else path.parent.parent.name  # <name>/<seed>[/fold-<i>]
    return RunRow(run_dir=str(path), name=name, seed=summary.seed, fold=summary.fold, dataset=summary.dataset,
                  metric=metric, best_epoch=summary.best_epoch, epochs_run=summary.epochs_run,
                  train=metrics.get("train"), val=metrics.get("val"), test=metrics.get("test"), wall_s=round(wall, 3),
                  curve=tuple(curve))


def plot_compare(rows: Sequence[RunRow]) -> Figure:
    """A matplotlib ``Figure``: every run's validation curve, one panel per metric, selected epochs dotted."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    metrics = list(dict.fromkeys(r.metric for r in rows))
    fig = Figure(figsize=(6.0 * len(metrics), 4.2), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        for r in (r for r in rows if r.metric == metric):
            xs = [e for e, _ in r.curve]
            ys = [v for _, v in r.curve]
            (line,) = ax.plot(xs, ys, label=f"{r.name}/{r.seed}")
            if r.best_epoch in xs:
                ax.plot([r.best_epoch], [ys[xs.index(r.best_epoch)]], marker="o", color=line.get_color())
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"val {metric}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"validation {metric} (dot: selected epoch)", fontsize=9)
    return fig


def compare_runs(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None) -> CompareResult:
    """Rows of every finished run under ``paths`` and, when ``out`` is given, the plot written there (PNG).

    Returns:
        a :class:`~xmask_cli.results.CompareResult`: the rows (its ``to_json()`` leaves out the curves) and
        the plot's path or None.
    """
    found = find_runs(paths)
    rows = [run_row(p) for p in found]
    plot = None
    if out is not None:
        target = Path(out)
        ensure_writable_dir(target.parent if str(target.parent) else Path("."), "output folder", "pass another --out")
        refuse_links(target.parent, (target.name,), "output folder")  # a folder at the plot's name: exit 2
        buf = io.BytesIO()
        plot_compare(rows).savefig(buf, format="png", dpi=90)
        write_bytes(target, buf.getvalue())
        plot = str(target)
    return CompareResult(runs=tuple(rows), plot=plot, version_differences=_version_differences(found))


def _version_differences(found: Sequence[Path]) -> dict[str, dict[str, list[str]]]:
    """The packages whose versions differ between the runs' ``config.json`` records (runs without one:
    none to compare); a run whose config cannot be read is left to the commands that need it."""
    records: list[tuple[str, object]] = []
    for path in found:
        try:
            records.append((str(path), RunDir(path, create=False).load_config().get("environment")))
        except RunNotFoundError:
            continue
    return version_differences(records)
