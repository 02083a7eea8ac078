#!/usr/bin/env python
"""Benchmark ``xmask prepare`` against a per-graph scipy pipeline that computes the same outputs.

A dataset is a registry name (``DD``), a folder of files (``./mygraph``,
docs/datasets-from-files.md: anything ``xmask prepare`` takes), or, with
``--sbm N``, growth.py's seeded stochastic-block-model graph of ``N`` nodes
(10 blocks, mean degree 10; ``growth.sbm`` and ``growth.write_folder``),
written as such a folder into the scratch dir first (not timed).

For every dataset the graphs are loaded once, in this (parent) process, through
the project's own loader (a folder through the folder loader, as
``xmask prepare <folder>``); that time is reported on its own and counts towards
neither side. The structure both sides compute is derived as ``xmask prepare``
derives it: the CLI's preset choice (``--preset``, default ``graph-level``,
``node-level`` for node datasets, ``computers`` for ``--sbm``; ``--set`` for
both sides), then ``structure_needed`` -- with ``prepare.compute: all`` (the
whole structure section) for a registry name and the config's default
``read`` (what the preset's model reads) for a folder, either changed by
``--set prepare.compute=...``. The two sides then run on the same graphs, each
run in a child process of its own (this script re-invoked with a hidden
``--_child`` flag, so that each child's peak resident memory is its own),
**alternating**: round 1 runs ours then the baseline, round 2 the baseline then
ours, and so on for ``--rounds`` rounds, so that load from other processes
falls on both alike:

* ours: ``xmask_cli.prepare.prepare_graphs(..., force=True)`` into a fresh
  cache dir, HDF5 writing included, with the row-block budget of
  ``prepare.memory_gb`` and ``--workers`` processes (default 1, as the CLI);
* baseline: ``scipy_baseline.baseline_all`` (beside this script): per graph,
  plain scipy / numpy calls computing what the cache stores -- the same
  powers with the same per-row cap on large graphs, the same shortest-path
  cut-off, the same components and the same number of eigenpairs -- and
  writing them to one ``.npz``. A structure holding a section it does not
  compute (partitions, magnetic, RRWP) is refused before anything runs.

**The outputs are asserted equal**: in round 1 the baseline child, after its
timed run, compares what it computed with the cache ours just wrote
(``scipy_baseline.check_equal``: the same sections stored as computed, the same
``K``; pairs and values of every power, every distance, components,
eigenvalues and eigenspaces per graph; the dropped mass). Any difference marks
the dataset ``outputs differ``, no speed-up is reported for it, and the script
exits with status 1.

Both children get the same thread settings: ``OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS``
= ``--threads`` (default 1) in their environment, and in-process
``threadpoolctl.threadpool_limits(--threads)`` (BLAS / OpenMP),
``numba.set_num_threads(--threads)`` and, where torch is loaded,
``torch.set_num_threads``; each child records what it saw. Each child warms up
on a 3-node graph first, once as it is and once under the large-graph rule
(numba, LAPACK, HDF5; not timed). The table gives the median seconds of each
side with the range over rounds, and the speed-up as the median of the
per-round ratios, with their range (the ratio of the medians is in the JSON).

Usage (from the repository root)::

    python benchmarks/prepare.py                          # DD, 5 rounds, one thread
    python benchmarks/prepare.py --datasets MUTAG,PROTEINS,DD --rounds 3
    python benchmarks/prepare.py --datasets Cora --preset node-level --set prepare.compute=read --rounds 3
    python benchmarks/prepare.py --datasets ./mygraph --preset computers --rounds 3   # a folder dataset
    python benchmarks/prepare.py --sbm 20k --rounds 1                                 # quick check
    python benchmarks/prepare.py --sbm 320k --rounds 5    # the 320k SBM target (computers preset)

Prints a markdown table and writes JSON to ``benchmarks/out/prepare.json``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:  # scipy_baseline.py, beside this script
    sys.path.insert(0, str(HERE))
DEFAULT_DATASETS = ("DD",)
#: Raw datasets (read-only is fine: the loader stages them under the scratch dir).
DEFAULT_DATA_ROOT = Path(os.environ.get("XMASK_DATA_ROOT") or REPO.parent / "shared" / "datasets")
#: Thread-count variables set for both children.
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
#: Targets (speed-up = baseline median / ours median, one worker, one thread).
SPEEDUP_TARGETS = {"DD": 3.0, "sbm-320k": 5.0}
POLL_S = 0.1


# ----------------------------------------------------------------- memory
def _maxrss_mb(who: int) -> float:
    """``ru_maxrss`` in MiB (Linux reports KiB, macOS bytes)."""
    v = resource.getrusage(who).ru_maxrss
    return v / (1024.0 * 1024.0) if sys.platform == "darwin" else v / 1024.0


def _peak_rss_self_mb() -> float:
    """This process's peak RSS in MiB.

    Linux: ``VmHWM`` of /proc/self/status, the high-water mark of this process's
    own address space. Not ``ru_maxrss``: Linux carries that over ``execve``, so
    a child started from this (torch-loaded) parent would report the parent's
    RSS at fork time as its own peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return _maxrss_mb(resource.RUSAGE_SELF)


