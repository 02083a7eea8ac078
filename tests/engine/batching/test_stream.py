"""Graph-level batch streaming against independent numpy computations."""
from __future__ import annotations

import pickle
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.engine import GraphBatch, GraphLevelStream, collate, size_buckets
from xmask_cli.model.logsmask import XLogSMaskBias
from xmask_cli.prepare import prepare_graphs

NUM_GRAPHS = 40
NUM_FEATURES = 3


class Toy:
    """Random graphs, their cache, features and labels."""

    def __init__(self, root: Path):
        rng = np.random.default_rng(7)
        self.edges, self.adj = [], []
        nodes = []
        for i in range(NUM_GRAPHS):
            n = 1 if i == 0 else int(rng.integers(1, 26))  # always one single-node graph
            g = nx.gnp_random_graph(n, 0.2, seed=int(rng.integers(1 << 30)))
            self.edges.append(np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T)
            self.adj.append(nx.to_numpy_array(g, nodelist=range(n)))
            nodes.append(n)
        self.num_nodes = np.array(nodes, dtype=np.int64)
        cfg = resolve("graph-level").structure
        self.k = cfg.powers.k
        summary = prepare_graphs(dataset_key="toy", level="graph", edges=self.edges, num_nodes=self.num_nodes,
                                 fingerprint=graphs_fingerprint(self.edges, self.num_nodes), cfg=cfg,
                                 cache_dir=root / "cache")
        self.path = summary.path
        gen = torch.Generator().manual_seed(0)
        self.features = [torch.randn(int(n), NUM_FEATURES, generator=gen) for n in self.num_nodes]
        self.labels = torch.randint(0, 2, (NUM_GRAPHS,), generator=gen)

    def powers(self, g: int) -> np.ndarray:
        """``[K, n, n]`` ``Â^1..Â^K`` of graph ``g``, ``Â = D^-1/2 (A + I) D^-1/2``, in float64."""
        a = self.adj[g] + np.eye(len(self.adj[g]))
        d = a.sum(1) ** -0.5
        a = d[:, None] * a * d[None, :]
        return np.stack([np.linalg.matrix_power(a, p) for p in range(1, self.k + 1)])


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    return Toy(tmp_path_factory.mktemp("stream"))


def stream(toy: Toy, **kw) -> GraphLevelStream:
    args = dict(indices=np.arange(NUM_GRAPHS), batch_size=6, shuffle=True, seed=3)
    args.update(kw)
    return GraphLevelStream(toy.path, toy.features, toy.labels, **args)


def assert_same(a: GraphBatch, b: GraphBatch) -> None:
    for name in ("x", "mask", "powers", "y", "index"):
        ta, tb = getattr(a, name), getattr(b, name)
        assert ta.dtype == tb.dtype and ta.shape == tb.shape, name
        assert torch.equal(ta, tb), name


def check_batch(toy: Toy, batch: GraphBatch) -> None:
    """Every field of ``batch`` against the toy data, graph by graph."""
    ids = batch.index.numpy()
    sizes = toy.num_nodes[ids]
    n_max = int(sizes.max())
    assert batch.x.shape == (len(ids), n_max, NUM_FEATURES) and batch.x.dtype == torch.float32
    assert batch.powers.shape == (len(ids), toy.k, n_max, n_max) and batch.powers.dtype == torch.float32
    assert batch.mask.dtype == torch.bool
    assert torch.equal(batch.y, toy.labels[torch.from_numpy(ids)])
    for b, (g, n) in enumerate(zip(ids, sizes)):
        assert batch.mask[b, :n].all() and not batch.mask[b, n:].any()
        assert torch.equal(batch.x[b, :n], toy.features[g])
        assert not batch.x[b, n:].any()
        np.testing.assert_allclose(batch.powers[b, :, :n, :n].numpy(), toy.powers(int(g)), rtol=1e-5, atol=1e-6)
        assert not batch.powers[b, :, n:, :].any() and not batch.powers[b, :, :, n:].any()


# ------------------------------------------------------------------ size_buckets
def padding(num_nodes: np.ndarray, chunks: list[np.ndarray]) -> int:
    return int(sum(len(c) * num_nodes[c].max() - num_nodes[c].sum() for c in chunks))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 7, 100])
