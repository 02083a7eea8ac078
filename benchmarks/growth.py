#!/usr/bin/env python
"""How ``xmask prepare`` and one training epoch grow with the graph: seeded SBM graphs, 20k to 3M nodes.

For every size the script writes a stochastic-block-model graph as a node
dataset folder (``edges.npz`` with int64 arrays ``src`` / ``dst``, each
undirected edge once; ``features.npy`` float32 ``[n, 32]``; ``labels.npy``
int64 ``[n]``: the block), then runs, through the command line and each in a
child process of its own:

1. ``xmask --format json prepare <folder> --preset computers --workers 1``;
2. ``xmask --format json train --preset computers --dataset <folder> --set train.epochs=1``
   (one epoch, with its validation pass, then the test pass).

Each child runs under ``nice`` with one thread (``OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS=1``).
Its wall time, CPU time (user + system) and peak resident memory (GNU time's
``%U + %S`` and ``%M``: the child's own ``wait4``; also the sampled RSS of its
process tree) are recorded, with the
cache file's size and the epoch's own seconds from the run's ``metrics.jsonl``.
A child is killed when the machine's available memory drops below
``--min-free-gb`` (the machine is shared: better a missing row than a host
out of memory), and the row says so.

The graph: ``n`` nodes in 10 equal-probability blocks, ``n * 10 / 2`` edge
draws (mean degree 10 before removing self loops and repeats), a share
``--p-in`` (0.7) of them inside the source's block, the rest uniform; 32
binary features, each block with its own Bernoulli rates (0.15 or 0.6 per
feature, seeded), so the label is learnable from features and neighbours.

``--layout amazon`` writes the same graph in the Amazon npz layout under a data
root (``<root>/Computers/raw/amazon_electronics_computers.npz``) and runs
``xmask prepare Computers``: the way to measure before node folders load.

Usage (from the repository root)::

    nice -n 10 python benchmarks/growth.py --sizes 20k,80k,320k
    nice -n 10 python benchmarks/growth.py --sizes 1M --work /tmp/growth   # one size more, same JSON
    python benchmarks/growth.py --report-only                              # table + PNG from the JSON

Writes ``benchmarks/out/growth.json`` (rows merged by size) and
``benchmarks/out/growth.png`` (log-log), and prints a markdown table.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SIZES = "20k,80k,320k,1M,3M"
BLOCKS, MEAN_DEGREE, FEATURES = 10, 10, 32
#: Targets: peak memory per size (GiB) and the growth exponent from 80k nodes up.
PEAK_TARGET_GB = {1_000_000: 8.0, 3_000_000: 16.0}
EXPONENT_TARGET, EXPONENT_FROM = 1.15, 80_000
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
POLL_S = 0.25


def parse_size(text: str) -> int:
    """``'20k'`` -> 20000, ``'1M'`` -> 1000000, ``'5000'`` -> 5000."""
    t = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


# ----------------------------------------------------------------- the graph
def sbm(n: int, seed: int = 0, p_in: float = 0.7, blocks: int = BLOCKS, mean_degree: int = MEAN_DEGREE,
        features: int = FEATURES) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A seeded SBM graph: ``(src, dst, x, y)``.

    ``src < dst``, each undirected edge once (self loops and repeats removed),
    sorted; ``x`` float32 ``[n, features]`` in {0, 1}; ``y`` int64 block ids.
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, blocks, size=n, dtype=np.int64)
    order = np.argsort(y, kind="stable")  # members of each block, contiguous
    bounds = np.searchsorted(y[order], np.arange(blocks + 1))
    draws = n * mean_degree // 2
    src = rng.integers(0, n, size=draws, dtype=np.int64)
    inside = rng.random(draws) < p_in
    b = y[src[inside]]
    size = bounds[b + 1] - bounds[b]
    dst = rng.integers(0, n, size=draws, dtype=np.int64)
    dst[inside] = order[bounds[b] + (rng.random(inside.sum()) * size).astype(np.int64)]
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    key = np.unique(lo[keep] * n + hi[keep])
    rates = np.where(rng.random((blocks, features)) < 0.3, 0.6, 0.15)
    x = (rng.random((n, features)) < rates[y]).astype(np.float32)
    return key // n, key % n, x, y


def _save_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, arr)
    os.replace(tmp, path)


def write_folder(folder: Path, src: np.ndarray, dst: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """The node-dataset folder: ``edges.npz`` (``src``, ``dst``), ``features.npy``, ``labels.npy``."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "edges.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, src=src, dst=dst)
    os.replace(tmp, folder / "edges.npz")
    _save_npy(folder / "features.npy", x.astype(np.float32, copy=False))
    _save_npy(folder / "labels.npy", y.astype(np.int64, copy=False))


