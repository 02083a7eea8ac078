"""An experiment's data: read through the loader its level's ``data`` kind names, checked, its cache made.

:data:`LOADERS` maps each data kind of the level registry (:attr:`TaskLevel.data
<xmask_cli.engine.tasks.TaskLevel>`: ``graphs``, ``images``, ``edge-file``) to its loader;
:func:`load_data` picks one by the level. The checks that need the loaded dataset run here, after it is
read and before its structure is prepared, so a split with an empty part, more folds than the labels allow
or an edge file too short for its fractions fails before any cache file or run folder is made.

Example::

    data = load_data(make_plan(cfg), LoadOptions(cache_dir=Path("cache")))
    data.dataset, data.cache_path
"""
from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

from xmask_cli.config import Config
from xmask_cli.data.edgefile import EdgeData, load_edge_file
from xmask_cli.data.folder import source_folder
from xmask_cli.data.graphset import GraphSet
from xmask_cli.data.images import ImageSet, image_info, load_images
from xmask_cli.data.load import load_graphs, resolve_data_root
from xmask_cli.data.spec import DatasetSpec
from xmask_cli.engine.runs.plan import EDGE_FILE_DATASET, RunPlan
from xmask_cli.engine.scoring import splits
from xmask_cli.engine.scoring.folds import check_fold_count
from xmask_cli.engine.scoring.splits import PARTS
from xmask_cli.engine.tasks import LEVELS, DataKind
from xmask_cli.engine.tasks.edge import edge_regression_split
from xmask_cli.engine.tasks.graph import graph_labels
from xmask_cli.errors import ConfigError, UsageError
from xmask_cli.prepare import check_patch, prepare_dataset, prepare_graphs
from xmask_cli.prepare.edge_section import edge_inputs, no_edge_attr
from xmask_cli.prepare.needs import edge_readers, structure_needed

__all__ = ["DatasetMemo", "LoadOptions", "LoadedData", "Loader", "LOADERS", "load_data", "check_data",
           "check_splittable"]

T = TypeVar("T")


