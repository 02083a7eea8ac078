"""Training engine, by job: batches from the cache, the per-level tasks, the training loop, runs, scores.

``batching`` (the graph-level stream and store, node batchers and query attention, features, structural
extras, the pair tasks' structure), ``tasks`` (the level registry and one module per level: graph, node,
node_experts, link, edge, image), ``training`` (fit, train_task, the strategy, precision, selection,
checkpoints and resume), ``runs`` (the plan, loaders, experiment, sweep, run folders, eval, compare, the dry
run) and ``scoring`` (splits, folds, metrics, MRR). The package exports the graph-level stream; import the
rest from their modules.
"""
from xmask_cli.engine.batching.stream import EpochBatches, GraphBatch, GraphLevelStream, collate, size_buckets

__all__ = ["EpochBatches", "GraphBatch", "GraphLevelStream", "collate", "size_buckets"]
