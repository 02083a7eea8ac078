"""Planning blocks of graphs (a large graph in row blocks: the file equals the whole-graph computation,
whatever the budget), and the worker processes: they die with prepare, a Ctrl-C waits for a safe point."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.prepare import compute_block, plan_blocks, prepare_graphs
from xmask_cli.prepare.blocks import plan_units

_CFG = ["structure.large.min_nodes=500", "structure.large.topk=10", "structure.large.tau=1e-4",
        "structure.powers.k=3", "structure.rrwp.enabled=true", "structure.rrwp.steps=3",
        "structure.partition.parts=4", "structure.spectrum.num_eigs=4", "structure.magnetic.enabled=true",
        "structure.magnetic.num_eigs=3"]


def _dataset():
    rng = np.random.default_rng(3)
    nn = np.array([30, 1500, 60])
    edges = [rng.integers(0, n, size=(2, 3 * n)) for n in nn]
    return edges, nn


def _read(path):
    out, attrs = {}, {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        for g in ("powers", "spd", "rrwp"):
            attrs[g] = dict(f[g].attrs)
    return out, attrs


def _prepare(tmp_path, name, memory_gb):
    edges, nn = _dataset()
    cfg = resolve("node-level", _CFG).structure
    return prepare_graphs(dataset_key="toy", level="node", edges=edges, num_nodes=nn, memory_gb=memory_gb,
                          fingerprint=graphs_fingerprint(edges, nn), cfg=cfg, cache_dir=tmp_path / name)


def test_row_blocks_write_the_same_file_as_one_block(tmp_path):
    edges, nn = _dataset()
    cfg = resolve("node-level", _CFG).structure
    tiny = 1e-4  # GB: the smallest blocks (256 rows)
    units = plan_units(edges, nn, cfg, tiny * (1 << 30))
    assert [u.kind for u in units] == ["small", "rows", "rows", "rows", "rows", "rows", "rows", "graph", "small"]
    a, b = _prepare(tmp_path, "blocks", tiny), _prepare(tmp_path, "whole", 64.0)
    got, got_attrs = _read(a.path)
    want, want_attrs = _read(b.path)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got_attrs == want_attrs
    assert a.truncation == b.truncation and a.truncation["large_graphs"] == 1

    # The large graph's pairs equal the whole-graph computation (compute_block on the graph alone).
    ref = compute_block([edges[1]], nn[1:2], cfg, True, "node", np.dtype(np.uint16))
    lo, hi = int(nn[0]), int(nn[0] + nn[1])
    for group, names in (("powers", ("col", "values")), ("spd", ("col", "dist")), ("rrwp", ("col", "values"))):
        ip = got[f"{group}/indptr"]
        np.testing.assert_array_equal(np.diff(ip[lo:hi + 1]), ref.pairs[group]["node_counts"])
        for k in names:
            np.testing.assert_array_equal(got[f"{group}/{k}"][ip[lo]:ip[hi]], ref.pairs[group][k], err_msg=group + k)
    # Dropped mass: the mean and max over the large graph's rows, from its whole share.
    for group in ("powers", "rrwp"):
        d = json.loads(got_attrs[group]["dropped_mass"])
        share = ref.dropped[group]
        assert d["rows"] == 1500
        np.testing.assert_array_equal(d["max"], share.max(axis=0))
        np.testing.assert_allclose(d["mean"], share.sum(axis=0) / 1500, rtol=1e-12)
    assert max(json.loads(got_attrs["powers"]["dropped_mass"])["max"]) > 0  # truncation did drop mass


def test_blocks_are_sized_for_the_walk_matrices_too():
    """A row block holds Â^1..Â^K and, when RRWP is stored, M^0..M^steps: with the walks on, the same budget
    gives rows_per_block's count for K + steps + 1 matrices, so more (smaller) blocks."""
    from xmask_cli.structure.rowblocks import rows_per_block

    edges, nn = _dataset()
    budget = 2e-3 * (1 << 30)
    with_walks = resolve("node-level", _CFG).structure
    without = resolve("node-level", [*_CFG, "structure.rrwp.enabled=false"]).structure
    deg = np.bincount(edges[1].ravel(), minlength=int(nn[1]))
    for cfg, held in ((with_walks, 3 + 3 + 1), (without, 3)):
        step = rows_per_block(deg, held, cfg.large.topk, budget)
        rows = [u for u in plan_units(edges, nn, cfg, budget) if u.kind == "rows"]
        assert len(rows) == -(-int(nn[1]) // step)
    assert len([u for u in plan_units(edges, nn, with_walks, budget) if u.kind == "rows"]) > \
        len([u for u in plan_units(edges, nn, without, budget) if u.kind == "rows"])


@pytest.mark.parametrize("seed", range(5))
def test_blocks_cover_every_graph_once_in_order(seed):
    rng = np.random.default_rng(seed)
    nn = rng.integers(0, 300, size=200)
    nn[rng.integers(0, 200, size=3)] = 6000  # a few large graphs among small ones
    blocks = plan_blocks(nn, large_min=5000, block_nodes=1000)
    flat = [g for s, e, _ in blocks for g in range(s, e)]
    assert flat == list(range(200))
    for s, e, large in blocks:
        if large:
            assert e == s + 1 and nn[s] > 5000  # a large graph always goes alone
        else:
            assert (nn[s:e] <= 5000).all()
            assert nn[s:e].sum() <= 1000 or e == s + 1  # only a single graph may exceed the budget


# --------------------------------------------- worker processes die with prepare
REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def dd_staged(tmp_path_factory, shared_data) -> Path:
    """DD's PyG files processed once: each test's prepare then starts its workers within seconds."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    cache = tmp_path_factory.mktemp("dd")
    load_graphs(get_dataset("DD"), data_root=shared_data, cache_dir=cache, offline=True)
    return cache / "_pyg"


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` has set SIGINT to ignored (/proc's SigIgn mask; signal 2 is bit 1)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return any(ln.startswith("SigIgn:") and int(ln.split(":")[1], 16) & 0b10 for ln in status.splitlines())


def _start_prepare(tmp_path: Path, shared_data: Path, staged: Path):
    """`xmask -q prepare DD --workers 2` in its own process group, once its two side processes (the pool
    worker and multiprocessing's resource tracker) have set themselves up: both ignore SIGINT by then
    (the worker's initializer, the tracker's main), so the worker is about to take or runs its task."""
    import os
    import shutil
    import subprocess
    import sys
    import time

    shutil.copytree(staged, tmp_path / "c" / "_pyg", symlinks=True)

    # PYTHONFAULTHANDLER: should the process die of a signal, its Python stacks are in the failure message.
    env = {**os.environ, "PYTHONPATH": str(REPO), "XMASK_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    # Ctrl-C's default disposition, as at a terminal: a shell's background job (CI runners, nohup)
    # starts with SIGINT ignored, which a child inherits and Python then never turns into KeyboardInterrupt.
    code = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from xmask_cli.cli import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "-q", "prepare", "DD", "--workers", "2", "--data-root",
                             str(shared_data), "--cache-dir", str(tmp_path / "c")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    # Generous: at a load average of 20 the spawned worker takes a minute to import numba and xmask.
    deadline = time.monotonic() + 300
    kids: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _children(proc.pid)
        if len(kids) >= 2 and all(_ignores_sigint(k) for k in kids):
            break
        time.sleep(0.1)
    if len(kids) < 2 or not all(_ignores_sigint(k) for k in kids):
        proc.kill()
        pytest.fail(f"prepare never set up its worker processes: {kids} {proc.communicate(timeout=30)}")
    return proc, kids


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def test_kill_9_of_prepare_takes_its_workers_along(tmp_path, shared_data, dd_staged):
    import os
    import signal

    proc, kids = _start_prepare(tmp_path, shared_data, dd_staged)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = _gone_within(kids, 20)
        assert not left, f"still running after the parent's kill -9: {left}"
    finally:
        for p in kids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_ctrl_c_of_prepare_is_one_line_exit_130_and_no_worker_left(tmp_path, shared_data, dd_staged):
    import os
    import signal

    proc, kids = _start_prepare(tmp_path, shared_data, dd_staged)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        # prepare answers at its next safe point, after the block in hand: with numba compiling it on a cold
        # cache, under load, that takes minutes.
        out, err = proc.communicate(timeout=300)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert proc.returncode == 130, err
        assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "prepare" in lines[0], err
        assert "Traceback" not in err + out
        assert not _gone_within(kids, 20)
        assert not list((tmp_path / "c").rglob("*.h5"))  # nothing under a real name
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in kids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _nap(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_stopping_the_pool_leaves_no_worker_and_no_pool_thread_behind():
    """After an interrupt the pool is wound down before the error is reported: a pool thread left
    running races interpreter exit (concurrent.futures' atexit hook then wrote a 15-line trace after
    the one error line under load)."""
    import multiprocessing as mp
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from xmask_cli.prepare import _stop_workers

    before = set(threading.enumerate())
    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
    fut = pool.submit(_nap, 60.0)
    procs = []
    for _ in range(600):  # wait until the worker runs the task
        procs = list(pool._processes.values())
        if procs and fut.running():
            break
        threading.Event().wait(0.05)
    _stop_workers(pool)
    assert all(not p.is_alive() for p in procs)
    assert set(threading.enumerate()) - before == set()  # the manager thread is gone too


@pytest.fixture
def sigint_default():
    """Python's own Ctrl-C handler for the test, whatever the runner started with (a shell's background
    job starts with SIGINT ignored)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_is_deferred_to_a_safe_point_and_a_second_one_raises_at_once(sigint_default):
    """Inside ``deferred_interrupt`` a Ctrl-C only sets a flag (so it never lands inside numba, LLVM or
    HDF5 code); ``check()`` raises it; a second Ctrl-C raises at once; the default handler comes back."""
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    ran_on = False
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt() as check:
            check()  # nothing pending: no-op
            os.kill(os.getpid(), signal.SIGINT)
            ran_on = sum(range(1000)) > 0  # Python ran its handler by now, and went on
            check()
    assert ran_on
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the second one raises here, not at a check
                pass
            pytest.fail("the second Ctrl-C did not raise")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_after_the_last_safe_point_is_raised_on_the_way_out(sigint_default):
    """A Ctrl-C that lands after the block's last ``check()`` must not be dropped when the block ends."""
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    after = False
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt() as check:
            check()
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # Python runs the handler: a flag, no exception here
        after = True
    assert not after
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with deferred_interrupt() as check:  # and a block without one ends quietly
        check()


def test_a_job_started_with_ctrl_c_ignored_keeps_ignoring_it(sigint_default):
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_interrupt() as check:
            os.kill(os.getpid(), signal.SIGINT)
            check()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_during_a_block_lets_it_finish_then_stops_before_the_next(tmp_path, monkeypatch, workers, sigint_default):
    """The interrupt arrives inside the main process's block computation (where numba runs): that
    block completes, no further block starts, KeyboardInterrupt reaches the caller, nothing is cached."""
    import os
    import signal

    from xmask_cli.prepare import blocks

    calls: list[tuple[int, bool]] = []
    real = blocks.compute_block

    def compute_block(edges, *args):
        first = not calls
        calls.append((len(edges), False))
        if first:
            os.kill(os.getpid(), signal.SIGINT)
        out = real(edges, *args)
        calls[-1] = (calls[-1][0], True)  # reached only if the interrupt did not land inside
        return out

    # This process's computation only: a side worker imports the module afresh.
    monkeypatch.setattr(blocks, "compute_block", compute_block)
    real_plan = blocks.plan_blocks
    monkeypatch.setattr(blocks, "plan_blocks", lambda nn, large_min: real_plan(nn, large_min, block_nodes=60))  # 3 blocks
    rng = np.random.default_rng(0)
    edges = [np.stack([rng.integers(0, 30, 60), rng.integers(0, 30, 60)]) for _ in range(6)]
    nn = np.full(6, 30)
    cfg = resolve("graph-level", []).structure
    with pytest.raises(KeyboardInterrupt):
        prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn, cfg=cfg, workers=workers,
                       fingerprint=graphs_fingerprint(edges, nn), cache_dir=tmp_path / "c")
    assert calls == [(calls[0][0], True)]  # one block (in this process), run to its end; none after it
    assert not list((tmp_path / "c").rglob("*.h5")) and not list((tmp_path / "c").rglob("*.tmp-*"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler



_START_CHILD = """
import json, os, signal, sys
from pathlib import Path
import numpy as np
signal.signal(signal.SIGINT, signal.default_int_handler)
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.prepare import blocks, prepare_graphs

seen = {}

class Pool(blocks.ProcessPoolExecutor):
    def submit(self, fn, /, *args, **kwargs):
        fut = super().submit(fn, *args, **kwargs)
        if not seen:  # the first worker was spawned just now: Ctrl-C at this moment
            (pid,) = self._processes
            status = Path(f"/proc/{pid}/status").read_text()
            masks = {k: int(v, 16) for k, v in (ln.split(":") for ln in status.splitlines() if ln[:6] in ("SigBlk", "SigIgn"))}
            seen.update(pid=pid, masks=masks)
            os.kill(os.getpid(), signal.SIGINT)
        return fut

blocks.ProcessPoolExecutor = Pool
rng = np.random.default_rng(0)
edges = [np.stack([rng.integers(0, 30, 60), rng.integers(0, 30, 60)]) for _ in range(6)]
nn = np.full(6, 30)
try:
    prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn, workers=2,
                   cfg=resolve("graph-level", []).structure, fingerprint=graphs_fingerprint(edges, nn),
                   cache_dir=Path(sys.argv[1]))
    seen["raised"] = False
except KeyboardInterrupt:
    seen["raised"] = True
print(json.dumps(seen))
"""


def test_a_ctrl_c_while_the_workers_start_is_not_lost(tmp_path):
    """A Ctrl-C that lands while the pool starts its workers still stops prepare: held until the pool has
    started, never dropped; the worker starts with SIGINT blocked (so one reaching it while it imports
    raises nothing there) and is gone afterwards. In a fresh interpreter, where the pool's start also
    starts multiprocessing's resource tracker (whose start restores the signal mask on its own)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _START_CHILD, str(tmp_path / "c")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    sigint = 1 << (2 - 1)  # bit of signal 2 in /proc's masks
    assert seen["raised"], "the Ctrl-C was dropped: prepare ran to its end"
    assert seen["masks"]["SigBlk"] & sigint or seen["masks"]["SigIgn"] & sigint, seen
    assert not _gone_within([seen["pid"]], 20)
    assert not list((tmp_path / "c").rglob("*.h5")) and not list((tmp_path / "c").rglob("*.tmp-*"))
