"""Attention of an image-level run over the patch grid (``xmask explain RUN --image I``).

For test image ``I`` (0-based, in the test split's fixed order) and every
layer and head of the run's best checkpoint, the attention of the very
forward the model runs (:meth:`XMaskNet.encode_dense` with ``return_terms``)
is folded back onto the ``rows x cols`` patch grid:

- default (no ``query_patch``): the attention each patch *receives*, averaged
  over every query token (all patches and the class token), so a map sums to
  1 minus the mass that went to the class token (shown in the panel title);
- ``query_patch=P`` (row-major patch index): the attention row of patch ``P``.

Hop summary: per layer and head, the attention mass by grid distance between
query patch and key patch (4-neighbour: ``|dr| + |dc|``; 8-neighbour:
``max(|dr|, |dc|)``, the hop distance of that grid graph), averaged over the
patch queries, with the class token as its own bucket ``cls``.

Files: ``maps.h5`` (``/image_<I>/layer_<l>/head_<h>/attention`` ``[T, T]``
over tokens, class token first; ``.../grid`` the plotted ``[rows, cols]`` map)
and ``image_<I>.png``: the image beside each head's map, rows = layers.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.errors import UsageError
from xmask_cli.explain.figures import plot_image, save_png
from xmask_cli.explain.hops import layer_masses
from xmask_cli.explain.record import record_terms
from xmask_cli.explain.store import ImageMaps, write_image_maps
from xmask_cli.model.model_config import effective_powers, head_labels

__all__ = ["grid_distances", "explain_images"]


def grid_distances(rows: int, cols: int, connectivity: int) -> np.ndarray:
    """``[N, N]`` hop distances between the patches of the ``rows x cols`` grid graph."""
    r, c = np.divmod(np.arange(rows * cols), cols)
    dr, dc = np.abs(r[:, None] - r[None, :]), np.abs(c[:, None] - c[None, :])
    return dr + dc if connectivity == 4 else np.maximum(dr, dc)


def _record(model: Any, task: Any, image: int) -> list[np.ndarray]:
    """Per layer ``[H, T, T]`` attention of the model on dataset image ``image``."""
    inputs = task.inputs(task.batch(np.array([image])))
    _, layers = record_terms(model, inputs)
    return [t["attention"][0].float().cpu().numpy() for t in layers]


def _maps(att: np.ndarray, offset: int, rows: int, cols: int, query: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``([H, rows, cols] patch map, [H] class-token mass)`` of one layer's ``[H, T, T]`` attention."""
    row = att.mean(axis=1) if query is None else att[:, offset + query]
    cls = row[:, 0] if offset else np.zeros(row.shape[0])
    return row[:, offset:].reshape(-1, rows, cols), cls


def _hop_mass(att: np.ndarray, offset: int, dist: np.ndarray) -> np.ndarray:
    """``[H, 1 + D + 1]`` mass of the patch queries' rows: class token, then distance 0..D."""
    n = dist.shape[0]
    out = np.zeros((att.shape[0], int(dist.max()) + 2))
    rows = att[:, offset:]  # patch queries only
    if offset:
        out[:, 0] = rows[:, :, 0].sum(axis=1)
    keys = rows[:, :, offset:]  # [H, N, N]
    for h in range(att.shape[0]):
        out[h, 1:] = np.bincount(dist.reshape(-1), weights=keys[h].reshape(-1), minlength=out.shape[1] - 1)
    return out / n


def explain_images(model: Any, task: Any, images: Sequence[int], *, query_patch: int | None, out_dir: Path,
                   connectivity: int, meta: dict[str, Any],
                   log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Record, save and plot every head's attention over the patch grid for test images ``images``.

    Returns the same JSON-able shape as :func:`xmask_cli.explain.run.explain_run`
    (``targets``, ``files``, ``hop_buckets``, ``hop_summary``), plus ``query``.

    Raises:
        UsageError: an image index outside the test split, or a patch index outside the grid.
    """
    cfg = model.cfg
    enc = model.encoder
    rows, cols, offset = enc.rows, enc.cols, enc.offset
    test = task.split.test
    for i in images:
        if not 0 <= i < len(test):
            raise UsageError(f"--image {i}: out of range, the test split has images 0..{len(test) - 1}")
    if query_patch is not None and not 0 <= query_patch < rows * cols:
        raise UsageError(f"--query-patch {query_patch}: out of range, the {rows}x{cols} grid has patches "
                         f"0..{rows * cols - 1} (row-major)")
    labels = head_labels(cfg)
    ks = effective_powers(cfg)
    dist = grid_distances(rows, cols, connectivity)
    buckets = ["cls", *[str(d) for d in range(int(dist.max()) + 1)]]
    query = "mean over all query tokens" if query_patch is None else f"query patch {query_patch}"
    targets, recorded, plots, total = [], [], [], None
    for i in images:
        image_id = int(test[i])
        att = _record(model, task, image_id)
        maps, cls = zip(*(_maps(a, offset, rows, cols, query_patch) for a in att))
        hop = [_hop_mass(a, offset, dist) for a in att]
        total = hop if total is None else [t + m for t, m in zip(total, hop)]
        name = f"image_{i}"
        label = int(task.y[image_id])
        desc = f"test image {i} (dataset image {image_id}, label {label}): {query}"
        recorded.append(ImageMaps(name=name, attrs={"target": desc, "image_id": image_id, "label": label,
                                                    "query": query}, attention=att, grids=list(maps)))
        plots.append((name, image_id, list(maps), list(cls), desc))
        targets.append({"name": name, "kind": "image", "image": i, "image_id": image_id, "label": label,
                        "target": desc, "hop_summary": layer_masses(hop, ks, labels, buckets)})
        log(f"recorded {desc}")
    if total is None:
        raise UsageError("name at least one test image to explain (--image I)")
    summary = layer_masses(total, ks, labels, buckets)
    maps_path = write_image_maps(out_dir / "maps.h5", recorded, cfg,
                                 {**meta, "query": query, "hop_summary": summary})
    figures = {}
    for name, image_id, maps, cls, desc in plots:
        fig = plot_image(task.x[image_id].numpy(), maps, cls, labels, desc, query_patch, cols, cfg.patch_size)
        figures[name] = str(save_png(fig, out_dir / f"{name}.png"))
    return {**meta, "query": query, "targets": targets,
            "files": {"maps": str(maps_path), "figures": figures},
            "hop_buckets": buckets, "hop_summary": summary}