def test_size_buckets_partition_and_sorted_chunks(toy: Toy, shuffle: bool, batch_size: int):
    nn = toy.num_nodes
    chunks = size_buckets(nn, batch_size, shuffle=shuffle, seed=11, epoch=2)
    flat = np.concatenate(chunks)
    assert sorted(flat.tolist()) == list(range(len(nn)))
    assert all(1 <= len(c) <= batch_size for c in chunks)
    assert sum(len(c) < batch_size for c in chunks) <= 1
    # Chunks are consecutive runs of the size-sorted order: reassembled by size they are sorted,
    # and no graph outside a chunk lies strictly between its smallest and largest member.
    ordered = sorted(chunks, key=lambda c: (nn[c].min(), nn[c].max()))
    assert np.all(np.diff(nn[np.concatenate(ordered)]) >= 0)
    for c in chunks:
        inside = (nn > nn[c].min()) & (nn < nn[c].max())
        assert np.isin(np.flatnonzero(inside), c).all()
    if not shuffle:
        # Stable: ties broken by index, chunks in ascending size.
        np.testing.assert_array_equal(flat, np.argsort(nn, kind="stable"))
    # Never more padding than batching the same graphs in their given order.
    plain = [np.arange(i, min(i + batch_size, len(nn))) for i in range(0, len(nn), batch_size)]
    assert padding(nn, chunks) <= padding(nn, plain)


def test_size_buckets_pads_less_than_unsorted(toy: Toy):
    nn = toy.num_nodes
    plain = [np.arange(i, min(i + 6, len(nn))) for i in range(0, len(nn), 6)]
    assert padding(nn, size_buckets(nn, 6, shuffle=True, seed=0)) < padding(nn, plain)


def test_size_buckets_reproducible_per_seed_and_epoch(toy: Toy):
    nn = toy.num_nodes

    def run(seed, epoch):
        return [c.tolist() for c in size_buckets(nn, 4, shuffle=True, seed=seed, epoch=epoch)]

    assert run(5, 0) == run(5, 0)
    assert run(5, 1) == run(5, 1)
    assert run(5, 0) != run(5, 1)
    assert run(5, 0) != run(6, 0)
    # The chunk order itself is shuffled (not only ties within a size): 10 chunks here.
    first = [int(nn[c].min()) for c in size_buckets(nn, 4, shuffle=True, seed=5, epoch=0)]
    second = [int(nn[c].min()) for c in size_buckets(nn, 4, shuffle=True, seed=5, epoch=1)]
    assert first != sorted(first) and first != second
    # Without shuffling the epoch and seed do not matter.
    assert size_buckets(nn, 4, shuffle=False, seed=1, epoch=0)[0].tolist() == \
        size_buckets(nn, 4, shuffle=False, seed=2, epoch=9)[0].tolist()


def test_size_buckets_jitters_only_equal_sizes():
    nn = np.array([3, 3, 3, 3, 5, 5, 5, 5, 1, 1])
    seen = set()
    for epoch in range(20):
        chunks = size_buckets(nn, 2, shuffle=True, seed=0, epoch=epoch)
        for c in chunks:
            assert len(set(nn[c])) == 1  # sizes never mix: each size fills whole chunks here
        seen.add(tuple(sorted(tuple(sorted(c.tolist())) for c in chunks)))
    assert len(seen) > 1  # which equal-sized graphs share a batch varies


def test_size_buckets_rejects_bad_batch_size():
    with pytest.raises(ValueError):
        size_buckets(np.array([1, 2]), 0, shuffle=False, seed=None)


# ------------------------------------------------------------------ collate
def test_collate_matches_independent_powers(toy: Toy):
    with StructureCache(toy.path) as cache:
        for ids in ([0], [5, 1, 17], list(range(NUM_GRAPHS))):
            batch = collate(cache, ids, [toy.features[g] for g in ids], [toy.labels[g] for g in ids])
            assert batch.index.tolist() == ids and batch.index.dtype == torch.long
            check_batch(toy, batch)


