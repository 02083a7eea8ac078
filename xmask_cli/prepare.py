"""dataset -> structure -> cache, in parallel over blocks of graphs.

Small graphs are packed into block-diagonal blocks of up to ``_BLOCK_NODES``
nodes: the powers and distances of a block-diagonal matrix are the blocks'
own, so one sparse product serves hundreds of molecules. Large graphs (more
than ``structure.large.min_nodes`` nodes) go alone, with the truncation rule.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import scipy.sparse as sp

from xmask_cli import structure as S
from xmask_cli.cache import CacheWriter, StructureCache, cache_key, cache_path, verify
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.config import Config, StructureConfig
from xmask_cli.errors import CacheError

_BLOCK_NODES = 16384
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def structure_params(cfg: StructureConfig, level: str) -> dict[str, Any]:
    """The parameters that decide the cache's content (part of its key).

    Disabled sections and settings that prepare does not read (``eps``) are
    left out, so that toggling them does not invalidate a cache.
    """
    d = asdict(cfg)
    d["powers"].pop("eps", None)
    for sec in ("spd", "spectrum", "magnetic", "rrwp"):
        if not d[sec]["enabled"]:
            d[sec] = {"enabled": False}
    if cfg.partition.parts <= 0 or level != "node":
        d["partition"] = {"parts": 0}
    return d


@dataclass
class BlockResult:
    """Structure of consecutive graphs, ready to append to the cache."""

    num_nodes: np.ndarray
    num_edges: np.ndarray
    large: np.ndarray
    component: np.ndarray
    pairs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # group -> arrays incl. 'node_counts'
    eig: dict[str, dict[str, list]] = field(default_factory=dict)  # group -> vals / vecs / method
    part: np.ndarray | None = None
    dropped: dict[str, np.ndarray] = field(default_factory=dict)  # group -> [rows, K] share of row mass truncated


def _block_adjacency(edges: list[np.ndarray], nn: np.ndarray, symmetric: bool = True) -> sp.csr_matrix:
    offs = np.concatenate([[0], np.cumsum(nn)])
    ei = np.concatenate([e + o for e, o in zip(edges, offs[:-1])], axis=1) if edges else np.zeros((2, 0), dtype=np.int64)
    return S.adjacency(ei, int(offs[-1]), symmetric=symmetric)


def col_dtype(num_nodes: np.ndarray) -> np.dtype:
    """Graph-local column ids fit uint16 for every graph-level benchmark: half the bytes of int32."""
    return np.dtype(np.uint16) if int(np.max(num_nodes, initial=0)) <= 1 << 16 else np.dtype(np.int32)


def _split_pairs(row: np.ndarray, col: np.ndarray, offs: np.ndarray, cdtype: np.dtype, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """Block pairs (grouped by ascending row) -> per-node counts and graph-local columns."""
    n = int(offs[-1])
    node_counts = np.bincount(row, minlength=n).astype(np.int64)
    if len(offs) == 2:  # one graph: ids are already local
        local = col.astype(cdtype, copy=False)
    else:
        graph_of_node = np.repeat(np.arange(len(offs) - 1), np.diff(offs))
        local = (col - offs[:-1][graph_of_node][row]).astype(cdtype)
    out = {"node_counts": node_counts, "col": local}
    out.update(extra)
    return out


def compute_block(
    edges: list[np.ndarray],
    nn: np.ndarray,
    cfg: StructureConfig,
    large: bool,
    level: str,
    cdtype: np.dtype = np.dtype(np.int32),
    parts: tuple[str, ...] = ("pairs", "per-graph"),
) -> BlockResult:
    """Structure of one block of graphs (block-diagonal), or of one large graph.

    ``parts`` selects the pair groups (powers, SPD, RRWP: large outputs), the
    per-graph results (spectra, partitions: small outputs), or both, so that a
    worker process can compute the second while the writing process does the first.
    """
    from threadpoolctl import threadpool_limits

    # Matrices here are small or sparse: threaded BLAS only adds contention (seen: one
    # 136-node eigh from 3 ms to 600 ms while another process kept the second core busy).
    # Parallelism comes from --workers and numba instead.
    with threadpool_limits(1, user_api="blas"):
        return _compute_block(edges, nn, cfg, large, level, cdtype, parts)


def _compute_block(
    edges: list[np.ndarray], nn: np.ndarray, cfg: StructureConfig, large: bool, level: str, cdtype: np.dtype,
    parts: tuple[str, ...],
) -> BlockResult:
    nn = np.asarray(nn, dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(nn)]).astype(np.int64)
    a = _block_adjacency(edges, nn)
    graph_of_node = np.repeat(np.arange(len(nn)), nn)
    edge_counts = (np.bincount(graph_of_node, weights=np.diff(a.indptr), minlength=len(nn)) // 2).astype(np.int64)
    res = BlockResult(num_nodes=nn, num_edges=edge_counts, large=np.full(len(nn), large), component=S.connected_components(a))
    trunc = S.Truncation(cfg.large.tau, cfg.large.topk) if large else S.Truncation()
    if "pairs" in parts:
        _pair_groups(res, a, offs, cfg, large, trunc, cdtype)
    if "per-graph" in parts:
        _per_graph(res, a, edges, nn, offs, cfg, level)
    return res


def _pair_groups(res: BlockResult, a: sp.csr_matrix, offs: np.ndarray, cfg: StructureConfig, large: bool,
                 trunc: S.Truncation, cdtype: np.dtype) -> None:
    spd_max = cfg.spd.max_distance if cfg.spd.enabled else 0
    if large:  # truncated, iterated sparse products; SPD only within a small radius
        pw = S.adjacency_powers(a, cfg.powers.k, normalization=cfg.powers.normalization, truncation=trunc)
        # Exact row sums by mat-vecs (no dense power): what truncation removed, row by row.
        res.dropped["powers"] = S.dropped_share(pw, S.power_row_sums(a, cfg.powers.k, normalization=cfg.powers.normalization))
        row, col, vals = S.union_pairs(pw)
        del pw
        res.pairs["powers"] = _split_pairs(row, col, offs, cdtype, values=vals.astype(np.float32))
        if spd_max:
            r, c, d = S.shortest_path_pairs(a, min(spd_max, cfg.large.spd_radius))
            res.pairs["spd"] = _split_pairs(r, c, offs, cdtype, dist=d)
    else:  # exact: one breadth-first search per node gives the powers and the distances
        fused = spd_max >= cfg.powers.k
        base = np.repeat(offs[:-1], np.diff(offs))  # first node of each node's graph
        out = S.ball_structure(a, cfg.powers.k, normalization=cfg.powers.normalization,
                               spd_radius=spd_max if fused else 0, base=base, col_dtype=cdtype)
        res.pairs["powers"] = {"node_counts": out["counts"], "col": out["col"], "values": out["values"].astype(np.float32)}
        if fused:
            res.pairs["spd"] = {"node_counts": out["spd_counts"], "col": out["spd_col"], "dist": out["spd_dist"]}
        elif spd_max:
            r, c, d = S.shortest_path_pairs(a, spd_max)
            res.pairs["spd"] = _split_pairs(r, c, offs, cdtype, dist=d)

    if cfg.rrwp.enabled:
        if large:
            walks = S.random_walk_powers(a, cfg.rrwp.steps, truncation=trunc)
            res.dropped["rrwp"] = S.dropped_share(walks, S.random_walk_row_sums(a, cfg.rrwp.steps))
            r, c, v = S.union_pairs(walks)
            del walks
        else:
            r, c, v = S.walk_pairs(a, cfg.rrwp.steps)
        res.pairs["rrwp"] = _split_pairs(r, c, offs, cdtype, values=v.astype(np.float32))


def _per_graph(res: BlockResult, a: sp.csr_matrix, edges: list[np.ndarray], nn: np.ndarray, offs: np.ndarray,
               cfg: StructureConfig, level: str) -> None:
    if cfg.spectrum.enabled:
        lap = S.normalized_laplacian(a)
        res.eig["spectrum"] = _per_graph_eigs(lap, offs, res.component, cfg.spectrum.num_eigs, cfg.spectrum.full_max_nodes,
                                              np.float32)
    if cfg.magnetic.enabled:
        ad = _block_adjacency(edges, nn, symmetric=False)
        lap = S.magnetic_laplacian(ad, cfg.magnetic.q)
        # Weak components of the directed graph: the same as the symmetrized graph's.
        res.eig["magnetic"] = _per_graph_eigs(lap, offs, res.component, cfg.magnetic.num_eigs, cfg.spectrum.full_max_nodes,
                                              np.complex64)

    if level == "node" and cfg.partition.parts > 0:
        res.part = np.concatenate([S.metis_parts(a[s:e, s:e], cfg.partition.parts, seed=cfg.partition.seed)
                                   for s, e in zip(offs[:-1], offs[1:])]) if len(nn) else np.zeros(0, np.int32)


def _per_graph_eigs(lap: sp.csr_matrix, offs: np.ndarray, component: np.ndarray, m: int, full_max: int,
                    dtype: Any) -> dict[str, list]:
    """Each graph's stored spectrum, solved per connected component (see :func:`~xmask_cli.structure.graph_spectra`)."""
    vals, vecs, methods = [], [], []
    for lv, vv, how in S.graph_spectra(lap, offs, component, m, full_max_nodes=full_max):
        vals.append(np.real(lv).astype(np.float64))
        vecs.append(np.ascontiguousarray(vv).astype(dtype).ravel())
        methods.append(how)
    return {"vals": vals, "vecs": vecs, "methods": methods}


