"""The PNG figures of ``xmask explain``: a Fig. 3-style grid per graph/node/edge target, one per image."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.explain.record import KINDS
from xmask_cli.model.model_config import head_labels

__all__ = ["KIND_TITLES", "id_ticks", "plot_image", "plot_target", "save_png"]

KIND_TITLES = {"energy": "energy q·k/√d", "structural": "structural term", "logits": "sum (logits)",
               "attention": "attention"}


def plot_target(t: Any, model_cfg: Any) -> tuple[Any, np.ndarray]:
    """Fig. 3-style grid of one target: rows = layers × kinds, columns = heads, one colour bar each.

    ``t`` is a :class:`~xmask_cli.explain.targets.TargetMaps`. Returns ``(figure, axes [layers * len(KINDS),
    heads])``; the caller saves and closes the figure.
    """
    from matplotlib.figure import Figure

    layers, heads = len(t.maps), t.maps[0]["attention"].shape[0]
    labels = head_labels(model_cfg)
    rows = layers * len(KINDS)
    fig = Figure(figsize=(2.8 * heads + 0.8, 2.3 * rows + 0.8), layout="constrained")
    axes = np.asarray(fig.subplots(rows, heads, squeeze=False))
    for l, maps in enumerate(t.maps):
        for i, kind in enumerate(KINDS):
            for h in range(heads):
                ax = axes[l * len(KINDS) + i, h]
                a = np.ma.masked_invalid(maps[kind][h])
                finite = a.compressed()
                lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
                if hi <= lo:
                    hi = lo + 1e-12
                im = ax.imshow(a, cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
                ax.set_title(f"L{l} {KIND_TITLES[kind]} · head {h} · {labels[l][h]}", fontsize=7)
                id_ticks(ax, t.node_ids)
    fig.suptitle(f"{t.describe()} (rows: query, cols: key; node ids "
                 f"{'closest first' if t.kind != 'graph' else 'in order'})", fontsize=9)
    return fig, axes


def id_ticks(ax: Any, node_ids: np.ndarray, most: int = 24) -> None:
    """Node ids on both axes of a map panel: every one up to ``most`` nodes, else every k-th (k = ceil(m/most))."""
    m = len(node_ids)
    step = max(1, -(-m // most))
    at = np.arange(0, m, step)
    names = [str(int(node_ids[i])) for i in at]
    ax.set_xticks(at, names, fontsize=5, rotation=90)
    ax.set_yticks(at, names, fontsize=5)
    ax.tick_params(length=1.5, pad=1)


def plot_image(image: np.ndarray, maps: list[np.ndarray], cls: list[np.ndarray], labels: list[list[str]],
               title: str, query: int | None, cols: int, patch: int) -> Any:
    """One image beside each head's ``[rows, cols]`` patch map, rows = layers (a red box marks ``query``).

    ``image`` is ``[C, H, W]``; ``cls[l][h]`` the class-token mass shown in the panel title when any is non-zero.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    layers, heads = len(maps), maps[0].shape[0]
    fig = Figure(figsize=(2.2 * (heads + 1) + 0.6, 2.2 * layers + 0.8), layout="constrained")
    axes = np.asarray(fig.subplots(layers, heads + 1, squeeze=False))
    shown = image.transpose(1, 2, 0)
    for l in range(layers):
        ax = axes[l, 0]
        ax.imshow(shown[:, :, 0] if shown.shape[2] == 1 else shown, cmap="gray", interpolation="nearest")
        if query is not None:
            r, c = divmod(query, cols)
            ax.add_patch(Rectangle((c * patch - 0.5, r * patch - 0.5), patch, patch, fill=False, edgecolor="red",
                                   linewidth=1.5))
        ax.set_title(f"L{l} input", fontsize=7)
        for h in range(heads):
            ax = axes[l, h + 1]
            im = ax.imshow(maps[l][h], cmap="viridis", interpolation="nearest")
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
            extra = f" · cls {cls[l][h]:.2f}" if cls[l].any() else ""
            ax.set_title(f"L{l} head {h} · {labels[l][h]}{extra}", fontsize=7)
        for ax in axes[l]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    return fig


def save_png(fig: Any, path: Path, dpi: int = 80) -> Path:
    """Write a figure as PNG under a temporary name, then rename: no half-written figure."""
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
