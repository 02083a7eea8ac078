"""``maps.h5``: the HDF5 file ``xmask explain`` writes, atomically (a temporary name, then ``os.replace``)."""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.explain.record import KINDS
from xmask_cli.model.model_config import effective_powers, head_labels

__all__ = ["ImageMaps", "write_image_maps", "write_maps"]


@contextlib.contextmanager
def _atomic_h5(path: Path) -> Iterator[Any]:
    """An h5py file open for writing under ``.<name>.tmp<pid>``, renamed to ``path`` on success only."""
    import h5py

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            yield f
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_maps(path: Path, targets: Sequence[Any], model_cfg: Any, meta: dict[str, Any]) -> Path:
    """Write ``maps.h5`` of graph, node and edge targets (:class:`~xmask_cli.explain.targets.TargetMaps`).

    Layout: ``/<target>/node_ids`` (int64 global ids of rows and columns) and
    ``/<target>/layer_<l>/head_<h>/<kind>`` (float32 ``[m, m]``, kind in
    :data:`KINDS`); ``/<target>/graph/edges`` (``[2, E]`` positions in ``node_ids``
    of the structure's edges among them, the ``Â^1`` support) and
    ``/<target>/graph/hops`` (``[m]`` hop distance from the graph view's query
    node, attribute ``query``; ``-1`` beyond the cut-off, ``-2`` unreachable). Target groups carry ``target``, ``kind``, ``cropped``,
    ``cropped_from``, ``num_nodes`` and ``query_nodes``; every map carries
    ``k`` (the head's power of Â, 0 without the log mask), ``bias`` (the head's
    bias types, e.g. ``Â^2 + SPD``, or ``none``),
    ``mask_scale``, ``target``, ``cropped_from``, ``layer``, ``head``, ``kind``.
    Root attributes: ``meta`` (JSON: run, level, seed, head powers, bias, and the
    hop summary) and ``kinds``.
    """
    labels = head_labels(model_cfg)
    with _atomic_h5(path) as f:
        f.attrs["meta"] = json.dumps(meta, sort_keys=True)
        f.attrs["kinds"] = json.dumps(list(KINDS))
        for t in targets:
            g = f.create_group(t.name)
            g.create_dataset("node_ids", data=np.asarray(t.node_ids, dtype=np.int64))
            g.create_dataset("graph/edges", data=np.asarray(t.edges, dtype=np.int64).reshape(2, -1))
            g.create_dataset("graph/hops", data=np.asarray(t.hops, dtype=np.int16))
            g["graph"].attrs["query"] = int(t.query)
            g.attrs.update({"target": t.describe(), "kind": t.kind, "cropped": t.cropped,
                            "cropped_from": t.cropped_from, "num_nodes": len(t.node_ids),
                            "query_nodes": np.asarray(t.queries, dtype=np.int64)})
            for l, maps in enumerate(t.maps):
                for h in range(maps["attention"].shape[0]):
                    hg = g.create_group(f"layer_{l}/head_{h}")
                    for kind in KINDS:
                        ds = hg.create_dataset(kind, data=maps[kind][h].astype(np.float32), compression="gzip")
                        ds.attrs.update({"k": effective_powers(model_cfg)[h],
                                         "bias": labels[l][h],
                                         "mask_scale": model_cfg.mask_scale, "target": t.name,
                                         "cropped_from": t.cropped_from, "layer": l, "head": h, "kind": kind})
    return path


@dataclass
class ImageMaps:
    """One recorded test image of an image-level run.

    Attributes:
        name: ``image_<i>`` (the HDF5 group and PNG name).
        attrs: the group's attributes (``target``, ``image_id``, ``label``, ``query``).
        attention: per layer ``[H, T, T]`` attention over tokens (class token first).
        grids: per layer ``[H, rows, cols]`` plotted patch maps.
    """

    name: str
    attrs: dict[str, Any]
    attention: list[np.ndarray]
    grids: list[np.ndarray]


def write_image_maps(path: Path, images: Sequence[ImageMaps], model_cfg: Any, meta: dict[str, Any]) -> Path:
    """Write ``maps.h5`` of image targets.

    Layout: ``/image_<i>/layer_<l>/head_<h>/attention`` (float32 ``[T, T]`` over
    tokens, class token first) and ``.../grid`` (the plotted ``[rows, cols]``
    map); head groups carry ``k`` (0 without the log mask) and ``bias``; image
    groups ``target``, ``image_id``, ``label`` and ``query``. Root attribute
    ``meta`` (JSON, with the hop summary).
    """
    labels = head_labels(model_cfg)
    with _atomic_h5(path) as f:
        for im in images:
            g = f.create_group(im.name)
            g.attrs.update(im.attrs)
            for l, a in enumerate(im.attention):
                for h in range(a.shape[0]):
                    hg = g.create_group(f"layer_{l}/head_{h}")
                    hg.create_dataset("attention", data=a[h].astype(np.float32), compression="gzip")
                    hg.create_dataset("grid", data=im.grids[l][h].astype(np.float32))
                    hg.attrs.update({"k": effective_powers(model_cfg)[h],
                                     "bias": labels[l][h]})
        f.attrs["meta"] = json.dumps(meta, sort_keys=True)
    return path