class _DroppedMass:
    """Running mean and max over rows of the truncated share of each power's row mass."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.total: dict[str, np.ndarray] = {}
        self.max: dict[str, np.ndarray] = {}

    def add(self, group: str, share: np.ndarray) -> None:
        if group not in self.rows:
            self.rows[group], self.total[group], self.max[group] = 0, np.zeros(share.shape[1]), np.zeros(share.shape[1])
        self.rows[group] += share.shape[0]
        self.total[group] += share.sum(axis=0)
        self.max[group] = np.maximum(self.max[group], share.max(axis=0, initial=0.0))

    def attrs(self, group: str, width: int) -> str:
        """JSON for the group's ``dropped_mass`` attribute (zeros when no graph was truncated)."""
        rows = self.rows.get(group, 0)
        mean = self.total[group] / rows if rows else np.zeros(width)
        mx = self.max[group] if rows else np.zeros(width)
        return json.dumps({"rows": rows, "mean": [float(x) for x in mean], "max": [float(x) for x in mx]})


#: The truncation rule as recorded in the cache (see :class:`~xmask_cli.structure.powers.Truncation`).
TRUNCATION_RULE = ("large graphs only; power 1 (A-hat) kept whole; for k >= 2, P_k = trunc(P_(k-1) A-hat): "
                   "the diagonal and every real edge (support of A + I) are always kept, other entries with "
                   "|x| < tau are dropped, then a row keeps its protected entries and the largest others up to "
                   "topk entries in total")