class DatasetMemo:
    """Datasets a process has read, kept for its later runs that read the same one (``xmask tune``'s trials,
    ``xmask ablate``'s variants): each is loaded once, not once per run.

    Keyed by everything the read depends on (the dataset's entry, the data root, the cache folder, offline,
    ``data.normalize_features``, which sets the dataset's transform), so a run that reads otherwise loads its own.

    Attributes:
        loads: how many datasets were read (not found here).
    """

    def __init__(self) -> None:
        self._held: dict[Hashable, object] = {}
        self.loads = 0

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The dataset under ``key``, read by ``load`` the first time only."""
        if key not in self._held:
            self._held[key] = load()
            self.loads += 1
        return cast(T, self._held[key])



@dataclass(frozen=True)
class LoadOptions:
    """Where and how a loader reads: the options of :meth:`Experiment.load <xmask_cli.engine.runs.experiment.Experiment.load>`."""

    cache_dir: Path
    data_root: str | os.PathLike[str] | None = None
    offline: bool | None = None
    workers: int = 1
    log: Callable[[str], None] = field(default=lambda m: None)
    datasets: DatasetMemo | None = None  # datasets read by an earlier run of this process, reused

    def read(self, key: Hashable, load: Callable[[], T]) -> T:
        """``load()``, or what it returned for ``key`` in an earlier run of :attr:`datasets`."""
        return load() if self.datasets is None else self.datasets.get(key, load)


@dataclass(frozen=True)
class LoadedData:
    """What a loader hands the experiment: the dataset's name, its data and its structure cache (if one).

    Attributes:
        dataset: the dataset's name (``edges`` for an edge-attribute file).
        graphs: the graphs (``graphs`` kind) or images (``images`` kind); None for an edge file.
        cache_path: the structure cache of the whole dataset; None where the task prepares its own
            (``structure: train-edges`` levels).
        edge_data: the rows of an edge-attribute file (``edge-file`` kind).
    """

    dataset: str
    graphs: GraphSet | ImageSet | None = None
    cache_path: Path | None = None
    edge_data: EdgeData | None = None


#: A data kind's loader: (the run's plan: config, level, dataset entry; options) -> the loaded data.
Loader = Callable[[RunPlan, LoadOptions], LoadedData]


def _prepared(summary_path: str, cached: bool, seconds: float, log: Callable[[str], None]) -> Path:
    if not cached:
        log(f"structure cache was missing: prepared {summary_path} in {seconds:.1f}s")
    return Path(summary_path)


def _spec(plan: RunPlan) -> DatasetSpec:
    assert plan.spec is not None, "make_plan looks the dataset up for every level that reads one"
    return plan.spec


def load_edge_data(plan: RunPlan, opts: LoadOptions) -> LoadedData:
    """``edge.file`` (and ``edge.features``) read and checked to split; no cache here (the task makes its own)."""
    cfg = plan.cfg
    path = cfg.edge.file
    assert path, "resolve_level gives the edge level only with edge.file set"
    data = load_edge_file(path, cfg.edge.features)
    for note in data.notes:
        opts.log(note)
    check_splittable(path, data.edge_index.shape[1], cfg.edge.fractions)
    return LoadedData(EDGE_FILE_DATASET, edge_data=data)


def load_image_data(plan: RunPlan, opts: LoadOptions) -> LoadedData:
    """An image set and its patch-grid cache (prepared when missing)."""
    cfg, spec = plan.cfg, _spec(plan)
    # A patch that does not divide the image fails before any data is read or downloaded.
    check_patch(spec.key, image_info(spec).shape[1:], cfg.image.patch)
    root = resolve_data_root(opts.data_root, cfg.data.root)
    images = opts.read(("images", spec, root, opts.offline),
                       lambda: load_images(spec, data_root=root, offline=opts.offline))
    summary = prepare_dataset(cfg, data_root=opts.data_root, cache_dir=opts.cache_dir, offline=opts.offline,
                              log=opts.log, spec=spec)
    return LoadedData(spec.name, graphs=images,
                      cache_path=_prepared(summary.path, summary.cached, summary.seconds, opts.log))


def load_graph_data(plan: RunPlan, opts: LoadOptions) -> LoadedData:
    """A graph dataset, checked against its split, and its structure cache where the level keeps one."""
    cfg, level, spec = plan.cfg, plan.level, _spec(plan)
    root = resolve_data_root(opts.data_root, cfg.data.root)
    graphs = opts.read(("graphs", spec, root, opts.cache_dir, opts.offline, cfg.data.normalize_features),
                       lambda: load_graphs(spec, data_root=root, cache_dir=opts.cache_dir, offline=opts.offline))
    for note in graphs.notes:
        opts.log(note)
    if cfg.data.normalize_features:
        from torch_geometric.transforms import NormalizeFeatures

        # Applied on access: every reader of dataset[i].x (all task levels) sees rows summing to 1.
        graphs.dataset.transform = NormalizeFeatures()
    check_data(cfg, level, graphs)  # before prepare, before any run folder
    if LEVELS[level].structure != "dataset":
        # Pair tasks ("train-edges") prepare the structure of their training edges per split seed instead.
        return LoadedData(spec.name, graphs=graphs)
    structure = structure_needed(cfg, level)
    summary = prepare_graphs(dataset_key=spec.key, level=level, edges=graphs.edge_index,
                             num_nodes=graphs.num_nodes, fingerprint=graphs.fingerprint(),
                             cfg=structure, cache_dir=opts.cache_dir, workers=opts.workers,
                             log=opts.log, memory_gb=cfg.prepare.memory_gb, source_folder=source_folder(spec),
                             merged_edge_rows=graphs.merged_edge_rows,
                             edge_attr=edge_inputs(graphs, structure, **edge_readers(cfg)))
    return LoadedData(spec.name, graphs=graphs,
                      cache_path=_prepared(summary.path, summary.cached, summary.seconds, opts.log))


#: Each data kind of the level registry (``TaskLevel.data``) -> its loader.
LOADERS: dict[DataKind, Loader] = {"graphs": load_graph_data, "images": load_image_data, "edge-file": load_edge_data}


def load_data(plan: RunPlan, opts: LoadOptions) -> LoadedData:
    """The data of the plan's level, read by the loader its registry row's ``data`` kind names."""
    return LOADERS[LEVELS[plan.level].data](plan, opts)


def check_data(cfg: Config, level: str, graphs: GraphSet) -> None:
    """The checks that need the loaded dataset, run before its structure is prepared or a run folder made.

    Raises:
        ConfigError: ``data.folds`` more than the graphs, or than the smallest class holds; an ``edge`` bias on
            a dataset without edge attributes (or on a level that caches its training edges only).
        UsageError: the dataset's split leaves train, val or test empty (a one- or two-node graph), or a
            link split has fewer non-edges than its negatives need.
    """
    if cfg.data.folds and level == "graph":
        check_fold_count(graph_labels(graphs), cfg.data.folds)
    else:
        _check_split(cfg, level, graphs)
    _check_edge_attrs(cfg, level, graphs)


def _check_edge_attrs(cfg: Config, level: str, graphs: GraphSet) -> None:
    """An ``edge`` bias reads the dataset's own edge attributes, which its loader must give."""
    if not edge_readers(cfg)["required"]:
        return
    if LEVELS[level].structure != "dataset":
        raise ConfigError(f"model.biases: type 'edge' reads the dataset's edge attributes, but {level}-level "
                          f"tasks cache the structure of their training edges only; remove the edge bias")
    if graphs.edge_attr() is None:
        raise no_edge_attr(graphs.spec.name)


