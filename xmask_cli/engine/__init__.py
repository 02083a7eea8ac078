"""Training engine: batch streaming (graph level so far)."""
from xmask_cli.engine.stream import EpochBatches, GraphBatch, GraphLevelStream, collate, size_buckets

__all__ = ["EpochBatches", "GraphBatch", "GraphLevelStream", "collate", "size_buckets"]
