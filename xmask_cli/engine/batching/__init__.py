"""Batches from the cache: the graph-level stream and store, the node batchers and query attention, the
features and structural extras a batch carries, the pair structure of link and edge tasks."""
