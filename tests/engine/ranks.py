"""Spawning gloo ranks for the data-parallel tests (``torch.multiprocessing.spawn``, a ``file://`` rendezvous)."""
from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

#: A run of ranks ends within this (the tests' take seconds; minutes at a load of 10 on 2 cores).
JOIN_SECONDS = 600


def spawn_ranks(main: Callable[..., None], payload: Any, tmp_path: Path, size: int = 2) -> Path:
    """Run ``main(rank, size, init_file, payload, out)`` on ``size`` ranks; returns ``out``, their output folder.

    Spawned again (at most twice) only if a rank dies of SIGABRT: on the loaded 2-core box a rank
    sometimes aborted inside gloo ("terminate called without an active exception", no Python frame of
    ours) before any result was written: 1 run in 8-20 one session, 0 in 40 standalone runs at load 8-15
    the next; CI once lost a whole run to it. It is logged (with the ranks' Python stacks when the caller
    sets PYTHONFAULTHANDLER) and noted in CHANGELOG.md. Any other failure, and any assertion
    on the results, is never retried.
    """
    attempts = 3
    for attempt in range(1, attempts + 1):
        out = tmp_path / f"attempt{attempt}"
        out.mkdir()  # the file:// rendezvous needs its folder
        try:
            _run(main, (size, str(out / "rendezvous"), payload, str(out / "ddp")), size)
        except mp.ProcessExitedException as exc:
            if attempt == attempts or exc.signal_name != signal.Signals.SIGABRT.name:
                raise
            print(f"rank {exc.error_index} died of {exc.signal_name} inside gloo; spawning again", file=sys.stderr)
            continue
        return out / "ddp"
    raise AssertionError("unreachable")


def _run(main: Callable[..., None], args: tuple[Any, ...], size: int) -> None:
    """``size`` processes of ``main(rank, *args)``, joined within :data:`JOIN_SECONDS`: a rank that hangs
    fails the test, naming the ranks still alive, instead of holding the whole suite until CI's limit."""
    ctx = mp.start_processes(main, args=args, nprocs=size, join=False, start_method="spawn")
    deadline = time.monotonic() + JOIN_SECONDS
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            alive = [rank for rank, proc in enumerate(ctx.processes) if proc.is_alive()]
            for proc in ctx.processes:
                proc.kill()
            raise AssertionError(f"ranks {alive} of {size} still running after {JOIN_SECONDS} s: killed")
