#!/usr/bin/env python
"""``xmask prepare`` on graphs with hubs against random graphs of the same size: time and peak memory.

Each hub graph is paired with a random graph of the same numbers of nodes and (distinct, undirected) edges:

* ``star50k``, ``star200k``: one hub joined to 50,000 / 200,000 leaves;
* ``chunglu200k``: a seeded Chung–Lu power-law graph, 200,000 nodes, expected degrees ``∝ (i + i0)^(-1/(γ-1))``
  with γ = 2.5 and mean 10 (edge draws with endpoints chosen in proportion to the weights; loops and repeats
  dropped), whose largest degrees run into the thousands;
* the twin: uniform random node pairs (seeded), loops and repeats dropped, drawn until it has as many edges.

Every graph is written as a node dataset folder (``edges.npz`` with ``src`` / ``dst``, ``features.npy``
float32 ``[n, 8]``, ``labels.npy`` ``[n]``) and prepared by
``xmask --format json prepare <folder> --force --workers 1`` (the default node-level preset: K = 4, no SPD) in a
child process under ``nice -n 5`` with one thread (``OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS=1``) and a private
``XMASK_CACHE``. Runs alternate twin, hub, twin, hub ... (``--rounds`` of each) so that a change in the
machine's load falls on both. Recorded per run: wall seconds, the child's CPU seconds (user + system) and peak
resident memory (its own ``wait4`` rusage), and prepare's own seconds from its JSON (no interpreter start-up).
The ratio hub / twin is taken per round and the median reported; the target is at most 3x in time and memory.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/hubs.py --rounds 2 --work /tmp/xhubs
    python benchmarks/hubs.py --report-only

Writes ``benchmarks/out/hubs.json`` and prints a markdown table (the one in benchmarks/hubs.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out" / "hubs.json"
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
TARGET = 3.0
GRAPHS = ("star50k", "star200k", "chunglu200k")


def _dedup(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Distinct undirected pairs (``u < v`` keys), loops dropped, in first-drawn order."""
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    key = lo.astype(np.int64) * n + hi
    key = key[lo != hi]
    _, first = np.unique(key, return_index=True)
    return key[np.sort(first)]


def star(leaves: int) -> tuple[np.ndarray, np.ndarray, int]:
    """One hub (node 0) and ``leaves`` leaves."""
    return np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1, dtype=np.int64), leaves + 1


