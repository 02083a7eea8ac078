"""Blocks of graphs, computed in this process or with side worker processes (spawned, killed with the parent)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import numpy as np

from xmask_cli.config import StructureConfig
from xmask_cli.prepare.compute import BlockResult, col_dtype, compute_block

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


def _wait(fut: Future, check: Callable[[], None]) -> Any:
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


def _run_block(args: tuple) -> BlockResult:
    return compute_block(*args)


def iter_blocks(edges: list[np.ndarray], nn: np.ndarray, cfg: StructureConfig, level: str, workers: int,
                check: Callable[[], None] = lambda: None) -> Iterator[tuple[int, BlockResult]]:
    """Yield ``(graphs_done, result)`` in graph order; ``check()`` (see :func:`deferred_interrupt`)
    runs between blocks and while waiting for a worker.

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
            check()
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
            check()
            r = _run_block((*t, ("pairs",)))
            other = _wait(fut, check)
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