def test_collate_multi_target_labels_and_checks(toy: Toy):
    ids = [2, 3]
    y = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]
    with StructureCache(toy.path) as cache:
        batch = collate(cache, ids, [toy.features[g] for g in ids], y)
        assert batch.y.shape == (2, 2) and torch.equal(batch.y, torch.stack(y))
        with pytest.raises(ValueError):
            collate(cache, ids, [toy.features[g] for g in ids[:1]], y)
        wrong = [torch.zeros(int(toy.num_nodes[g]) + 1, NUM_FEATURES) for g in ids]
        with pytest.raises(ValueError):
            collate(cache, ids, wrong, y)


def test_batch_to_and_bias(toy: Toy):
    batch = next(iter(stream(toy)))
    moved = batch.to("cpu")
    assert moved is not batch
    assert_same(moved, batch)
    bias = XLogSMaskBias(num_heads=2)(batch)  # the bias reads powers and mask from the batch itself
    assert bias.shape == (batch.num_graphs, 2, batch.mask.size(1), batch.mask.size(1))
    # -inf exactly outside each head's support among real pairs (outside_support 'hard'); padding stays 0.
    real = (batch.mask[:, :, None] & batch.mask[:, None, :])[:, None]
    outside = (batch.powers[:, :2] == 0) & real
    assert outside.any() and torch.isneginf(bias[outside]).all()
    assert torch.isfinite(bias[~outside]).all() and (bias[~real.expand_as(bias)] == 0).all()


# ------------------------------------------------------------------ stream
def test_stream_epoch_covers_split_in_bucketed_order(toy: Toy):
    split = np.arange(0, NUM_GRAPHS, 2)[::-1].copy()  # a split, in no particular order
    s = stream(toy, indices=split, batch_size=4)
    batches = list(s.epoch(1))
    assert len(batches) == len(s) == 5
    assert sorted(torch.cat([b.index for b in batches]).tolist()) == sorted(split.tolist())
    expected = [split[c] for c in size_buckets(toy.num_nodes[split], 4, shuffle=True, seed=3, epoch=1)]
    for b, ids in zip(batches, expected):
        assert b.index.tolist() == ids.tolist()
        check_batch(toy, b)
    # Same epoch again: same batches; another epoch: another order.
    assert [b.index.tolist() for b in s.epoch(1)] == [b.index.tolist() for b in batches]
    assert [b.index.tolist() for b in s.epoch(2)] != [b.index.tolist() for b in batches]
    s.set_epoch(1)
    assert [b.index.tolist() for b in s] == [b.index.tolist() for b in batches]


def test_stream_without_seed_is_stable_within_stream(toy: Toy):
    s = stream(toy, seed=None)
    assert [b.tolist() for b in s.batches(0)] == [b.tolist() for b in s.batches(0)]


def test_stream_rejects_mismatched_inputs(toy: Toy):
    with pytest.raises(ValueError):
        GraphLevelStream(toy.path, toy.features[:-1], toy.labels, np.arange(3), 2)
    with pytest.raises(ValueError):
        GraphLevelStream(toy.path, toy.features, toy.labels, [NUM_GRAPHS], 2)


def test_stream_pickles_without_file_handle(toy: Toy):
    s = stream(toy)
    next(iter(s))  # opens the file in this process
    clone = pickle.loads(pickle.dumps(s))
    assert clone.cache._f is None
    assert_same(next(iter(clone)), next(iter(s)))


def test_loader_workers_match_single_process(toy: Toy):
    s = stream(toy)
    next(iter(s))  # a handle open in the parent must not leak into forked workers
    expected = list(s.epoch(4))
    pin = torch.cuda.is_available()
    for workers in (0, 2):
        got = list(s.loader(4, num_workers=workers))
        assert isinstance(s.loader(4), DataLoader) and s.loader(4).pin_memory == pin
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert isinstance(a, GraphBatch)
            assert_same(a, b)


