"""The checks that need the loaded dataset: run after it is read, before its structure is prepared.

:meth:`~xmask_cli.engine.experiment.Experiment.load` calls them, so a split with an empty part, more
folds than the labels allow or an edge file too short for its fractions fails before any cache file or
run folder is made.
"""
from __future__ import annotations

from typing import Any

from xmask_cli.config import Config
from xmask_cli.engine import splits
from xmask_cli.engine.folds import check_fold_count
from xmask_cli.engine.splits import PARTS
from xmask_cli.engine.tasks.edge import edge_regression_split
from xmask_cli.engine.tasks.graph import graph_labels
from xmask_cli.errors import UsageError

__all__ = ["check_data", "check_splittable"]

def check_data(cfg: Config, level: str, graphs: Any) -> None:
    """The checks that need the loaded dataset, run before its structure is prepared or a run folder made.

    Raises:
        ConfigError: ``data.folds`` more than the graphs, or than the smallest class holds.
        UsageError: the dataset's split leaves train, val or test empty (a one- or two-node graph), or a
            link split has fewer non-edges than its negatives need.
    """
    if cfg.data.folds and level == "graph":
        check_fold_count(graph_labels(graphs), cfg.data.folds)
    else:
        _check_split(cfg, level, graphs)


def _check_split(cfg: Config, level: str, graphs: Any) -> None:
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