def _current_rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


# ----------------------------------------------------------------- children
def _read_input(path: Path) -> tuple[list, Any, str, dict]:
    import numpy as np

    z = np.load(path, allow_pickle=False)
    ei = z["edge_index"]
    bounds = np.concatenate([[0], np.cumsum(z["edge_counts"])])
    edges = [ei[:, a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    meta = json.loads(str(z["meta"]))
    return edges, z["num_nodes"].astype(np.int64), meta["fingerprint"], meta


def set_threads(n: int) -> dict[str, Any]:
    """The same thread limits in either child: BLAS / OpenMP pools, numba, torch (if loaded); returns what is set."""
    import numba
    from threadpoolctl import threadpool_info, threadpool_limits

    numba.set_num_threads(n)  # first: it starts numba's threading layer (libgomp), which the limits then cover
    threadpool_limits(n)
    seen: dict[str, Any] = {"numba": numba.get_num_threads(),
                            "threadpools": sorted({f"{p['internal_api']}={p['num_threads']}" for p in threadpool_info()})}
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(n)
        seen["torch"] = torch.get_num_threads()
    return seen


def _config(meta: dict[str, Any]) -> Any:
    from xmask_cli.config_resolve import resolve

    return resolve(meta["preset"], list(meta.get("overrides", [])))


def _structure(meta: dict[str, Any]) -> Any:
    """The structure ``xmask prepare`` computes for the run's config: ``structure_needed`` (``prepare.compute``:
    ``read``, only what the preset's model reads; ``all``, the whole section), at the level prepare uses."""
    from xmask_cli.prepare.needs import structure_needed

    return structure_needed(_config(meta), meta.get("structure_level") or meta["level"])


def _warmups(s: Any) -> list[tuple[list, Any, Any]]:
    """Untimed warm-up runs: a 3-node path with the structure ``s``, and again under the large-graph rule
    (``large.min_nodes`` 2), so that the row-block and truncation code is loaded before the timed run too."""
    import dataclasses

    import numpy as np

    edges, nn = [np.array([[0, 1], [1, 2]])], np.array([3])
    large = dataclasses.replace(s, large=dataclasses.replace(s.large, min_nodes=2))
    return [(edges, nn, s), (edges, nn, large)]


def child_ours(inp: Path, work: Path, workers: int, threads: int) -> dict[str, Any]:
    """One timed ``prepare_graphs`` into ``work/cache`` (kept: round 1's baseline compares against it)."""
    from xmask_cli.prepare import prepare_graphs

    seen = set_threads(threads)
    edges, nn, fp, meta = _read_input(inp)
    cfg = _structure(meta)
    memory_gb = _config(meta).prepare.memory_gb  # the row-block budget `xmask prepare` gives a large graph

    def run(e, n, f, s, cache_dir):
        return prepare_graphs(dataset_key=meta["key"], level=meta["level"], edges=e, num_nodes=n, fingerprint=f,
                              cfg=s, cache_dir=cache_dir, workers=workers, memory_gb=memory_gb, force=True,
                              full_check=True)

    for e, n, s in _warmups(cfg):  # not timed
        run(e, n, "warmup", s, work / "warmup")
    seen = {**seen, **set_threads(threads)}  # prepare restores numba's count; make sure it is ours
    base_rss = _current_rss_mb()
    t = time.perf_counter()
    summary = run(edges, nn, fp, cfg, work / "cache")
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "baseline_rss_mb": base_rss, "cache_bytes": summary.size_bytes,
            "cache_path": summary.path, "edges": summary.edges, "preset": meta["preset"], "workers": workers,
            "threads_seen": seen}


def child_baseline(inp: Path, work: Path, threads: int, check_against: str | None) -> dict[str, Any]:
    """One timed per-graph scipy run writing ``work/baseline.npz``; then (not timed) the equality check."""
    import scipy_baseline as B

    seen = set_threads(threads)
    edges, nn, _, meta = _read_input(inp)
    cfg = _structure(meta)
    for e, n, s in _warmups(cfg):  # not timed
        B.baseline_all(e, n, s)
    base_rss = _current_rss_mb()
    t = time.perf_counter()
    results = B.baseline_all(edges, nn, cfg)
    B.save(results, str(work / "baseline.npz"))
    seconds = time.perf_counter() - t
    out: dict[str, Any] = {"seconds": seconds, "baseline_rss_mb": base_rss,
                           "output_bytes": (work / "baseline.npz").stat().st_size, "threads_seen": seen}
    (work / "baseline.npz").unlink()
    # The peak of the timed work: the equality check below loads the whole cache, which is not the baseline's.
    out["peak_rss_self_mb"] = _peak_rss_self_mb()
    if check_against:
        t = time.perf_counter()
        out["check"] = {"cache": check_against, "problems": B.check_equal(results, check_against),
                        "graphs": len(results), "seconds": time.perf_counter() - t,
                        "peak_rss_with_check_mb": _peak_rss_self_mb()}
    return out


def run_child(args: argparse.Namespace) -> int:
    inp, out = Path(args._input), Path(args._result)
    if args._child == "ours":
        res = child_ours(inp, Path(args._work), args.workers, args.threads)
    else:
        res = child_baseline(inp, Path(args._work), args.threads, args._check)
    res.setdefault("peak_rss_self_mb", _peak_rss_self_mb())
    # ru_maxrss of the largest finished pool worker (workers > 1); an upper bound,
    # since it can include this child's RSS when the worker was forked.
    res["peak_rss_children_mb"] = _maxrss_mb(resource.RUSAGE_CHILDREN)
    out.write_text(json.dumps(res))
    return 0


# ----------------------------------------------------------------- parent
def _tree_rss_mb(proc) -> float:
    """Summed RSS of a process and its descendants (psutil), 0 when it is gone."""
    import psutil

    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def spawn(kind: str, inp: Path, work: Path, args: argparse.Namespace, env: dict[str, str], timeout: float | None,
          check_against: str | None = None) -> dict[str, Any]:
    """Run one side in a child process; return its report plus status and sampled tree peak."""
    work.mkdir(parents=True, exist_ok=True)
    result = work / f"{kind}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", kind, "--_input", str(inp),
           "--_result", str(result), "--_work", str(work), "--workers", str(args.workers),
           "--threads", str(args.threads)]
    if check_against:
        cmd += ["--_check", check_against]
    try:
        import psutil
    except ImportError:  # sampling is optional; the child's own VmHWM is always there
        psutil = None
    t0 = time.perf_counter()
    # Own session, so that a timeout can kill the child and any pool workers it started, as one group.
    err_path = work / f"{kind}.stderr"
    with open(err_path, "w") as err:  # a file, not a pipe: a chatty child must never block on a full pipe
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=err)
    ps = psutil.Process(proc.pid) if psutil else None
    tree_peak = 0.0
    status = "ok"
    try:
        while proc.poll() is None:
            if ps is not None:
                tree_peak = max(tree_peak, _tree_rss_mb(ps))
            if timeout is not None and time.perf_counter() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                killed_at = time.time()
                proc.wait()
                status = "timeout"
                break
            time.sleep(POLL_S)
    except BaseException:  # Ctrl-C: the child is in its own session and would outlive us
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    wall = time.perf_counter() - t0
    stderr = err_path.read_text(errors="replace")
    out: dict[str, Any] = {"status": status, "wall_seconds": wall, "tree_peak_sampled_mb": tree_peak or None}
    if status == "ok" and proc.returncode != 0:
        out["status"] = "oom-killed" if proc.returncode == -signal.SIGKILL else f"failed (rc {proc.returncode})"
        if "MemoryError" in stderr:
            out["status"] = "MemoryError"
        out["stderr_tail"] = stderr[-2000:]
    if out["status"] == "ok":
        out.update(json.loads(result.read_text()))
        # Peak reported: the child's own VmHWM (read before the baseline's untimed equality check), or, for
        # ours with --workers > 1, the sampled sum over it and its pool workers when larger. The sampler runs
        # for the child's whole life, so it is not used where there is no pool.
        pooled = kind == "ours" and args.workers > 1
        out["peak_mb"] = max(out["peak_rss_self_mb"], tree_peak) if pooled else out["peak_rss_self_mb"]
    elif status == "timeout":
        out["seconds"] = None
        out["killed_after_seconds"] = killed_at - t0
    return out