def test_load_in_memory_matches_lazy_reads(toy: Toy):
    lazy, mem = stream(toy), stream(toy, load_in_memory=True)
    assert mem.cache._mem and not lazy.cache._mem
    for e in (0, 1):
        for a, b in zip(lazy.epoch(e), mem.epoch(e), strict=True):
            assert_same(a, b)
    # Workers of an in-memory stream read the same batches too.
    for a, b in zip(mem.loader(0, num_workers=2), lazy.epoch(0), strict=True):
        assert_same(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA for pinned memory and device copies")
def test_pinned_loader_to_cuda(toy: Toy):
    s = stream(toy)
    for a, b in zip(s.loader(0, num_workers=2, pin_memory=True), s.epoch(0), strict=True):
        assert a.powers.is_pinned()
        on_gpu = a.to("cuda", non_blocking=True)
        assert on_gpu.powers.is_cuda
        assert_same(on_gpu.to("cpu"), b)


def dense_log(batch: GraphBatch, b: int, n: int) -> np.ndarray:
    """Graph ``b`` of ``batch``: its ``[K, n, n]`` log-powers laid out from the batch's pairs ('hard' fill)."""
    lp = batch.log_powers
    at = (lp.graph == b).numpy()
    out = np.full((lp.values.size(1), n, n), -np.inf, dtype=np.float32)
    out[:, np.arange(n), np.arange(n)] = np.log(np.float32(1e-30))  # a zero on the diagonal: log(eps)
    out[:, lp.row.numpy()[at], lp.col.numpy()[at]] = lp.values.numpy()[at].T
    return out


def test_log_mask_stream_carries_each_graphs_log_powers_at_its_pairs(toy: Toy, monkeypatch) -> None:
    """With ``log_mask``, batches carry ``log(Â^k + eps)`` (numpy from networkx) at the stored pairs, -inf off
    the support; the logs are taken once, when the store is built, never per batch."""
    import xmask_cli.engine.batching.graph_store as store_mod

    s = stream(toy, log_mask=(1e-30, "hard"), load_in_memory=True)
    assert s.store.logged and not s.cache._mem  # the packed path needs no copy of the whole file

    def refuse(*a, **kw):
        raise AssertionError("a batch took a log again")

    monkeypatch.setattr(store_mod, "log_powers", refuse)
    first = list(s.epoch(0))
    for batch in first:
        assert batch.powers is None and batch.log_spec == (1e-30, "hard")
        assert batch.log_powers.values.dtype == torch.float32
        for b, g in enumerate(batch.index.tolist()):
            a = toy.powers(g)
            n = a.shape[-1]
            want = np.log(a + 1e-30)
            want[(np.abs(a) < 1e-12) & ~np.eye(n, dtype=bool)[None]] = -np.inf  # outside the support, self pair kept
            got = dense_log(batch, b, n)
            assert np.array_equal(np.isinf(got), np.isinf(want))
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)
    # Features, mask and labels are those of the dense-powers stream (per-graph loops, the reference).
    dense = stream(toy, load_in_memory=True)
    for a, b in zip(first, dense.epoch(0), strict=True):
        for name in ("x", "mask", "y", "index"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    moved = first[0].to("cpu")
    assert moved.powers is None and torch.equal(moved.log_powers.values, first[0].log_powers.values)


def test_log_budget_below_the_pairs_takes_the_log_per_batch_with_the_same_numbers(toy: Toy) -> None:
    """``log_cache_bytes`` bounds the log values kept; below the pairs' size each batch takes its own, same bits."""
    full = stream(toy, log_mask=(1e-30, "hard"))
    tight = stream(toy, log_mask=(1e-30, "hard"), log_cache_bytes=full.store.values.nbytes - 1)
    assert full.store.logged and not tight.store.logged
    kept = tight.store.values.copy()
    for e in (0, 1):
        for a, b in zip(full.epoch(e), tight.epoch(e), strict=True):
            for name in ("graph", "row", "col", "values"):
                assert torch.equal(getattr(a.log_powers, name), getattr(b.log_powers, name)), name
    assert np.array_equal(tight.store.values, kept)  # each batch logged its own copy, never the store's values
    with pytest.raises(ValueError, match="log_cache_bytes"):
        stream(toy, log_mask=(1e-30, "hard"), log_cache_bytes=-1)


def test_loader_workers_read_the_store_without_taking_a_log(toy: Toy, monkeypatch) -> None:
    """Forked workers inherit the store: none takes a log, and their batches equal the in-process ones."""
    import multiprocessing

    import xmask_cli.engine.batching.graph_store as store_mod

    if multiprocessing.get_start_method(allow_none=True) not in (None, "fork"):
        pytest.skip("workers inherit the store by fork; this interpreter spawns them")
    s = stream(toy, log_mask=(1e-30, "hard"))
    expected = list(s.epoch(3))

    def refuse(*a, **kw):
        raise AssertionError("a worker took a graph's log again")

    monkeypatch.setattr(store_mod, "log_powers", refuse)
    got = list(s.loader(3, num_workers=2))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.index.tolist() == b.index.tolist()
        assert torch.equal(a.x, b.x) and torch.equal(a.log_powers.values, b.log_powers.values)


def test_streams_share_one_store(toy: Toy) -> None:
    s = stream(toy, log_mask=(1e-30, "hard"))
    other = GraphLevelStream(toy.path, (), toy.labels, np.arange(5), 2, log_mask=(1e-30, "hard"), store=s.store)
    assert other.store is s.store and other.num_graphs == NUM_GRAPHS
    with pytest.raises(ValueError, match="store holds"):
        GraphLevelStream(toy.path, (), toy.labels, np.arange(5), 2, log_mask=(1e-20, "hard"), store=s.store)


def test_log_cache_mb_is_a_validated_train_key_not_saved_with_the_run() -> None:
    from xmask_cli.engine.training.loop import TrainConfig
    from xmask_cli.errors import ConfigError

    assert resolve("graph-level").train.log_cache_mb == 512
    assert resolve("graph-level", ["train.log_cache_mb=0"]).train.log_cache_mb == 0
    with pytest.raises(ConfigError, match="log_cache_mb"):
        resolve("graph-level", ["train.log_cache_mb=-1"])
    # It changes memory, not numbers: a run resumes under another budget.
    cfg = TrainConfig.from_section(resolve("graph-level", ["train.log_cache_mb=64"]).train, seed=0, device="cpu")
    assert "log_cache_mb" not in cfg.to_dict()


def test_store_pairs_are_row_major_and_the_cache_s_pairs() -> None:
    """The store sorts each node's pairs by column, moving their values along: against scipy's sort_indices
    on a CSR whose rows are shuffled (rows of 0, 1 and many entries, some already in order)."""
    import scipy.sparse as sp

    from xmask_cli.engine.batching.graph_store import _sort_rows

    rng = np.random.default_rng(2)
    m = sp.random(30, 30, density=0.3, format="csr", random_state=3)
    m.sort_indices()
    indptr, col = m.indptr.astype(np.int64), m.indices.astype(np.uint16)
    values = rng.standard_normal((len(col), 4)).astype(np.float32)
    shuffled_col, shuffled_values = col.copy(), values.copy()
    for r in range(0, 30, 2):  # every other row shuffled, the rest left sorted
        a, b = indptr[r], indptr[r + 1]
        perm = a + rng.permutation(b - a)
        shuffled_col[a:b], shuffled_values[a:b] = col[perm], values[perm]
    assert not np.array_equal(shuffled_col, col)
    _sort_rows(indptr, shuffled_col, shuffled_values)
    assert np.array_equal(shuffled_col, col) and np.array_equal(shuffled_values, values)


def test_store_batches_carry_sorted_pairs_of_each_graph(toy: Toy) -> None:
    """Every batch's pairs are row-major within each graph (what the pair path's CSR plan takes unsorted)."""
    s = stream(toy, log_mask=(1e-30, "hard"))
    for batch in s.epoch(0):
        lp = batch.log_powers
        key = (lp.graph * 10_000 + lp.row) * 10_000 + lp.col
        assert bool((key[1:] > key[:-1]).all())


def test_rows_sorted_reads_each_row_apart() -> None:
    """The check before the sort: a row whose columns fall is unsorted; a fall between two rows is not."""
    from xmask_cli.engine.batching.graph_store import _rows_sorted

    indptr = np.array([0, 3, 3, 5, 6])
    assert _rows_sorted(indptr, np.array([0, 2, 7, 1, 4, 0], dtype=np.uint16))
    assert not _rows_sorted(indptr, np.array([0, 7, 2, 1, 4, 0], dtype=np.uint16))
    assert not _rows_sorted(indptr, np.array([0, 2, 7, 4, 4, 0], dtype=np.uint16))  # a repeated column
    assert _rows_sorted(np.array([0]), np.array([], dtype=np.uint16))