def write_amazon(root: Path, src: np.ndarray, dst: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """The same graph in the Amazon npz layout (symmetric CSR adjacency, CSR attributes) as ``Computers``."""
    import scipy.sparse as sp

    n = len(y)
    a = sp.coo_matrix((np.ones(2 * len(src), np.float32), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                      shape=(n, n)).tocsr()
    f = sp.csr_matrix(x)
    raw = root / "Computers" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    tmp = raw / "amazon_electronics_computers.npz.tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr, adj_shape=np.array(a.shape),
                 attr_data=f.data, attr_indices=f.indices, attr_indptr=f.indptr, attr_shape=np.array(f.shape),
                 labels=y, class_names=np.array([f"block{i}" for i in range(BLOCKS)]))
    os.replace(tmp, raw / "amazon_electronics_computers.npz")


# ----------------------------------------------------------------- one child
def _tree_rss(proc: Any) -> int:
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


TIME = "/usr/bin/time"


def measure(cmd: list[str], env: dict[str, str], log: Path, min_free_gb: float, timeout_s: float | None) -> dict[str, Any]:
    """Run ``cmd``; wall, CPU (user + sys), peak RSS, sampled tree RSS, stdout, status.

    Peak RSS and CPU come from GNU time (``%M``, ``%U + %S``: the command's own
    ``wait4``) when ``/usr/bin/time`` exists: ``ru_maxrss`` of a child forked
    straight from this process would count this process's resident set at the
    fork (Linux carries the high-water mark over ``execve``). Otherwise from
    this process's ``wait4`` (an upper bound).
    """
    import psutil

    timed = os.path.exists(TIME)
    tfile = log.with_suffix(".time")
    full = [TIME, "-o", str(tfile), "-f", "%M %U %S", *cmd] if timed else cmd
    t0 = time.perf_counter()
    with open(log.with_suffix(".out"), "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        proc = subprocess.Popen(full, env=env, stdout=out, stderr=err, start_new_session=True)
    ps = psutil.Process(proc.pid)
    sampled, status, min_avail = 0, "ok", math.inf
    try:
        while True:
            pid, code, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            sampled = max(sampled, _tree_rss(ps))  # GNU time's own ~2 MB included
            avail = psutil.virtual_memory().available
            min_avail = min(min_avail, avail)
            if avail < min_free_gb * 2**30 or (timeout_s and time.perf_counter() - t0 > timeout_s):
                status = "aborted: low memory" if avail < min_free_gb * 2**30 else "aborted: timeout"
                os.killpg(proc.pid, signal.SIGKILL)
                pid, code, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(POLL_S)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    proc.returncode = os.waitstatus_to_exitcode(code)
    wall = time.perf_counter() - t0
    peak_kib, cpu = ru.ru_maxrss, ru.ru_utime + ru.ru_stime
    if timed and status == "ok":
        try:  # GNU time writes "Command exited with non-zero status N" first when the command failed
            last = tfile.read_text().strip().splitlines()[-1].split()
            peak_kib, cpu = int(last[0]), float(last[1]) + float(last[2])
        except (OSError, IndexError, ValueError):
            pass
    if status == "ok" and proc.returncode != 0:
        status = f"failed (rc {proc.returncode})"
    stdout = log.with_suffix(".out").read_text(errors="replace")
    return {"status": status, "rc": proc.returncode, "wall_s": wall, "cpu_s": cpu,
            "peak_rss_gib": peak_kib / 2**20, "sampled_tree_peak_gib": sampled / 2**30,
            "min_available_gib": None if min_avail == math.inf else min_avail / 2**30,
            "stdout": stdout[-20000:], "stderr_tail": log.with_suffix(".err").read_text(errors="replace")[-3000:],
            "command": " ".join(cmd)}


def _json_out(text: str) -> dict[str, Any] | None:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _epoch_record(runs: Path) -> dict[str, Any] | None:
    """The first epoch line of the run's metrics.jsonl (its seconds and steps, when logged)."""
    for path in sorted(runs.rglob("metrics.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "epoch" in rec:
                return rec
    return None


def run_size(n: int, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Generate, prepare and train one epoch for one size; returns the row."""
    work = args.work / size_label(n)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    row: dict[str, Any] = {"nodes": n, "label": size_label(n), "layout": args.layout,
                           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           "load_average_start": list(os.getloadavg())}
    t = time.perf_counter()
    src, dst, x, y = sbm(n, seed=args.seed)
    row["edges"] = int(len(src))
    if args.layout == "folder":
        data = work / "graph"
        write_folder(data, src, dst, x, y)
        dataset, root_opts = str(data), []
    else:
        write_amazon(work / "root", src, dst, x, y)
        dataset, root_opts = "Computers", ["--data-root", str(work / "root")]
    del src, dst, x, y
    row["generate_s"] = time.perf_counter() - t
    cache = work / "cache"
    xmask = [sys.executable, "-m", "xmask_cli", "--format", "json"]
    common = ["--preset", args.preset, *root_opts, "--cache-dir", str(cache), *sum((["--set", s] for s in args.set), [])]
    print(f"# {size_label(n)}: {row['edges']:,} edges, generated in {row['generate_s']:.1f} s; prepare ...",
          file=sys.stderr, flush=True)
    prep = measure([*xmask, "prepare", dataset, *common, "--workers", "1"], env, work / "prepare", args.min_free_gb,
                   args.timeout)
    summary = _json_out(prep["stdout"]) if prep["status"] == "ok" else None
    if summary:
        prep["cache_bytes"] = int(summary.get("size_bytes") or sum(f.stat().st_size for f in cache.rglob("*.h5")))
        prep["structure_seconds"] = summary.get("seconds")
    prep.pop("stdout")
    row["prepare"] = prep
    print(f"#   prepare: {prep['status']}, {prep['wall_s']:.0f} s wall, {prep['cpu_s']:.0f} s CPU, "
          f"peak {prep['peak_rss_gib']:.2f} GiB; train ...", file=sys.stderr, flush=True)
    if prep["status"] == "ok" and not args.skip_train:
        runs = work / "runs"
        tr = measure([*xmask, "train", "--dataset", dataset, *common, "--set", "train.epochs=1",
                      "--runs-dir", str(runs), "--name", "growth"], env, work / "train", args.min_free_gb, args.timeout)
        tr["epoch"] = _epoch_record(runs)
        res = _json_out(tr["stdout"]) if tr["status"] == "ok" else None
        if res and res.get("runs"):
            train_nodes = int(res["runs"][0]["split"]["train"])
            tr["train_nodes"] = train_nodes
            tr["steps"] = math.ceil(train_nodes / args.query_batch)
            tr["metrics"] = res["runs"][0]["metrics"]
        tr.pop("stdout")
        row["train"] = tr
        print(f"#   train: {tr['status']}, {tr['wall_s']:.0f} s wall, {tr['cpu_s']:.0f} s CPU, "
              f"peak {tr['peak_rss_gib']:.2f} GiB", file=sys.stderr, flush=True)
    row["load_average_end"] = list(os.getloadavg())
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def warm(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Prepare a 2,000-node graph once, not recorded: numba compiles and caches its kernels on their first
    use after a code change (tens of CPU seconds), which would otherwise land on the first size's row."""
    work = args.work / "warmup"
    shutil.rmtree(work, ignore_errors=True)
    write_folder(work / "graph", *sbm(2000, seed=args.seed))
    cmd = [sys.executable, "-m", "xmask_cli", "--format", "json", "prepare", str(work / "graph"), "--preset",
           args.preset, "--cache-dir", str(work / "cache"), "--workers", "1"]
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------- report
def exponents(rows: list[dict[str, Any]], side: str, key: str) -> list[float | None]:
    """log(value ratio) / log(size ratio) between each row and the one before (None where either is missing)."""
    out: list[float | None] = [None]
    for a, b in zip(rows[:-1], rows[1:]):
        va, vb = _value(a, side, key), _value(b, side, key)
        out.append(math.log(vb / va) / math.log(b["nodes"] / a["nodes"]) if va and vb else None)
    return out


def _value(row: dict[str, Any], side: str, key: str) -> float | None:
    r = row.get(side)
    if not r or r.get("status") != "ok":
        return None
    if key == "epoch_s":
        ep = r.get("epoch") or {}
        return ep.get("train_s")
    return r.get(key)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One line per target: peak memory at 1M / 3M, exponents from 80k up."""
    lines = []
    by_n = {r["nodes"]: r for r in rows}
    for n, gb in PEAK_TARGET_GB.items():
        r = by_n.get(n)
        if r is None:
            lines.append(f"{size_label(n)} under {gb:g} GB: not run")
            continue
        parts = []
        for side in ("prepare", "train"):
            s = r.get(side)
            if not s:
                parts.append(f"{side} not reached")
            elif s["status"] != "ok":
                parts.append(f"{side} {s['status']} (peak {max(s['peak_rss_gib'], s['sampled_tree_peak_gib']):.2f} GiB "
                             f"at {s['wall_s']:.0f} s)")
            else:
                peak = max(s["peak_rss_gib"], s["sampled_tree_peak_gib"])
                parts.append(f"{side} {peak:.2f} GiB {'pass' if peak * 2**30 < gb * 1e9 else 'FAIL'}")
        lines.append(f"{size_label(n)} under {gb:g} GB: " + "; ".join(parts))
    big = [r for r in rows if r["nodes"] >= EXPONENT_FROM]
    for side, key in (("prepare", "wall_s"), ("prepare", "cpu_s"), ("train", "wall_s"), ("train", "cpu_s"), ("train", "epoch_s")):
        ex = [e for e in exponents(big, side, key)[1:] if e is not None]
        if ex:
            lines.append(f"{side} {key} exponent from {size_label(EXPONENT_FROM)} up: max {max(ex):.2f} "
                         f"({'pass' if max(ex) <= EXPONENT_TARGET else 'FAIL'}, target <= {EXPONENT_TARGET})")
    return lines


def table(rows: list[dict[str, Any]]) -> str:
    head = ["nodes", "edges", "prepare wall s", "prepare CPU s", "prepare peak GiB", "cache MB", "train wall s",
            "train CPU s", "epoch s (steps)", "train peak GiB", "exp. prepare wall / CPU", "exp. train wall / CPU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    ex = {(s, k): exponents(rows, s, k) for s in ("prepare", "train") for k in ("wall_s", "cpu_s")}

    def cell(r: dict[str, Any] | None, key: str, fmt: str) -> str:
        if not r:
            return "–"
        if r["status"] != "ok":
            return r["status"] if key == "wall_s" else "–"
        v = r.get(key)
        return "–" if v is None else format(v, fmt)

    def peak(r: dict[str, Any] | None) -> str:
        if not r:
            return "–"
        p = max(r["peak_rss_gib"], r["sampled_tree_peak_gib"])
        return f"{p:.2f}" if r["status"] == "ok" else f">= {p:.2f}"

    def e(i: int, side: str) -> str:
        a, b = ex[(side, "wall_s")][i], ex[(side, "cpu_s")][i]
        return " / ".join("–" if v is None else f"{v:.2f}" for v in (a, b)) if (a or b) else "–"

    for i, r in enumerate(rows):
        p, t = r.get("prepare"), r.get("train")
        cache = f"{p['cache_bytes'] / 1e6:.0f}" if p and p.get("cache_bytes") else "–"
        ep = _value(r, "train", "epoch_s")
        lines.append("| " + " | ".join([size_label(r["nodes"]), f"{r.get('edges', 0):,}", cell(p, "wall_s", ".0f"),
                                        cell(p, "cpu_s", ".0f"), peak(p), cache, cell(t, "wall_s", ".0f"),
                                        cell(t, "cpu_s", ".0f"), "–" if ep is None else f"{ep:.1f} ({t.get('steps', '?')})", peak(t),
                                        e(i, "prepare"), e(i, "train")]) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Log-log: seconds (wall, CPU) and peak GiB of prepare and train against nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for side, style in (("prepare", "-o"), ("train", "-s")):
        for key, label in (("wall_s", "wall"), ("cpu_s", "CPU")):
            pts = [(r["nodes"], _value(r, side, key)) for r in rows if _value(r, side, key)]
            if pts:
                ax_t.plot(*zip(*pts), style, label=f"{side} {label}", alpha=1.0 if key == "wall_s" else 0.6)
        pts = [(r["nodes"], max(r[side]["peak_rss_gib"], r[side]["sampled_tree_peak_gib"])) for r in rows
               if r.get(side) and r[side]["status"] == "ok"]
        if pts:
            ax_m.plot(*zip(*pts), style, label=f"{side} peak RSS")
    ns = [r["nodes"] for r in rows]
    if ns:
        lo, hi = min(ns), max(ns)
        ref = [(r["nodes"], _value(r, "prepare", "wall_s")) for r in rows if _value(r, "prepare", "wall_s")]
        if ref:  # slope-1 guide through the first prepare point
            n0, v0 = ref[0]
            ax_t.plot([lo, hi], [v0 * lo / n0, v0 * hi / n0], ":", color="grey", label="slope 1")
    for gb in PEAK_TARGET_GB.values():
        ax_m.axhline(gb * 1e9 / 2**30, color="red", lw=0.8, ls="--")
    for ax, yl in ((ax_t, "seconds"), (ax_m, "GiB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes (SBM, mean degree 10)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_title("xmask prepare / train 1 epoch (computers preset, 1 thread)")
    ax_m.set_title("peak resident memory (targets dashed)")
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"rows": []}


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="node counts, e.g. 20k,80k,1M (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="computers")
    p.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for prepare and train")
    p.add_argument("--layout", choices=("folder", "amazon"), default="folder",
                   help="folder: a node-dataset folder (--dataset PATH); amazon: the Amazon npz layout under a data root")
    p.add_argument("--work", type=Path, default=Path("/tmp/xmask-growth"), help="graphs, caches, runs (default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep each size's folder, cache and runs")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--query-batch", type=int, default=512,
                   help="the preset's node.query_batch, to count an epoch's steps (default: %(default)s)")
    p.add_argument("--min-free-gb", type=float, default=2.0,
                   help="kill a child when the machine's available memory falls below this (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=None, help="seconds before a child is killed (default: none)")
    p.add_argument("--out", type=Path, default=HERE / "out" / "growth.json")
    p.add_argument("--png", type=Path, default=HERE / "out" / "growth.png")
    p.add_argument("--report-only", action="store_true", help="only rebuild the table and PNG from --out")
    p.add_argument("--no-warmup", action="store_true", help="skip the unrecorded 2,000-node prepare that warms numba's cache")
    args = p.parse_args(argv)

    data = _load(args.out)
    if not args.report_only:
        env = dict(os.environ)
        env.update({k: "1" for k in THREAD_ENV})
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        if not args.no_warmup:
            warm(args, env)
        for n in (parse_size(s) for s in args.sizes.split(",") if s.strip()):
            row = run_size(n, args, env)
            row["command"] = " ".join([Path(sys.executable).name, *sys.argv])
            data["rows"] = sorted([r for r in data["rows"] if r["nodes"] != n] + [row], key=lambda r: r["nodes"])
            _save(args.out, data)
    rows = data["rows"]
    md = table(rows)
    data["table"], data["verdicts"] = md, verdicts(rows)
    _save(args.out, data)
    if rows:
        plot(rows, args.png)
    print(md)
    print("\n".join(f"* {v}" for v in data["verdicts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
