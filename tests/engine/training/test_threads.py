"""Thread counts chosen from the usable cores, the task level and the environment."""
from __future__ import annotations

import os

import numba
import pytest
import torch

from xmask_cli.engine.training.threads import ThreadPlan, apply_threads, choose_threads, usable_cores


def test_usable_cores_is_the_affinity_set() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_the_graph_level_computes_on_one_thread_whatever_the_cores(cores: int) -> None:
    plan = choose_threads("graph", cores, {})
    assert (plan.torch, plan.numba) == (1, 1)


@pytest.mark.parametrize("cores, local, want", [(16, None, 16), (16, "4", 4), (2, "4", 1), (7, "2", 3), (8, "x", 8)])
def test_other_levels_share_the_usable_cores_among_local_processes(cores: int, local: str | None, want: int) -> None:
    env = {} if local is None else {"LOCAL_WORLD_SIZE": local}
    for level in ("node", "link", "image"):
        plan = choose_threads(level, cores, env)
        assert (plan.torch, plan.numba) == (want, want), level


def test_an_explicit_count_wins_and_xmask_threads_before_omp() -> None:
    assert choose_threads("graph", 2, {"OMP_NUM_THREADS": "3"}).torch == 3
    assert choose_threads("node", 16, {"OMP_NUM_THREADS": "3", "XMASK_THREADS": "5"}).torch == 5
    # Not a positive integer: ignored, the level's own rule applies.
    assert choose_threads("node", 16, {"XMASK_THREADS": "0", "OMP_NUM_THREADS": "many"}).torch == 16
    assert "XMASK_THREADS=5" in choose_threads("node", 16, {"XMASK_THREADS": "5"}).reason


def test_apply_sets_torch_and_caps_numba_at_its_pool() -> None:
    before_torch, before_numba = torch.get_num_threads(), numba.get_num_threads()
    try:
        apply_threads(ThreadPlan(1, 1, "test"))
        assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
        pool = numba.config.NUMBA_NUM_THREADS
        apply_threads(ThreadPlan(1, pool + 5, "test"))
        assert numba.get_num_threads() == pool
    finally:
        torch.set_num_threads(before_torch)
        numba.set_num_threads(before_numba)



_POOL_PROBE = """
import json
import torch  # first, as xmask imports it: numba then shares its OpenMP runtime
import numba, numpy as np
from xmask_cli.engine.training.threads import ThreadPlan, apply_threads, launch_numba_pool

@numba.njit(parallel=True)
def total(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s

torch.ones(8).sum(); torch.get_num_threads()  # a process that has computed before its plan is applied
if MODE == "plan":
    apply_threads(ThreadPlan(1, 1, "probe"))
else:  # a library user's own count, read back as config.json records it
    torch.set_num_threads(1); torch.get_num_threads(); launch_numba_pool()
before = torch.get_num_threads()
total(np.ones(1000))  # the first parallel kernel of the process
print(json.dumps({"before_kernel": before, "after_kernel": torch.get_num_threads()}))
"""


@pytest.mark.parametrize("mode", ["plan", "library"])
def test_a_one_thread_count_survives_numbas_pool_starting(mode: str) -> None:
    """In a fresh process, a one-thread count holds after numba's first parallel kernel. With numba's OpenMP
    layer, a pool started after torch's count was set and read resets the shared runtime to every core."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "XMASK_THREADS", "NUMBA_NUM_THREADS")}
    code = f"MODE = {mode!r}\n" + _POOL_PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"before_kernel": 1, "after_kernel": 1}