def truncation_report(cache: StructureCache) -> dict[str, Any]:
    """What truncation did to a cache's large graphs, read from its attributes.

    ``{"large_graphs", "tau", "topk", "rule", "powers": {"k", "rows", "mean", "max"}[, "rrwp": {"step", ...}]}``:
    per power, the mean and max over the truncated graphs' rows of the share
    of the row's exact mass that the stored entries miss (0 where nothing was truncated).
    """
    f = cache.file
    dropped = {g: f[g].attrs["dropped_mass"] for g in ("powers", "rrwp") if g in f and "dropped_mass" in f[g].attrs}
    return _truncation_report(int(np.count_nonzero(cache.read_array("graphs/large"))), f["powers"].attrs["truncation"],
                              dropped)


def _truncation_report(large_graphs: int, truncation: str, dropped_mass: dict[str, str]) -> dict[str, Any]:
    """:func:`truncation_report` from the values written: the ``truncation`` and ``dropped_mass`` JSON attributes."""
    trunc = json.loads(truncation)
    out: dict[str, Any] = {"large_graphs": large_graphs, "tau": trunc["tau"], "topk": trunc["topk"],
                           "rule": trunc["rule"]}
    for group, label, first in (("powers", "k", 1), ("rrwp", "step", 0)):
        if group in dropped_mass:
            d = json.loads(dropped_mass[group])
            out[group] = {label: list(range(first, first + len(d["mean"]))), **d}
    return out