def derive_config(name: str, spec: Any, preset: str | None, overrides: list[str] | None) -> dict[str, Any]:
    """What the children compute for a dataset, derived as ``xmask prepare`` derives it; returns meta fields.

    The preset and overrides go through the CLI's ``choose_preset`` (which sets ``data.dataset``), then
    ``structure_needed`` at the level prepare uses. ``prepare.compute`` defaults to ``all`` for a registry name
    (the whole structure section) and to the config's own default, ``read``, for a folder (what
    ``xmask prepare <folder>`` computes); ``--set prepare.compute=...`` decides otherwise.
    """
    from xmask_cli.api import choose_preset
    from xmask_cli.config_resolve import resolve
    from xmask_cli.data.folder import is_folder_ref
    from xmask_cli.prepare.graphs import structure_params
    from xmask_cli.prepare.needs import structure_needed

    preset = preset or ("node-level" if spec.level == "node" else "graph-level")
    default = [] if is_folder_ref(name) else ["prepare.compute=all"]
    preset, ovs = choose_preset(preset, name, [*default, *(overrides or [])])
    cfg = resolve(preset, ovs)
    level = cfg.task.level if cfg.task.level != "auto" else spec.level
    structure = structure_needed(cfg, level)
    return {"preset": preset, "overrides": ovs, "structure_level": level, "compute": cfg.prepare.compute,
            "memory_gb": cfg.prepare.memory_gb, "structure": structure_params(structure, spec.level),
            "_structure": structure}


