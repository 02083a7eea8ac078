"""A registered dataset or an image grid -> its structure cache (through :func:`~xmask_cli.prepare.graphs.prepare_graphs`)."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

from xmask_cli.config import Config, StructureSection
from xmask_cli.data.folder import source_folder
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.data.images import image_info
from xmask_cli.data.load import load_graphs, resolve_data_root
from xmask_cli.data.registry import get_dataset
from xmask_cli.data.spec import DatasetSpec
from xmask_cli.errors import UsageError
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.prepare.edge_section import edge_inputs
from xmask_cli.prepare.graphs import PrepareSummary, prepare_graphs
from xmask_cli.prepare.needs import edge_readers, structure_needed
from xmask_cli.prepare.ranks import RankWorld, rank0_first
from xmask_cli.structure.grid import grid_edges, patch_grid


def resolve_cache_dir(cli_value: str | os.PathLike[str] | None) -> Path:
    """``--cache-dir`` > ``XMASK_CACHE`` > ``./cache``."""
    return Path(cli_value or os.environ.get("XMASK_CACHE") or "cache").expanduser()


def prepare_dataset(
    cfg: Config,
    *,
    data_root: str | os.PathLike[str] | None = None,
    cache_dir: Path,
    workers: int = 1,
    force: bool = False,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
    progress: Callable[[int, int], None] | None = None,
    world: RankWorld | None = None,
    spec: DatasetSpec | None = None,
) -> PrepareSummary:
    """Load ``cfg.data.dataset`` through its PyG/OGB loader and cache its structure.

    ``world``: the ranks of a ``torchrun`` prepare, every one calling (see :mod:`~xmask_cli.prepare.ranks`).
    ``spec``: ``data.dataset``'s registry entry when the caller has it (else looked up here).
    """
    spec = spec or get_dataset(cfg.data.dataset)
    structure = structure_needed(cfg, cfg.task.level if cfg.task.level != "auto" else spec.level)
    if not Path(cache_dir).is_dir():  # an existing cache dir is not written to unless something is missing
        ensure_writable_dir(cache_dir)
    if spec.family == "images":  # one grid graph for every image: its geometry alone decides it

        w = world or RankWorld()
        grid = None
        if w.rank == 0:  # one small graph: rank 0 alone computes and writes it
            _, height, width = image_info(spec).shape
            grid = prepare_grid(dataset_key=spec.key, image_size=(height, width), patch=cfg.image.patch,
                                connectivity=cfg.image.connectivity, cfg=structure, cache_dir=cache_dir,
                                force=force, log=log)
        return cast(PrepareSummary, w.broadcast(grid))
    t0 = time.perf_counter()
    with rank0_first(world or RankWorld()):  # with several ranks rank 0 stages the dataset, then the others read it
        graphs = load_graphs(spec, data_root=resolve_data_root(data_root, cfg.data.root), cache_dir=cache_dir,
                             offline=offline)
    log(f"loaded {spec.name}: {graphs.num_graphs} graph(s), {int(graphs.num_nodes.sum())} nodes from {graphs.source} "
        f"({time.perf_counter() - t0:.1f}s)")
    for note in graphs.notes:
        log(note)
    features = graphs.feature_info()
    log(f"node features: {features.detail}, width {features.dim}")
    summary = prepare_graphs(
        dataset_key=spec.key, level=spec.level, edges=graphs.edge_index, num_nodes=graphs.num_nodes,
        fingerprint=graphs.fingerprint(), cfg=structure, cache_dir=cache_dir, workers=workers,
        memory_gb=cfg.prepare.memory_gb, world=world, source_folder=source_folder(spec),
        merged_edge_rows=graphs.merged_edge_rows, force=force, full_check=True, progress=progress, log=log,
        edge_attr=edge_inputs(graphs, structure, **edge_readers(cfg)),
    )
    summary.features = features.to_dict()
    return summary


def grid_fingerprint(image_size: tuple[int, int], patch: int, connectivity: int) -> tuple[str, list[Any], np.ndarray]:
    """``(fingerprint, [edge_index], num_nodes)`` of the patch grid of ``image_size`` images.

    The fingerprint hashes the geometry (image size, patch, connectivity) with
    the grid's edges, so the cache key is one per (image size, patch size,
    connectivity, structure parameters such as K).

    Raises:
        ValueError: the patch does not divide the image (see :func:`~xmask_cli.structure.grid.patch_grid`).
    """
    import hashlib

    rows, cols = patch_grid(int(image_size[0]), int(image_size[1]), int(patch))
    edges = [grid_edges(rows, cols, int(connectivity))]
    nodes = np.asarray([rows * cols], dtype=np.int64)
    geometry = json.dumps({"image": [int(s) for s in image_size], "patch": int(patch),
                           "grid": [rows, cols], "connectivity": int(connectivity)}, sort_keys=True)
    return hashlib.sha256((geometry + graphs_fingerprint(edges, nodes)).encode()).hexdigest(), edges, nodes


def check_patch(dataset_key: str, image_size: tuple[int, int], patch: int) -> tuple[int, int]:
    """``(rows, cols)`` of the patch grid, or a :class:`UsageError` (exit 2) naming the patch sizes that fit."""
    try:
        return patch_grid(int(image_size[0]), int(image_size[1]), int(patch))
    except ValueError as exc:
        raise UsageError(f"{dataset_key}: image.patch={patch}: {exc}; set --set image.patch=<one of them>") from None


def prepare_grid(
    *,
    dataset_key: str,
    image_size: tuple[int, int],
    patch: int,
    connectivity: int,
    cfg: StructureSection,
    cache_dir: Path,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> PrepareSummary:
    """Cache the structure of the patch grid that every image of a dataset shares (one graph, one file).

    Stored like any one-graph dataset under ``cache/<dataset>/<key>.h5``; the
    image level's stream reads its powers once and hands the same tensor to
    every batch.

    Raises:
        UsageError: the patch does not divide the image (exit 2).
    """
    check_patch(dataset_key, image_size, patch)
    fingerprint, edges, nodes = grid_fingerprint(image_size, patch, connectivity)
    return prepare_graphs(dataset_key=dataset_key, level="image", edges=edges, num_nodes=nodes,
                          fingerprint=fingerprint, cfg=cfg, cache_dir=cache_dir, force=force, log=log)