def plan_blocks(num_nodes: np.ndarray, large_min: int, block_nodes: int = _BLOCK_NODES) -> list[tuple[int, int, bool]]:
    """Split graphs ``0..G-1`` into consecutive ``(start, stop, large)`` blocks."""
    blocks: list[tuple[int, int, bool]] = []
    start, total = 0, 0
    for g, n in enumerate(num_nodes):
        n = int(n)
        if n > large_min:
            if g > start:
                blocks.append((start, g, False))
            blocks.append((g, g + 1, True))
            start, total = g + 1, 0
            continue
        if total + n > block_nodes and g > start:
            blocks.append((start, g, False))
            start, total = g, 0
        total += n
    if start < len(num_nodes):
        blocks.append((start, len(num_nodes), False))
    return blocks


def _worker_init(parent_pid: int) -> None:
    """Side-worker setup: die with the parent, leave Ctrl-C to it, one numba thread."""
    # Ctrl-C reaches the whole process group; the parent alone reports it (one line, exit 130).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    # One process per core already: keep numba's BFS to one thread per worker.
    import numba

    numba.set_num_threads(1)


def _die_with_parent(parent_pid: int) -> None:
    """A `kill -9` of prepare must not leave workers running (nor, through their pipe, the resource
    tracker): on Linux the kernel kills this process when its parent dies (PR_SET_PDEATHSIG);
    elsewhere a daemon thread watches the parent pid."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="xmask-parent-watch", daemon=True).start()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored for the block (main thread only; elsewhere a no-op)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signal dispositions are not ours to change
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (an interrupt or an error), then wait for the pool to wind down.

    A plain ``shutdown(wait=True)`` would first let the workers finish their blocks.
    """
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    # Wait for the pool's manager thread too (quick: its workers are dead). Left running, it races
    # interpreter exit: concurrent.futures' atexit hook then writes to a closed wake-up pipe (a
    # 15-line "Exception ignored" trace after our one error line) or the process dies of SIGSEGV.
    pool.shutdown(wait=True, cancel_futures=True)


def _run_block(args: tuple) -> BlockResult:
    return compute_block(*args)


