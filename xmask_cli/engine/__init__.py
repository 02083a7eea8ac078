"""Training engine: batches from the cache, the per-level tasks, the training loop, runs.

``stream`` (padded graph-level batches), ``node`` (full graph, subgraphs,
partitions), ``pairs`` (link prediction, edge regression), ``image`` (patch
grids), ``paths`` (which attention path a whole graph takes), ``loop`` (fit,
early stopping on validation, resume), ``experiment`` (config -> task ->
runs), ``runs`` and ``metrics``. The package exports the graph-level stream;
import the rest from their modules.
"""
from xmask_cli.engine.stream import EpochBatches, GraphBatch, GraphLevelStream, collate, size_buckets

__all__ = ["EpochBatches", "GraphBatch", "GraphLevelStream", "collate", "size_buckets"]