def chung_lu(n: int, mean_degree: float, gamma: float, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Seeded Chung–Lu graph: ``n * mean_degree / 2`` edge draws, endpoints in proportion to the weights."""
    rng = np.random.default_rng(seed)
    w = (np.arange(n) + 10.0) ** (-1.0 / (gamma - 1.0))
    p = w / w.sum()
    m = int(n * mean_degree / 2)
    keys = _dedup(rng.choice(n, size=m, p=p), rng.choice(n, size=m, p=p), n)
    perm = rng.permutation(n)  # hubs anywhere in the id range, not only the first ids
    return perm[keys // n], perm[keys % n], n


def random_twin(n: int, edges: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Uniform random pairs on ``n`` nodes until ``edges`` distinct undirected edges."""
    rng = np.random.default_rng(seed)
    keys = np.zeros(0, dtype=np.int64)
    while keys.shape[0] < edges:
        draw = int((edges - keys.shape[0]) * 1.1) + 16
        src, dst = rng.integers(0, n, draw), rng.integers(0, n, draw)
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        new = (lo * n + hi)[lo != hi]
        both = np.concatenate([keys, new])
        _, first = np.unique(both, return_index=True)
        keys = both[np.sort(first)]
    keys = keys[:edges]
    return keys // n, keys % n, n


def build(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    if name == "star50k":
        return star(50_000)
    if name == "star200k":
        return star(200_000)
    if name == "chunglu200k":
        return chung_lu(200_000, 10.0, 2.5, seed=0)
    raise SystemExit(f"unknown graph {name!r}; expected one of {', '.join(GRAPHS)}")


def write_folder(path: Path, src: np.ndarray, dst: np.ndarray, n: int, seed: int) -> dict[str, Any]:
    """A node dataset folder; returns its size facts (nodes, edges, largest degree)."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np.savez(path / "edges.npz", src=src.astype(np.int64), dst=dst.astype(np.int64))
    np.save(path / "features.npy", rng.random((n, 8), dtype=np.float32))
    np.save(path / "labels.npy", rng.integers(0, 3, n).astype(np.int64))
    deg = np.bincount(np.concatenate([src, dst]), minlength=n)
    return {"nodes": int(n), "edges": int(src.shape[0]), "max_degree": int(deg.max()),
            "nodes_deg_ge_128": int(np.count_nonzero(deg >= 128))}


def run_prepare(folder: Path, cache: Path, timeout: float) -> dict[str, Any]:
    """One ``xmask prepare`` in a child: wall, CPU (user + system) and peak RSS from its rusage."""
    env = dict(os.environ, XMASK_CACHE=str(cache), PYTHONPATH=str(REPO))
    env.update({k: "1" for k in THREAD_ENV})
    cmd = ["nice", "-n", "5", sys.executable, "-m", "xmask_cli", "--format", "json", "prepare", str(folder),
           "--force", "--workers", "1"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(folder.parent))
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            return {"timed_out": True, "wall_s": round(time.perf_counter() - t0, 2)}
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"prepare of {folder} failed:\n{err[-2000:]}")
    summary = json.loads(out)
    shutil.rmtree(cache, ignore_errors=True)
    return {"wall_s": round(wall, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_gib": round(ru.ru_maxrss / (1 << 20), 3), "prepare_s": summary["seconds"],
            "cache_mb": round(summary["size_bytes"] / 1e6, 1),
            "capped_rows": summary["truncation"].get("capped_rows"),
            "dropped_max": summary["truncation"].get("powers", {}).get("max")}


def _median(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def table(doc: dict[str, Any]) -> str:
    """The markdown table of benchmarks/hubs.md."""
    head = ("| graph | nodes | edges | max degree | prepare s (in process) | CPU s | peak RSS GiB | cache MB | "
            "hub / random: prepare s, CPU, peak RSS |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for name, row in doc["graphs"].items():
        for kind in ("random", "hub"):
            runs = row[kind]["runs"]
            f = row[kind]["facts"]
            med = {k: _median([r[k] for r in runs]) for k in ("prepare_s", "cpu_s", "peak_gib", "cache_mb")}
            ratio = ""
            if kind == "hub":
                ratio = ", ".join(f"{x:.2f}x" for x in (row["ratio"]["prepare_s"], row["ratio"]["cpu_s"],
                                                         row["ratio"]["peak_gib"]))
            label = name if kind == "hub" else f"{name}: random twin"
            lines.append(f"| {label} | {f['nodes']:,} | {f['edges']:,} | {f['max_degree']:,} | {med['prepare_s']:.2f} | "
                         f"{med['cpu_s']:.2f} | {med['peak_gib']:.3f} | {med['cache_mb']:.1f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/xmask-hubs"))
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    if args.report_only:
        print(table(json.loads(OUT.read_text())))
        return
    doc: dict[str, Any] = {"command": " ".join(sys.argv), "rounds": args.rounds,
                           "load_before": os.getloadavg(), "graphs": {}}
    for name in args.graphs.split(","):
        src, dst, n = build(name)
        hub_dir, twin_dir = args.work / name, args.work / f"{name}-random"
        facts = {"hub": write_folder(hub_dir, src, dst, n, seed=1)}
        rs, rd, _ = random_twin(n, src.shape[0], seed=2)
        facts["random"] = write_folder(twin_dir, rs, rd, n, seed=1)
        row: dict[str, Any] = {k: {"facts": facts[k], "runs": []} for k in ("random", "hub")}
        for r in range(args.rounds):
            for kind, folder in (("random", twin_dir), ("hub", hub_dir)):
                res = run_prepare(folder, args.work / "cache", args.timeout)
                res["load"] = os.getloadavg()
                row[kind]["runs"].append(res)
                print(f"{name} {kind} round {r}: {res}", file=sys.stderr, flush=True)
        if all("cpu_s" in x for k in ("random", "hub") for x in row[k]["runs"]):
            row["ratio"] = {m: _median([h[m] / t[m] for h, t in zip(row["hub"]["runs"], row["random"]["runs"])])
                            for m in ("prepare_s", "cpu_s", "peak_gib")}
        doc["graphs"][name] = row
    doc["load_after"] = os.getloadavg()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(OUT)
    print(table(doc))


if __name__ == "__main__":
    main()