def load(name: str, data_root: Path, staging: Path, preset: str | None = None,
         overrides: list[str] | None = None, check_baseline: bool = True) -> tuple[Any, Path, dict[str, Any]]:
    """Load a dataset (a registry name or a folder path, as ``xmask prepare`` takes them) once, write its graphs
    for the children; returns (spec, input file, info).

    Raises:
        ValueError: ``check_baseline`` and the structure holds a section the baseline does not compute.
    """
    import numpy as np
    import scipy_baseline as B

    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    spec = get_dataset(name)
    derived = derive_config(name, spec, preset, overrides)
    structure = derived.pop("_structure")
    missing = B.unsupported(structure, spec.level)
    if check_baseline and missing:
        raise ValueError(f"the baseline does not compute {', '.join(missing)}, which this structure holds; "
                         f"leave it out (e.g. --set structure.partition.parts=0) or pass --skip-baseline")
    t = time.perf_counter()
    gs = load_graphs(spec, data_root=data_root, cache_dir=staging, offline=True)
    fp = gs.fingerprint()
    seconds = time.perf_counter() - t
    meta = {"fingerprint": fp, "key": spec.key, "level": spec.level, **derived}
    staging.mkdir(parents=True, exist_ok=True)  # a folder dataset is read in place: nothing staged there yet
    inp = staging / f"{spec.key}.npz"
    np.savez(inp, edge_index=np.concatenate(gs.edge_index, axis=1) if gs.edge_index else np.zeros((2, 0), np.int64),
             edge_counts=np.asarray([e.shape[1] for e in gs.edge_index], dtype=np.int64),
             num_nodes=gs.num_nodes, meta=np.asarray(json.dumps(meta)))
    nn = gs.num_nodes
    info = {"dataset": spec.name, "level": spec.level, **derived, "graphs": int(len(nn)),
            "nodes": int(nn.sum()), "max_nodes": int(nn.max()) if len(nn) else 0,
            "stored_edges": int(sum(e.shape[1] for e in gs.edge_index)), "load_seconds": seconds,
            "source": str(gs.source)}
    del gs
    return spec, inp, info