def iter_blocks(edges: list[np.ndarray], nn: np.ndarray, cfg: StructureConfig, level: str, workers: int) -> Iterator[tuple[int, BlockResult]]:
    """Yield ``(graphs_done, result)`` in graph order.

    With ``workers > 1``, ``workers - 1`` processes compute the per-graph
    results (spectra, partitions) of every block ahead, while this process
    computes the pair groups and the writer thread stores them: the large
    arrays never cross a process boundary, only the small ones do.
    """
    blocks = plan_blocks(nn, cfg.large.min_nodes)
    cdtype = col_dtype(nn)
    tasks = [(edges[s:e], nn[s:e], cfg, large, level, cdtype) for s, e, large in blocks]
    if workers <= 1:
        for (_, e, _), t in zip(blocks, tasks):
            yield e, _run_block(t)
        return
    import multiprocessing as mp

    import numba

    # spawn: forking a process that already started numba's threads can deadlock.
    threads = numba.get_num_threads()
    numba.set_num_threads(max(1, threads - (workers - 1)))  # the side workers take the other cores
    pool = None
    try:
        # Processes started now begin with Ctrl-C ignored (an ignored signal survives exec, and Python
        # then installs no KeyboardInterrupt handler), so one hitting a worker still importing never
        # prints a traceback; the parent alone reports it.
        with _sigint_ignored():
            pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=mp.get_context("spawn"),
                                       initializer=_worker_init, initargs=(os.getpid(),))
            side = [pool.submit(_run_block, (*t, ("per-graph",))) for t in tasks]
        for (_, e, _), t, fut in zip(blocks, tasks, side):
            r = _run_block((*t, ("pairs",)))
            other = fut.result()
            r.eig, r.part = other.eig, other.part
            yield e, r
    except BaseException:  # Ctrl-C, an error, or the consumer closing the generator early
        if pool is not None:
            _stop_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        numba.set_num_threads(threads)


