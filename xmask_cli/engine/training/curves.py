"""``curves.png``: a run's training curves, drawn from its ``metrics.jsonl``.

One panel for the loss (``loss`` is the training pass's mean loss; ``val_loss``
beside it when the rows carry one) and one panel per metric (``train_<m>`` and
``val_<m>`` when present), against the epoch. The selected epoch (the rows'
``best_epoch``, or the summary's) is marked with a dashed line in every panel.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xmask_cli.engine.runs.folder import TIMING_KEYS, MetricsRow, write_bytes

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["CURVES", "curve_series", "plot_curves", "write_curves"]

#: File name of the figure in a run folder.
CURVES = "curves.png"

_PART = re.compile(r"^(train|val)_(.+)$")


def curve_series(rows: Sequence[MetricsRow]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """``{panel: {series: (epochs, values)}}`` of metrics rows; panels ``loss`` then each metric name.

    ``loss`` holds ``train`` (the row's ``loss``) and ``val`` (``val_loss``) where present; a metric ``m`` holds
    ``train`` / ``val`` from ``train_m`` / ``val_m``. Non-finite values are dropped (a skipped point, not a zero).
    """
    panels: dict[str, dict[str, tuple[list[int], list[float]]]] = {"loss": {}}
    for row in rows:
        epoch = int(row["epoch"])
        for key, value in row.items():
            if key == "loss":
                panel, series = "loss", "train"
            else:
                m = _PART.match(key)
                if m is None or key in TIMING_KEYS:
                    continue
                series, panel = m.group(1), m.group(2)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            xs, ys = panels.setdefault(panel, {}).setdefault(series, ([], []))
            xs.append(epoch)
            ys.append(float(value))
    return {k: v for k, v in panels.items() if v}


def plot_curves(rows: Sequence[MetricsRow], best_epoch: int | None, title: str) -> Figure:
    """A matplotlib ``Figure`` of :func:`curve_series` (one panel each), ``best_epoch`` marked; the caller saves it."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels = curve_series(rows)
    fig = Figure(figsize=(4.2 * max(len(panels), 1), 3.4), layout="constrained")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    colours = {"train": "tab:blue", "val": "tab:orange"}
    for ax, (name, series) in zip(axes, panels.items()):
        for part in ("train", "val"):
            if part in series:
                xs, ys = series[part]
                ax.plot(xs, ys, marker="." if len(xs) < 40 else None, color=colours[part], label=part)
        if best_epoch is not None and best_epoch >= 0:
            ax.axvline(best_epoch, color="tab:green", linestyle="--", linewidth=1, label=f"selected (epoch {best_epoch})")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not panels:
        axes[0].text(0.5, 0.5, "no epoch logged", ha="center", va="center", transform=axes[0].transAxes)
    fig.suptitle(title, fontsize=9)
    return fig


def write_curves(path: Path, rows: Sequence[MetricsRow], best_epoch: int | None, title: str) -> Path:
    """Draw :func:`plot_curves` and write it as PNG at ``path`` atomically (temp name, then rename)."""
    import io

    fig = plot_curves(rows, best_epoch, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    write_bytes(Path(path), buf.getvalue())
    return Path(path)