def make_sbm(size: str, folder: Path, seed: int) -> dict[str, Any]:
    """Write growth.py's seeded SBM graph of ``size`` nodes (``20k``, ``320k``) as a node-dataset folder."""
    from growth import parse_size, sbm, write_folder  # beside this script

    n = parse_size(size)
    t = time.perf_counter()
    src, dst, x, y = sbm(n, seed=seed)
    write_folder(folder, src, dst, x, y)
    return {"sbm": {"nodes": n, "edges": int(len(src)), "seed": seed, "generate_seconds": time.perf_counter() - t}}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _sources_digest() -> dict[str, Any]:
    """sha256 over xmask_cli's .py files and the presets, and the newest mtime: ties the figures to a code state."""
    import hashlib

    h = hashlib.sha256()
    newest = 0.0
    files = sorted([*(REPO / "xmask_cli").rglob("*.py"), *(REPO / "presets").glob("*.yaml")])
    for f in files:
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
        newest = max(newest, f.stat().st_mtime)
    return {"sha256": h.hexdigest()[:16], "files": len(files),
            "newest_mtime": _dt.datetime.fromtimestamp(newest).astimezone().isoformat(timespec="seconds")}


def environment(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import importlib.metadata as md

    vers = {}
    for pkg in ("xmask", "numpy", "scipy", "networkx", "numba", "h5py", "torch", "torch_geometric", "pymetis", "psutil"):
        try:
            vers[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            vers[pkg] = None
    blas = {}
    try:
        import numpy as np
        import scipy

        for mod in (np, scipy):
            cfg = mod.show_config(mode="dicts")
            b = cfg.get("Build Dependencies", {}).get("blas", {})
            blas[mod.__name__] = f"{b.get('name')} {b.get('version')}"
    except Exception:  # show_config(mode=...) needs numpy >= 1.25 / scipy >= 1.11
        pass
    mem_gb = None
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    return {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "host": platform.node(),
            "machine": platform.machine(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "memory_gb": round(mem_gb, 1) if mem_gb else None, "python": platform.python_version(),
            "versions": vers, "blas": blas, "xmask_sources": _sources_digest(), "thread_env": {k: env.get(k) for k in THREAD_ENV},
            "load_average_start": _loadavg(), "workers": args.workers, "threads": args.threads,
            "rounds": args.rounds, "timeout_s": args.timeout,
            "command": " ".join([Path(sys.executable).name, *sys.argv])}


def summarize(times: list[float]) -> dict[str, Any]:
    """Median and range of one side's rounds."""
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": times}


def speedup(row: dict[str, Any]) -> dict[str, Any] | None:
    """The median of the per-round ratios baseline / ours (a round pairs the two sides under one load) and their
    range; the ratio of the two medians beside it. None unless both sides ran every round and the outputs were
    found equal."""
    ours, base = row.get("ours_runs") or [], row.get("baseline_runs") or []
    if not ours or len(ours) != len(base) or row.get("outputs") != "equal":
        return None
    if any(r["status"] != "ok" for r in ours + base):
        return None
    o, b = [r["seconds"] for r in ours], [r["seconds"] for r in base]
    ratios = [y / x for x, y in zip(o, b)]
    return {"ratio": statistics.median(ratios), "ratio_of_medians": statistics.median(b) / statistics.median(o),
            "round_min": min(ratios), "round_max": max(ratios), "round_ratios": ratios}


def verdict(row: dict[str, Any], s: dict[str, Any] | None) -> str:
    if row.get("outputs") not in (None, "equal"):
        return f"FAIL ({row['outputs']})"
    need = SPEEDUP_TARGETS.get(row["dataset"])
    if need is None:
        return ""
    if s is None:
        return "?"
    return f"{'pass' if s['ratio'] >= need else 'FAIL'} (>= {need:g}x)"


def _side(runs: list[dict[str, Any]]) -> tuple[str, str]:
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        return (runs[0]["status"] if runs else "not run"), "-"
    t = summarize([r["seconds"] for r in ok])
    bad = "" if len(ok) == len(runs) else f" ({len(runs) - len(ok)} failed)"
    return (f"{t['median_s']:.2f} ({t['min_s']:.2f}-{t['max_s']:.2f}){bad}",
            f"{max(r['peak_mb'] for r in ok):.0f}")


def table(rows: list[dict[str, Any]]) -> str:
    head = ["dataset", "graphs", "nodes", "rounds", "ours s median (range)", "ours peak MB",
            "baseline s median (range)", "baseline peak MB", "outputs", "speed-up (per-round range)", "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['dataset']} | " + " | ".join(["-"] * (len(head) - 2)) + f" | load failed: {r['error']} |")
            continue
        s = speedup(r)
        (os_, op), (bs, bp) = _side(r.get("ours_runs", [])), _side(r.get("baseline_runs", []))
        sp = f"{s['ratio']:.2f}x ({s['round_min']:.2f}-{s['round_max']:.2f}x)" if s else "-"
        lines.append("| " + " | ".join([r["dataset"], str(r["graphs"]), str(r["nodes"]), str(len(r.get("ours_runs", []))),
                                        os_, op, bs, bp, r.get("outputs") or "not checked", sp, verdict(r, s)]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=None,
                   help="comma-separated registry names or folder paths (./mygraph: a folder of files, as "
                        f"`xmask prepare` takes it) (default: {','.join(DEFAULT_DATASETS)} unless --sbm is given)")
    p.add_argument("--sbm", default=None, metavar="N[,N...]",
                   help="also generate growth.py's seeded SBM graph of N nodes (20k, 320k) as a folder in the "
                        "scratch dir and benchmark it (preset computers unless --preset)")
    p.add_argument("--sbm-seed", type=int, default=0, help="seed of the SBM graphs (default: %(default)s, as growth.py)")
    p.add_argument("--preset", default=None,
                   help="whose structure section to compute (default: graph-level, node-level for node datasets, "
                        "computers for --sbm)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override the preset for both sides, e.g. --set structure.spectrum.enabled=false; "
                        "--set prepare.compute=read|all (default: all for registry names, read for folders)")
    p.add_argument("--workers", type=int, default=1, help="worker processes for ours (default: 1, as the CLI)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for both sides: BLAS / OpenMP, numba, torch (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds, one run of each side each (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=None, help="seconds before a child is killed (default: none)")
    p.add_argument("--skip-baseline", action="store_true", help="time ours only")
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT, help="raw datasets (default: %(default)s)")
    p.add_argument("--tmp-dir", type=Path, default=None, help="where the scratch dir (staging, caches) goes (default: system temp)")
    p.add_argument("--out", type=Path, default=HERE / "out" / "prepare.json", help="JSON results (default: benchmarks/out/prepare.json)")
    p.add_argument("--_child", choices=("ours", "baseline"), help=argparse.SUPPRESS)
    p.add_argument("--_input", help=argparse.SUPPRESS)
    p.add_argument("--_result", help=argparse.SUPPRESS)
    p.add_argument("--_work", help=argparse.SUPPRESS)
    p.add_argument("--_check", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        return run_child(args)

    sizes = [t.strip() for t in (args.sbm or "").split(",") if t.strip()]
    names = [n.strip() for n in (args.datasets or ("" if sizes else ",".join(DEFAULT_DATASETS))).split(",") if n.strip()]
    # (name or folder, SBM size or None)
    entries: list[tuple[str, str | None]] = [(n, None) for n in names] + [(f"sbm-{t}", t) for t in sizes]
    env = dict(os.environ)
    for k in THREAD_ENV:
        env[k] = str(args.threads)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    meta = environment(args, env)
    print(f"# prepare benchmark: {meta['date']}, {meta['cpu_count']} CPUs, {meta['memory_gb']} GB, "
          f"workers {args.workers}, threads {args.threads}, {args.rounds} rounds, load {meta['load_average_start']}",
          file=sys.stderr)

    def save(rows: list[dict[str, Any]]) -> str:
        meta["load_average_end"] = _loadavg()
        md = table(rows)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps({"environment": meta, "results": rows, "table": md}, indent=2) + "\n")
        os.replace(tmp, args.out)
        return md

    scratch = Path(tempfile.mkdtemp(prefix="xmask-bench-", dir=args.tmp_dir))
    rows: list[dict[str, Any]] = []
    status = 0
    try:
        for i, (name, size) in enumerate(entries):
            work = scratch / f"d{i}"  # not the name: a folder dataset's name is a path
            work.mkdir()
            label = name
            try:
                generated: dict[str, Any] = {}
                preset = args.preset
                if size is not None:
                    from growth import parse_size, size_label

                    name = f"sbm-{size_label(parse_size(size))}"
                    folder = work / "graph" / name  # the folder's name is the dataset's name
                    generated = make_sbm(size, folder, args.sbm_seed)
                    print(f"# {name}: generated {generated['sbm']['nodes']:,} nodes, {generated['sbm']['edges']:,} "
                          f"edges in {generated['sbm']['generate_seconds']:.1f}s", file=sys.stderr)
                    name, preset = str(folder), preset or "computers"
                spec, inp, info = load(name, args.data_root, work / "staging", preset, args.set,
                                       check_baseline=not args.skip_baseline)
                info.update(generated)
            except Exception as exc:  # a missing or broken dataset must not cost the others
                msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                print(f"# {label}: load failed: {msg}", file=sys.stderr)
                rows.append({"dataset": label, "error": msg})
                continue
            print(f"# {spec.name}: {info['graphs']} graph(s), {info['nodes']} nodes, loaded in {info['load_seconds']:.1f}s",
                  file=sys.stderr)
            row = dict(info, ours_runs=[], baseline_runs=[], outputs=None)
            check_cache: str | None = None
            check_dir: Path | None = None
            for rnd in range(args.rounds):
                order = ("ours", "baseline") if rnd % 2 == 0 else ("baseline", "ours")
                for kind in order:
                    if kind == "baseline" and args.skip_baseline:
                        continue
                    d = work / f"{kind}-{rnd}"
                    r = spawn(kind, inp, d, args, env, args.timeout,
                              check_against=check_cache if kind == "baseline" and row["outputs"] is None else None)
                    r["round"] = rnd
                    if kind == "ours" and r["status"] == "ok" and check_cache is None:
                        check_cache, check_dir = r["cache_path"], d  # kept until the baseline has compared against it
                    elif kind == "ours":
                        shutil.rmtree(d, ignore_errors=True)
                    if "check" in r:
                        probs = r["check"]["problems"]
                        row["outputs"] = "equal" if not probs else f"{len(probs)} differences"
                        row["check"] = r.pop("check")
                        for line in probs[:10]:
                            print(f"#   differs: {line}", file=sys.stderr)
                        if probs:
                            status = 1
                    row[f"{kind}_runs"].append(r)
                    shown = f"{r['seconds']:.2f} s" if r.get("seconds") else r["status"]
                    print(f"#   round {rnd + 1} {kind}: {shown}, peak {r.get('peak_mb', 0):.0f} MB"
                          + (f", outputs {row['outputs']}" if kind == "baseline" and rnd == 0 else ""), file=sys.stderr)
                    if r["status"] not in ("ok", "timeout"):
                        print(f"#   {r['status']}: {r.get('stderr_tail', '')[-800:]}", file=sys.stderr)
                if rnd == 0 and check_dir is not None:
                    shutil.rmtree(check_dir, ignore_errors=True)
            for kind in ("ours", "baseline"):
                if row[f"{kind}_runs"]:
                    ok = [r["seconds"] for r in row[f"{kind}_runs"] if r["status"] == "ok"]
                    row[kind] = summarize(ok) if ok else None
            s = speedup(row)
            row["speedup"] = s
            row["target"] = verdict(row, s)
            rows.append(row)
            save(rows)  # after every dataset, so a long run that dies keeps what it measured
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    md = save(rows)
    print(md)
    print(f"# wrote {args.out}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