@dataclass
class PrepareSummary:
    """What ``xmask prepare`` reports."""

    dataset: str
    path: str
    key: str
    cached: bool
    graphs: int
    nodes: int
    edges: int
    size_bytes: int
    seconds: float
    params: dict[str, Any]
    truncation: dict[str, Any] = field(default_factory=dict)  # see :func:`truncation_report`
    #: Node features training will feed the model (``GraphSet.feature_info``); None where not loaded here.
    features: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_graphs(
    *,
    dataset_key: str,
    level: str,
    edges: list[np.ndarray],
    num_nodes: np.ndarray,
    fingerprint: str,
    cfg: StructureConfig,
    cache_dir: Path,
    workers: int = 1,
    force: bool = False,
    full_check: bool = False,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> PrepareSummary:
    """Compute and cache the structure of ``edges`` unless the same key is cached and sound.

    Args:
        dataset_key: folder name under the cache dir (lower-case dataset name).
        level: task level (``node`` enables partitions).
        edges, num_nodes: the graphs, graph-local ids.
        fingerprint: hash of the input graphs (see :func:`graphs_fingerprint`).
        cfg: structure section of the config.
        force: rebuild even a sound file.
        full_check: read every chunk of an existing file (checksums) before trusting it, not only
            its attributes and offsets.
        progress: called with ``(graphs_done, graphs_total)``.

    Raises:
        CacheError: something other than a regular file sits at the cache path.
    """
    t0 = time.perf_counter()
    params = structure_params(cfg, level)
    key = cache_key(fingerprint, params)
    path = cache_path(cache_dir, dataset_key, key)
    nn = np.asarray(num_nodes, dtype=np.int64)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        # Not something xmask wrote (a folder, a link): never delete it, never write a temp file for nothing.
        raise CacheError(f"cache path {path} is not a regular file (a {'link' if path.is_symlink() else 'folder'} "
                         f"is in the way); move it away, or use another --cache-dir")
    if path.exists() and not force:
        # Trust an existing file only once it checks out: its key, fingerprint, dataset and format
        # (cheap), and with full_check every chunk's checksum too.
        problems = verify(path, fingerprint, full=full_check, expected_dataset=dataset_key)
        if not problems:
            try:
                with StructureCache(path) as c:
                    edges_total = int(c.read_array("graphs/num_edges").sum())
                    report = truncation_report(c)
                return PrepareSummary(dataset_key, str(path), key, True, len(nn), int(nn.sum()), edges_total,
                                      path.stat().st_size, round(time.perf_counter() - t0, 3), params, report)
            except (CacheError, OSError, KeyError, ValueError, RuntimeError) as exc:
                problems = [str(exc).splitlines()[0] if str(exc) else type(exc).__name__]
        if log is not None:
            log(f"existing cache {path} is unusable ({problems[0]}); rebuilding it")
    ensure_writable_dir(path.parent)
    attrs = {"key": key, "dataset": dataset_key, "level": level, "fingerprint": fingerprint,
             "params": json.dumps(params, sort_keys=True)}
    ptrs: dict[str, int] = {}
    vptr: dict[str, list[int]] = {}
    comp_offset = 0
    total_edges = 0
    large_graphs = 0
    dropped = _DroppedMass()
    with CacheWriter(path, attrs) as w:
        w.append("graphs/node_ptr", np.zeros(1, dtype=np.int64))
        node_total = 0
        for done, r in iter_blocks(edges, nn, cfg, level, workers):
            w.append("graphs/num_nodes", r.num_nodes)
            w.append("graphs/num_edges", r.num_edges)
            w.append("graphs/large", r.large)
            large_graphs += int(np.count_nonzero(r.large))
            w.append("graphs/node_ptr", node_total + np.cumsum(r.num_nodes))
            node_total += int(r.num_nodes.sum())
            total_edges += int(r.num_edges.sum())
            w.append("nodes/component", r.component + comp_offset)
            comp_offset += int(r.component.max()) + 1 if r.component.size else 0
            if r.part is not None:
                w.append("nodes/part", r.part)
            for group, share in r.dropped.items():
                dropped.add(group, share)
            for group, arrs in r.pairs.items():
                if group not in ptrs:
                    ptrs[group] = 0
                    w.append(f"{group}/indptr", np.zeros(1, dtype=np.int64))
                w.append(f"{group}/indptr", ptrs[group] + np.cumsum(arrs["node_counts"]))
                ptrs[group] += int(arrs["node_counts"].sum())
                for k, v in arrs.items():
                    if k != "node_counts":
                        w.append(f"{group}/{k}", v)
            for group, e in r.eig.items():
                if group not in vptr:
                    vptr[group] = [0, 0]
                    w.append(f"{group}/val_ptr", np.zeros(1, dtype=np.int64))
                    w.append(f"{group}/vec_ptr", np.zeros(1, dtype=np.int64))
                w.append(f"{group}/val_ptr", vptr[group][0] + np.cumsum([v.shape[0] for v in e["vals"]]))
                w.append(f"{group}/vec_ptr", vptr[group][1] + np.cumsum([v.shape[0] for v in e["vecs"]]))
                vptr[group][0] += sum(v.shape[0] for v in e["vals"])
                vptr[group][1] += sum(v.shape[0] for v in e["vecs"])
                w.append(f"{group}/eigvals", np.concatenate(e["vals"]) if e["vals"] else np.zeros(0))
                w.append(f"{group}/eigvecs", np.concatenate(e["vecs"]))
                w.append(f"{group}/method", np.asarray(e["methods"], dtype="S16"))
            if progress is not None:
                progress(done, len(nn))
        truncation = json.dumps({"tau": cfg.large.tau, "topk": cfg.large.topk, "applies_to": "graphs/large",
                                 "rule": TRUNCATION_RULE})
        masses = {"powers": dropped.attrs("powers", cfg.powers.k)}
        w.set_attrs("powers", k=cfg.powers.k, normalization=cfg.powers.normalization, truncation=truncation,
                    dropped_mass=masses["powers"])
        if cfg.rrwp.enabled:
            masses["rrwp"] = dropped.attrs("rrwp", cfg.rrwp.steps + 1)
            w.set_attrs("rrwp", dropped_mass=masses["rrwp"])
        if cfg.spd.enabled:
            w.set_attrs("spd", max_distance=cfg.spd.max_distance, large_radius=min(cfg.spd.max_distance, cfg.large.spd_radius))
    # From the values just written: no second open of the file.
    report = _truncation_report(large_graphs, truncation, masses)
    return PrepareSummary(dataset_key, str(path), key, False, len(nn), int(nn.sum()), total_edges, path.stat().st_size,
                          round(time.perf_counter() - t0, 3), params, report)



def resolve_cache_dir(cli_value: str | os.PathLike | None) -> Path:
    """``--cache-dir`` > ``XMASK_CACHE`` > ``./cache``."""
    return Path(cli_value or os.environ.get("XMASK_CACHE") or "cache").expanduser()


def prepare_dataset(
    cfg: Config,
    *,
    data_root: str | os.PathLike | None = None,
    cache_dir: Path,
    workers: int = 1,
    force: bool = False,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
    progress: Callable[[int, int], None] | None = None,
) -> PrepareSummary:
    """Load ``cfg.data.dataset`` through its PyG/OGB loader and cache its structure."""
    from xmask_cli.data.load import load_graphs, resolve_data_root
    from xmask_cli.data.registry import get_dataset

    spec = get_dataset(cfg.data.dataset)
    if not Path(cache_dir).is_dir():  # an existing cache dir is not written to unless something is missing
        ensure_writable_dir(cache_dir)
    if spec.family == "images":  # one grid graph for every image: its geometry alone decides it
        from xmask_cli.data.images import image_info

        _, height, width = image_info(spec).shape
        return prepare_grid(dataset_key=spec.key, image_size=(height, width), patch=cfg.image.patch,
                            connectivity=cfg.image.connectivity, cfg=cfg.structure, cache_dir=cache_dir,
                            force=force, log=log)
    t0 = time.perf_counter()
    graphs = load_graphs(spec, data_root=resolve_data_root(data_root, cfg.data.root), cache_dir=cache_dir, offline=offline)
    log(f"loaded {spec.name}: {graphs.num_graphs} graph(s), {int(graphs.num_nodes.sum())} nodes from {graphs.source} "
        f"({time.perf_counter() - t0:.1f}s)")
    features = graphs.feature_info()
    log(f"node features: {features.detail}, width {features.dim}")
    summary = prepare_graphs(
        dataset_key=spec.key, level=spec.level, edges=graphs.edge_index, num_nodes=graphs.num_nodes,
        fingerprint=graphs.fingerprint(), cfg=cfg.structure, cache_dir=cache_dir, workers=workers,
        force=force, full_check=True, progress=progress, log=log,
    )
    summary.features = features.to_dict()
    return summary


def grid_fingerprint(image_size: tuple[int, int], patch: int, connectivity: int) -> tuple[str, list, np.ndarray]:
    """``(fingerprint, [edge_index], num_nodes)`` of the patch grid of ``image_size`` images.

    The fingerprint hashes the geometry (image size, patch, connectivity) with
    the grid's edges, so the cache key is one per (image size, patch size,
    connectivity, structure parameters such as K).

    Raises:
        ValueError: the patch does not divide the image (see :func:`~xmask_cli.structure.grid.patch_grid`).
    """
    import hashlib

    from xmask_cli.data.load import graphs_fingerprint
    from xmask_cli.structure.grid import grid_edges, patch_grid

    rows, cols = patch_grid(int(image_size[0]), int(image_size[1]), int(patch))
    edges = [grid_edges(rows, cols, int(connectivity))]
    nodes = np.asarray([rows * cols], dtype=np.int64)
    geometry = json.dumps({"image": [int(s) for s in image_size], "patch": int(patch),
                           "grid": [rows, cols], "connectivity": int(connectivity)}, sort_keys=True)
    return hashlib.sha256((geometry + graphs_fingerprint(edges, nodes)).encode()).hexdigest(), edges, nodes


def check_patch(dataset_key: str, image_size: tuple[int, int], patch: int) -> tuple[int, int]:
    """``(rows, cols)`` of the patch grid, or a :class:`UsageError` (exit 2) naming the patch sizes that fit."""
    from xmask_cli.errors import UsageError
    from xmask_cli.structure.grid import patch_grid

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
    cfg: StructureConfig,
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