def _check_split(cfg: Config, level: str, graphs: GraphSet) -> None:
    """Each part of the split the tasks will draw holds an item (sizes do not depend on the seed)."""
    spec, source = graphs.spec, graphs.spec.ref
    if level == "node":
        split = splits.node_split(spec.split, graphs.dataset[0], seed=0, dataset=graphs.dataset)
        splits.check_parts(split.sizes(), split=split.name, items="nodes", source=source)
    elif level == "graph":
        split = splits.graph_split(spec.split, graphs.dataset, seed=0)
        splits.check_parts(split.sizes(), split=split.name, items="graphs", source=source)
    elif level == "link":
        data = graphs.dataset[0]
        n = int(data.num_nodes)
        pairs = len(splits.edge_pair_keys(data.edge_index.numpy(), n))
        fractions = tuple(cfg.link.fractions)
        sizes = splits.random_split_sizes(pairs, fractions)
        splits.check_parts(sizes, split=splits.split_name("edge-", fractions), items="edges", source=source)
        need, free = (sizes[1] + sizes[2]) * cfg.link.num_neg_per_pos, n * (n - 1) // 2 - pairs
        if need > free:
            raise UsageError(f"{source}: link.num_neg_per_pos={cfg.link.num_neg_per_pos} needs {need} negative "
                             f"pairs for its {sizes[1] + sizes[2]} val and test edges, but the graph has only "
                             f"{free} non-edges; lower link.num_neg_per_pos")


def check_splittable(path: str, rows: int, fractions: list[float]) -> None:
    """Every part with a positive fraction gets a row, before any structure is computed."""
    sizes = edge_regression_split(rows, 0, fractions).sizes()
    empty = [part for part, size, f in zip(PARTS, sizes, fractions) if size == 0 and (f > 0 or part == "train")]
    if empty:
        raise UsageError(f"{path}: {rows} row(s) are too few for the edge.fractions {list(fractions)} split "
                         f"(no {', '.join(empty)} rows); add rows or change edge.fractions")
