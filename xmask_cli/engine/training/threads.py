"""How many threads a training process computes with: chosen once, from the cores it may use, where training starts.

PyTorch's default is one intra-op thread per physical core of the machine,
whatever the process may use (``taskset``, a container's CPU set) and whatever
else runs there. On a shared machine that oversubscribes the cores, and every
parallel region ends at a barrier that waits for its slowest thread: a thread
descheduled by another job stalls the others. Graph-level batches make many
small operations (molecules of 25 atoms: matrix products of a few MFLOP), so
the barriers are frequent and the work between them short; a MUTAG epoch was
measured 10-70x slower on two loaded cores instead of the 2-3x a fair share
would give. So:

* the graph level computes on one thread per process (its parallelism is
  coarse: several processes under ``torchrun``, one per core);
* the other levels (whole graphs, large matrix products) take the cores the
  process may use (``os.sched_getaffinity``), divided among the processes
  ``torchrun`` starts on the machine (``LOCAL_WORLD_SIZE``);
* ``XMASK_THREADS`` (or, failing it, ``OMP_NUM_THREADS``) set to a positive
  integer overrides both: the user's count is taken as is.

numba's compiled kernels (the sparse attention, prepare's products) take the
same count, capped at the pool numba started with.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ThreadPlan", "choose_threads", "usable_cores", "apply_threads", "launch_numba_pool", "SMALL_OP_LEVELS"]

#: Task levels whose steps are many small operations: one thread per process.
SMALL_OP_LEVELS = frozenset({"graph"})
#: Variables that fix the count, in order of precedence.
THREAD_VARS = ("XMASK_THREADS", "OMP_NUM_THREADS")


@dataclass(frozen=True)
class ThreadPlan:
    """Thread counts of one process and why they were chosen (``reason``)."""

    torch: int
    numba: int
    reason: str


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; the machine's count where affinity is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _explicit(env: Mapping[str, str]) -> tuple[str, int] | None:
    """The first thread variable set to a positive integer, and its value."""
    for var in THREAD_VARS:
        text = env.get(var, "").strip()
        if text.isdigit() and int(text) > 0:
            return var, int(text)
    return None


def choose_threads(level: str, cores: int, env: Mapping[str, str]) -> ThreadPlan:
    """The thread counts of a process training task level ``level`` on ``cores`` usable cores.

    ``env``: the environment (``XMASK_THREADS``, ``OMP_NUM_THREADS``, torchrun's ``LOCAL_WORLD_SIZE``).
    """
    explicit = _explicit(env)
    if explicit is not None:
        var, n = explicit
        return ThreadPlan(n, n, f"{var}={n}")
    if level in SMALL_OP_LEVELS:
        return ThreadPlan(1, 1, f"{level} level: small operations, one thread per process")
    local = env.get("LOCAL_WORLD_SIZE", "").strip()
    procs = int(local) if local.isdigit() and int(local) > 0 else 1
    share = max(1, cores // procs)
    return ThreadPlan(share, share, f"{cores} usable cores / {procs} process(es)")


def launch_numba_pool() -> None:
    """Start numba's thread pool now, keeping torch's intra-op thread count.

    With numba's OpenMP layer both libraries share one OpenMP runtime, and the pool's start (numba's first
    ``set_num_threads`` or parallel kernel) resets the runtime's thread count to numba's pool size: torch
    set to one thread would silently compute on all of them from that moment. Started here, where the
    count is chosen, the pool cannot change it later in the run."""
    import numba
    import torch

    before = torch.get_num_threads()
    numba.set_num_threads(numba.get_num_threads())  # starts the pool if it has not started
    torch.set_num_threads(before)


def apply_threads(plan: ThreadPlan) -> None:
    """Set torch's intra-op and numba's thread counts to ``plan``'s (numba capped at its pool)."""
    import numba
    import torch

    launch_numba_pool()  # first: its start would undo torch's count (see launch_numba_pool)
    numba.set_num_threads(max(1, min(plan.numba, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    torch.set_num_threads(plan.torch)
