"""Training engine: batches from the cache, the per-level tasks, the training loop, runs.

``tasks`` (the level registry and one module per level: graph, node,
node_experts, link, edge, image), ``features`` (node features of every
level), ``stream`` (padded graph-level batches), ``node_batches`` and
``query`` (node-level batches and query attention), ``pair_structure`` and
``mrr`` (what the pair tasks see and how links are ranked), ``loop`` (fit,
train_task, early stopping on validation, resume), ``train_config``
(TrainConfig, the loop's view of ``train``), ``experiment`` (config ->
task -> runs), ``runs``, ``splits`` and ``metrics``. The package exports the
graph-level stream; import the rest from their modules.
"""
from xmask_cli.engine.stream import EpochBatches, GraphBatch, GraphLevelStream, collate, size_buckets

__all__ = ["EpochBatches", "GraphBatch", "GraphLevelStream", "collate", "size_buckets"]
