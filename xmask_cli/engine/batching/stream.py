"""Batch streaming for graph-level tasks: size buckets, padded dense batches, loaders.

A batch is a handful of graphs padded to the largest of them, with the
cached powers ``Â^1..Â^K`` scattered into a dense ``[B, K, N, N]`` tensor.
Structure is only ever read from the cache, never recomputed here.

Example::

    # features[g]: [n_g, F] node features of graph g; labels: [G] graph labels; model: an XMaskNet
    stream = GraphLevelStream(cache_path, features, labels, train_idx, batch_size=32, shuffle=True, seed=0)
    for epoch in range(epochs):
        for batch in stream.loader(epoch, num_workers=4):
            batch = batch.to(device, non_blocking=True)
            out = model(batch.inputs())  # a DenseBatch (x, powers, mask, extras) or a PackedBatch (log-powers)
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, get_worker_info

from xmask_cli.cache import StructureCache
from xmask_cli.engine.batching.extras import GraphExtras, pad_extras, padded_edges, to_tensors
from xmask_cli.engine.batching.graph_store import GraphStore
from xmask_cli.model.batches import DenseBatch, LogPairs, PackedBatch

#: Default bytes of log-powers a task's store keeps (``train.log_cache_mb``; at the stored pairs:
#: ogbg-molhiv 211 MB, DD 256 MB for K=4).
LOG_CACHE_BYTES = 1 << 29


def size_buckets(
    num_nodes: np.ndarray,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int | None,
    epoch: int = 0,
) -> list[np.ndarray]:
    """Batches of positions into ``num_nodes``, graphs of similar size together.

    Positions are sorted by node count (stable: ties by position) and cut into
    consecutive chunks of ``batch_size``, so each batch pads to a size close to
    all its members. With ``shuffle`` the order of the chunks is permuted and
    ties between equal sizes are broken at random, by a generator seeded with
    ``(seed, epoch)``: the same pair always gives the same epoch.

    Returns:
        A list of int64 arrays; every position ``0..len(num_nodes)-1`` is in
        exactly one of them. Only the last chunk (in sorted order) may be short.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    num_nodes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    if not shuffle:
        order = np.argsort(num_nodes, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(None if seed is None else [int(seed), int(epoch)])
    # Random tie-breaks vary which equal-sized graphs share a batch across epochs,
    # without mixing sizes (lexsort: last key is primary).
    order = np.lexsort((rng.random(len(num_nodes)), num_nodes))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


@dataclass
class GraphBatch:
    """A padded batch of whole graphs.

    Attributes:
        x: ``[B, N, F]`` float node features, 0 on padding.
        mask: ``[B, N]`` bool, True for real nodes.
        powers: ``[B, K, N, N]`` float32 ``Â^1..Â^K``, 0 off the support and on padding.
        y: ``[B]`` or ``[B, T]`` graph labels.
        index: ``[B]`` long graph ids (rows of the cache).
        extras: structure the learned biases read (``spd``, ``rrwp``, padded
            eigenpairs; see :func:`~xmask_cli.engine.batching.extras.pad_extras`), or None.
        log_powers: the graphs' :func:`~xmask_cli.model.logsmask.log_powers` at their stored pairs
            (a stream with ``log_mask``, from its :class:`~xmask_cli.engine.batching.graph_store.GraphStore`);
            ``powers`` is then None.
        log_spec: ``(eps, outside_support)`` the log-powers were taken with.
    """

    x: Tensor
    mask: Tensor
    powers: Tensor | None
    y: Tensor
    index: Tensor
    extras: dict[str, Tensor] | None = None
    log_powers: LogPairs | None = None
    log_spec: tuple[float, str] | None = None

    @property
    def num_graphs(self) -> int:
        return int(self.index.numel())

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> GraphBatch:
        extras = None if self.extras is None else {k: fn(v) for k, v in self.extras.items()}
        lp = self.log_powers
        logp = None if lp is None else LogPairs(fn(lp.graph), fn(lp.row), fn(lp.col), fn(lp.values))
        return GraphBatch(x=fn(self.x), mask=fn(self.mask), powers=None if self.powers is None else fn(self.powers),
                          y=fn(self.y), index=fn(self.index), extras=extras, log_powers=logp, log_spec=self.log_spec)

    def inputs(self) -> DenseBatch | PackedBatch:
        """What the model reads: a :class:`PackedBatch` when the stream carries log-powers, else a
        :class:`DenseBatch` (the model's ``graph_layout`` then picks dense or packed attention)."""
        if self.log_powers is not None:
            return PackedBatch(x=self.x, mask=self.mask, log_powers=self.log_powers, log_spec=self.log_spec,
                               extras=self.extras)
        return DenseBatch(x=self.x, powers=self.powers, mask=self.mask, extras=self.extras)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphBatch:
        """A copy on ``device``; ``non_blocking`` overlaps the copy when the batch is pinned."""
        return self._apply(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> GraphBatch:
        """Page-locked copy; the DataLoader calls this when ``pin_memory=True``."""
        return self._apply(lambda t: t.pin_memory())


def collate(
    cache: StructureCache,
    graph_ids: Sequence[int] | np.ndarray,
    x_list: Sequence[Tensor],
    y_list: Sequence[Tensor],
    needs: Iterable[str] = (),
) -> GraphBatch:
    """Pad the graphs ``graph_ids`` into one :class:`GraphBatch` with dense powers.

    ``x_list[b]`` (``[n_b, F]``) and ``y_list[b]`` belong to ``graph_ids[b]``.
    Each graph's cached pairs are scattered into the dense powers tensor in
    one indexed assignment for the whole batch; N is the largest graph here.
    ``needs`` names the extra sections (``spd``, ``rrwp``, ``spectrum``,
    ``magnetic``) the model's learned biases read; they go to ``extras``.
    """
    ids = np.asarray(graph_ids, dtype=np.int64).reshape(-1)
    if not (len(ids) == len(x_list) == len(y_list)) or len(ids) == 0:
        raise ValueError(f"collate needs as many features and labels as graphs (>= 1), got "
                         f"{len(ids)} ids, {len(x_list)} features, {len(y_list)} labels")
    sizes = np.array([cache.num_nodes(int(g)) for g in ids], dtype=np.int64)
    for g, n, x in zip(ids, sizes, x_list):
        if x.size(0) != n:
            raise ValueError(f"graph {g} has {n} nodes in the cache but {x.size(0)} feature rows")
    bsz, n_max = len(ids), max(int(sizes.max()), 1)
    powers = padded_powers(cache, ids, n_max)
    feat = x_list[0]
    x = feat.new_zeros((bsz, n_max, *feat.shape[1:]))
    mask = torch.zeros(bsz, n_max, dtype=torch.bool)
    for b, (n, xb) in enumerate(zip(sizes, x_list)):
        x[b, :n] = xb
        mask[b, :n] = True
    return GraphBatch(x=x, mask=mask, powers=powers, y=torch.stack([torch.as_tensor(y) for y in y_list]),
                      index=torch.from_numpy(ids.copy()), extras=batch_extras(cache, ids, needs, n_max))


def padded_powers(cache: StructureCache, ids: np.ndarray, n_max: int) -> Tensor:
    """``[B, K, N, N]`` float32 powers of graphs ``ids`` from the cache, zero off their stored pairs."""
    pairs = [cache.powers(int(g)) for g in ids]
    k = pairs[0][2].shape[1]
    # Build the scatter indices once for the batch: (graph, row, col) per stored pair.
    counts = np.array([len(r) for r, _, _ in pairs], dtype=np.int64)
    b_idx = np.repeat(np.arange(len(ids), dtype=np.int64), counts)
    rows = np.concatenate([r for r, _, _ in pairs]).astype(np.int64, copy=False)
    cols = np.concatenate([c for _, c, _ in pairs]).astype(np.int64, copy=False)
    vals = np.concatenate([v for _, _, v in pairs]).astype(np.float32, copy=False)
    powers = np.zeros((len(ids), k, n_max, n_max), dtype=np.float32)
    powers[b_idx, :, rows, cols] = vals  # advanced indices around a slice: the value is [P, K]
    return torch.from_numpy(powers)


def batch_extras(cache: StructureCache, ids: np.ndarray, needs: Iterable[str], n_max: int) -> dict[str, Tensor] | None:
    """The padded extras (``needs``: ``spd``, ``rrwp``, ...) of graphs ``ids``, or None when none is needed."""
    needs = frozenset(needs)
    if not needs:
        return None
    fast = {"edge"} & needs if cache.in_memory else set()  # gathered for the whole batch at once
    rest = needs - fast
    out = pad_extras([GraphExtras(cache, int(g), rest).dense() for g in ids], n_max) if rest else {}
    if fast:
        out.update(padded_edges(cache, ids, n_max))
    return to_tensors(out)


class EpochBatches(Dataset[GraphBatch]):
    """Map-style dataset whose item ``i`` is the ``i``-th :class:`GraphBatch` of one epoch.

    The batches are fixed up front, so a DataLoader (``batch_size=None``) with
    any number of workers yields them in the same order as a plain loop.
    """

    def __init__(self, stream: GraphLevelStream, batches: list[np.ndarray]):
        self.stream = stream
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> GraphBatch:
        return self.stream.collate(self.batches[i])


def _fresh_seed() -> int:
    """A seed from the OS's entropy, below ``2**63``."""
    entropy = np.random.SeedSequence().entropy  # an int when no entropy is given
    return int(cast(int, entropy) % (1 << 63))


def _worker_init(worker_id: int) -> None:
    """Give each worker its own cache handle (HDF5 handles survive neither pickling nor fork)."""
    info = get_worker_info()
    assert info is not None
    cast(EpochBatches, info.dataset).stream._reopen_in_worker()  # the loader's dataset is always one


class GraphLevelStream:
    """Bucketed, padded batches of one split of a graph-level dataset.

    Args:
        cache_path: the structure cache of the dataset (``xmask prepare``).
        features: ``features[g]`` is the ``[n_g, F]`` node features of graph ``g``.
        labels: ``[G]`` or ``[G, T]``, indexed by graph id.
        indices: graph ids of this split.
        batch_size: graphs per batch.
        shuffle: permute the batch order (and equal-size ties) every epoch.
        seed: makes every epoch reproducible; None draws one per stream.
        load_in_memory: read the whole cache once (when it fits) instead of
            reading each batch from the file (dense powers and extras).
        needs: extra structure sections the batches carry (see :func:`collate`).
        log_mask: ``(eps, outside_support)``: batches carry every graph's
            log-powers at its stored pairs (:class:`~xmask_cli.model.batches.LogPairs`,
            from the :class:`~xmask_cli.engine.batching.graph_store.GraphStore`), what the
            packed graph layout reads, instead of the dense powers tensor. None: dense powers.
        log_cache_bytes: the most bytes of log values the store keeps (beyond it the
            log of a batch's pairs is taken per batch).
        store: the task's store to share (features, labels, log-powers held once for
            every stream); None builds one. Its ``log_spec`` must be ``log_mask``.
    """

    def __init__(
        self,
        cache_path: str | os.PathLike[str],
        features: Sequence[Tensor],
        labels: Tensor,
        indices: Sequence[int] | np.ndarray | Tensor,
        batch_size: int,
        shuffle: bool = False,
        seed: int | None = None,
        *,
        load_in_memory: bool = False,
        needs: Iterable[str] = (),
        log_mask: tuple[float, str] | None = None,
        log_cache_bytes: int = LOG_CACHE_BYTES,
        store: GraphStore | None = None,
    ):
        if log_cache_bytes < 0:
            raise ValueError(f"log_cache_bytes must be >= 0, got {log_cache_bytes}")
        self.cache = StructureCache(cache_path)
        self.log_spec = None if log_mask is None else (float(log_mask[0]), str(log_mask[1]))
        if store is None:
            store = GraphStore(cache_path, features, labels, self.log_spec, log_cache_bytes)
        elif store.log_spec != self.log_spec:
            raise ValueError(f"the store holds log-powers for {store.log_spec}, the stream needs {self.log_spec}")
        self.store = store
        self.needs = frozenset(needs)
        self.labels = labels
        self.indices = np.asarray(torch.as_tensor(indices).cpu(), dtype=np.int64).reshape(-1)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        # Draw a seed once if none is given, so epoch(e) is at least stable within this stream.
        self.seed = _fresh_seed() if seed is None else int(seed)
        # The file is read per batch only for dense powers and extras: load it only where they are read.
        self.load_in_memory = bool(load_in_memory) and (self.log_spec is None or bool(self.needs))
        self._epoch = 0
        if self.load_in_memory:
            self.cache.load_in_memory()
        num_graphs = len(store.num_nodes)
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= num_graphs):
            raise ValueError(f"indices out of range for a cache of {num_graphs} graphs")
        self.num_nodes = store.num_nodes[self.indices]
        # Workers open their own handle; the parent's must not be open across a fork.
        self.cache.close()

    @property
    def num_graphs(self) -> int:
        """Graphs of the whole dataset (ids ``0..num_graphs-1``), not only this split's."""
        return len(self.store.num_nodes)

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Epoch that ``iter(stream)`` streams next (as ``DistributedSampler.set_epoch``)."""
        self._epoch = int(epoch)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Graph ids of each batch of ``epoch``, in streaming order."""
        chunks = size_buckets(self.num_nodes, self.batch_size, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        return [self.indices[c] for c in chunks]

    def collate(self, graph_ids: np.ndarray, dense_powers: bool = False) -> GraphBatch:
        """The padded batch of ``graph_ids``; ``dense_powers``: with ``powers`` even under ``log_mask``.

        (``explain`` records the terms of the dense path, which reads the powers tensor.)
        Features, mask and labels come from the store in two gathers; the structure
        as :class:`~xmask_cli.model.batches.LogPairs` (``log_mask``) or dense powers.
        """
        ids = np.asarray(graph_ids, dtype=np.int64).reshape(-1)
        if len(ids) == 0:
            raise ValueError("a batch needs at least one graph")
        x, mask, pairs = self.store.gather(ids)
        powers = None
        if pairs is None or dense_powers:
            pairs, powers = None, padded_powers(self.cache, ids, x.size(1))
        index = torch.from_numpy(ids.copy())
        return GraphBatch(x=x, mask=mask, powers=powers, y=self.labels[index], index=index,
                          extras=batch_extras(self.cache, ids, self.needs, x.size(1)), log_powers=pairs,
                          log_spec=None if pairs is None else self.log_spec)

    def epoch(self, e: int) -> Iterator[GraphBatch]:
        """Batches of epoch ``e`` in this process (no workers)."""
        for ids in self.batches(e):
            yield self.collate(ids)

    def __iter__(self) -> Iterator[GraphBatch]:
        return self.epoch(self._epoch)

    def dataset(self, e: int) -> EpochBatches:
        """Epoch ``e`` as a map-style dataset of batches."""
        return EpochBatches(self, self.batches(e))

    def loader(self, e: int, num_workers: int = 0, pin_memory: bool | None = None, *,
               batches: list[np.ndarray] | None = None) -> DataLoader[GraphBatch]:
        """A DataLoader over the batches of epoch ``e``, in the same order as :meth:`epoch`.

        ``pin_memory`` defaults to whether CUDA is available; ``batches`` (graph ids
        per batch) replaces the epoch's list, e.g. one rank's share of it. Forked
        workers inherit the store (copy-on-write): nothing is read or logged again.
        """
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        if num_workers > 0:
            self.cache.close()  # a handle opened since must not be inherited by forked workers
        return DataLoader(
            self.dataset(e) if batches is None else EpochBatches(self, batches),
            batch_size=None,  # items are whole batches already
            shuffle=False,  # the order is the epoch's bucketed order
            num_workers=num_workers,
            pin_memory=pin_memory,
            worker_init_fn=_worker_init if num_workers > 0 else None,
        )

    def _reopen_in_worker(self) -> None:
        """Inside a worker: drop any inherited handle; reload arrays lost to pickling."""
        # An inherited HDF5 id belongs to the parent process: forget it (not close) and open lazily.
        self.cache.forget_handle()
        if self.load_in_memory and not self.cache.in_memory:  # spawned workers get the cache without its arrays
            self.cache.load_in_memory()
