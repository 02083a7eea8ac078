"""Blocks of graphs, computed in this process or with side worker processes (spawned, killed with the parent)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmask_cli.config import StructureSection
from xmask_cli.prepare.compute import BlockResult, LargeGraph, col_dtype, compute_block
from xmask_cli.structure.rowblocks import rows_per_block

_BLOCK_NODES = 16384
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked in this thread for the block: held pending, never dropped, then delivered on the way out.

    Threads and processes started inside inherit the blocked mask (fork and exec keep it), so a Ctrl-C
    reaching a worker while it still imports never raises there (its initializer then ignores SIGINT).
    Ignoring SIGINT here instead would drop a Ctrl-C that lands while the pool starts. A no-op where the
    platform has no ``pthread_sigmask``.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Callable[[], None]]:
    """Ctrl-C becomes a flag that the yielded ``check()`` raises as KeyboardInterrupt at safe points.

    Why: Python raises KeyboardInterrupt at whatever bytecode the main thread runs, and here that is
    often numba's loader, LLVM or HDF5 glue between native calls; native state left half-built there
    crashed the process later (SIGSEGV, before the error line). Safe points are between blocks and
    while waiting for a worker; a second Ctrl-C raises at once. Only in the main thread, and only
    where SIGINT is handled (a job started with it ignored keeps ignoring it).
    """
    hits: list[int] = []

    def check() -> None:
        if hits:
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield check
        return

    def handler(signum: int, frame: Any) -> None:
        hits.append(signum)
        if len(hits) > 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    check()  # a Ctrl-C after the block's last safe point is raised on the way out, not dropped


def _wait(fut: Future[Any], check: Callable[[], None]) -> Any:
    """``fut.result()`` that still answers a deferred Ctrl-C while the worker computes."""
    while True:
        check()
        try:
            return fut.result(timeout=0.2)
        except TimeoutError:
            continue


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


def _run_block(args: tuple[Any, ...]) -> BlockResult:
    return compute_block(*args)


#: Default working-set budget of a large graph's row blocks (``prepare.memory_gb``).
DEFAULT_BUDGET = 2 << 30


@dataclass(frozen=True)
class Unit:
    """One piece of work, in writing order: a block of small graphs (``small``), rows ``start:stop`` of the
    large graph ``g`` (``rows``), or that graph's own arrays, spectra and partition (``graph``, after its rows)."""

    kind: str
    g: int  # first graph (small), the graph (rows, graph)
    stop: int  # graph stop (small, graph) or row stop (rows)
    start_row: int = 0

    @property
    def done(self) -> int:
        """Graphs complete once this unit is written."""
        return self.stop if self.kind != "rows" else self.g


def plan_units(edges: list[np.ndarray], nn: np.ndarray, cfg: StructureSection,
               budget_bytes: float = DEFAULT_BUDGET) -> list[Unit]:
    """The units of a dataset: small blocks whole, large graphs as row blocks under ``budget_bytes``.

    A function of the graphs and the parameters only, so every rank of a distributed prepare plans the same.
    """
    units: list[Unit] = []
    for s, e, large in plan_blocks(nn, cfg.large.min_nodes):
        if not large:
            units.append(Unit("small", s, e))
            continue
        n = int(nn[s])
        ei = np.asarray(edges[s]).reshape(2, -1)
        deg = np.bincount(ei.ravel(), minlength=n)[:n]  # an estimate (duplicates, loops): it sizes blocks only
        # Matrices a row block holds: Â^1..Â^K, and the walk matrices M^0..M^steps when RRWP is stored.
        held = cfg.powers.k + (cfg.rrwp.steps + 1 if cfg.rrwp.enabled else 0)
        step = rows_per_block(deg, held, cfg.large.topk, budget_bytes)
        units.extend(Unit("rows", s, min(n, r + step), r) for r in range(0, n, step))
        units.append(Unit("graph", s, e))
    return units


class UnitRunner:
    """Computes units one by one in this process, keeping the state of the large graph being worked on."""

    def __init__(self, edges: list[np.ndarray], nn: np.ndarray, cfg: StructureSection, level: str):
        self.edges, self.nn, self.cfg, self.level = edges, nn, cfg, level
        self.cdtype = col_dtype(nn)
        self._large: tuple[int, LargeGraph] | None = None

    def task(self, u: Unit) -> tuple[Any, ...]:
        """``compute_block`` arguments of a ``small`` or ``graph`` unit."""
        return (self.edges[u.g:u.stop], self.nn[u.g:u.stop], self.cfg, u.kind == "graph", self.level, self.cdtype)

    def rows(self, u: Unit) -> BlockResult:
        if self._large is None or self._large[0] != u.g:
            self._large = None  # one large graph's state at a time
            self._large = (u.g, LargeGraph(self.edges[u.g], int(self.nn[u.g]), self.cfg, self.cdtype))
        return self._large[1].rows(u.start_row, u.stop)

    def __call__(self, u: Unit, parts: tuple[str, ...] = ("pairs", "per-graph")) -> BlockResult:
        if u.kind == "rows":
            return self.rows(u)
        if u.kind == "graph":
            self._large = None
            return _run_block((*self.task(u), ("per-graph",)))
        return _run_block((*self.task(u), parts))


def iter_blocks(edges: list[np.ndarray], nn: np.ndarray, cfg: StructureSection, level: str, workers: int,
                check: Callable[[], None] = lambda: None,
                budget_bytes: float = DEFAULT_BUDGET) -> Iterator[tuple[int, BlockResult]]:
    """Yield ``(graphs_done, result)`` in writing order (see :class:`Unit`); ``check()`` (see
    :func:`deferred_interrupt`) runs between units and while waiting for a worker.

    With ``workers > 1``, ``workers - 1`` processes compute the per-graph
    results (spectra, partitions) of every block ahead, while this process
    computes the pair groups and the writer thread stores them: the large
    arrays never cross a process boundary, only the small ones do.
    """
    units = plan_units(edges, nn, cfg, budget_bytes)
    run = UnitRunner(edges, nn, cfg, level)
    if workers <= 1:
        for u in units:
            check()
            yield u.done, run(u)
        return
    import multiprocessing as mp

    import numba

    # spawn: forking a process that already started numba's threads can deadlock.
    threads = numba.get_num_threads()
    numba.set_num_threads(max(1, threads - (workers - 1)))  # the side workers take the other cores
    pool = None
    from multiprocessing import resource_tracker

    try:
        # Processes started now begin with Ctrl-C blocked (the mask survives exec), so one hitting a worker
        # still importing never prints a traceback; the parent alone reports it, once the pool has started.
        # The resource tracker first: starting it inside would unblock SIGINT (it restores with SIG_UNBLOCK).
        resource_tracker.ensure_running()
        with _sigint_held():
            pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=mp.get_context("spawn"),
                                       initializer=_worker_init, initargs=(os.getpid(),))
            side = {i: pool.submit(_run_block, (*run.task(u), ("per-graph",)))
                    for i, u in enumerate(units) if u.kind != "rows"}
        for i, u in enumerate(units):
            check()
            if u.kind == "rows":
                yield u.done, run.rows(u)
            elif u.kind == "graph":
                run._large = None
                yield u.done, _wait(side[i], check)
            else:
                r = run(u, ("pairs",))
                other = _wait(side[i], check)
                r.eig, r.part = other.eig, other.part
                yield u.done, r
    except BaseException:  # Ctrl-C, an error, or the consumer closing the generator early
        if pool is not None:
            _stop_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        numba.set_num_threads(threads)
