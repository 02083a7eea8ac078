#!/usr/bin/env python
"""Large graphs, whole-graph attention: the shipped presets over seeds, with time, memory and kept mass.

For each seed, one child process runs ``xmask train`` (the same library call,
:func:`~xmask_cli.engine.sweep.train_seeds`) with the preset as shipped
(``node.mode: auto`` = query batches over the whole graph's stored support),
so its peak RSS (``ru_maxrss``, loading and training included, the cache
warm) is its own. Reported per seed: test / val accuracy of the state chosen
on validation, best and last epoch, wall and CPU seconds per epoch (training
plus the validation pass; on a shared machine the CPU figure is the one that
does not depend on the load), peak RSS; over seeds mean ± population std.

Also reported, once per dataset: the share of ``Â^k`` mass each query keeps,
``sum_j stored(Â^k)_ij / sum_j (Â^k)_ij`` (mean and min over rows; the exact
row sums are ``Â^k 1``, from sparse mat-vecs), and the share the batching
keeps: attended pairs of one evaluation pass over stored pairs (1.0 means no
pair is lost to batching; a partition batch would lose the cross-part ones,
given beside it for the cache's METIS parts).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/node_whole.py --preset computers --seeds 0-4 \\
        --data-root /work/shared/datasets --cache-dir /tmp/large/cache

Writes ``benchmarks/out/node_whole_<preset>.json`` (after every seed) and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def one_seed(args: argparse.Namespace) -> dict:
    """Train one seed in this process; returns metrics, timings and peak RSS."""
    import torch

    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.sweep import train_seeds

    torch.set_num_threads(args.threads)
    cfg = resolve(args.preset, [f"run.name={args.name}", *(args.overrides or [])])
    stamps: list[float] = []
    rows: list[dict] = []

    def on_epoch(seed: int, row: dict) -> None:
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        rows.append(row)
        if len(stamps) > 1:
            _log(f"seed {seed} epoch {row['epoch']}: loss {row['loss']:.4f} val {row['val_accuracy']:.4f} "
                 f"({stamps[-1] - stamps[-2]:.1f}s)")

    cpu: list[float] = []

    def on_start(seed: int, epochs: int) -> None:
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())

    t0 = time.perf_counter()
    result = train_seeds(cfg, [args.seed], device="cpu", cache_dir=Path(args.cache_dir), data_root=args.data_root,
                         run_root=Path(args.runs_dir), overwrite=True,  # a re-measurement replaces the run
                         log=_log, on_epoch=on_epoch, on_seed_start=on_start)
    run = result["runs"][0]
    epochs = np.diff(stamps)
    return {"seed": args.seed, "metrics": run["metrics"], "best_epoch": run["best_epoch"],
            "epochs_run": run["epochs_run"], "stopped_early": run["stopped_early"],
            "s_per_epoch": round(float(epochs.mean()), 3), "total_s": round(time.perf_counter() - t0, 1),
            # CPU seconds of this process per epoch: what the epoch costs whatever else runs on the machine.
            "cpu_s_per_epoch": round(float(np.diff(cpu).mean()), 3),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
            "threads": torch.get_num_threads()}


def kept_mass(args: argparse.Namespace) -> dict:
    """Share of each row's Â^k mass the stored support keeps, and of stored pairs the batching keeps."""
    import scipy.sparse as sp

    from xmask_cli.cache import StructureCache
    from xmask_cli.config_resolve import resolve
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.prepare import prepare_dataset
    from xmask_cli.structure.powers import normalized_adjacency

    cfg = resolve(args.preset, args.overrides or [])
    prep = prepare_dataset(cfg, data_root=args.data_root, cache_dir=Path(args.cache_dir), log=_log)
    graphs = load_graphs(get_dataset(cfg.data.dataset), data_root=Path(args.data_root), cache_dir=Path(args.cache_dir))
    ei = graphs.dataset[0].edge_index.numpy()
    n = int(graphs.dataset[0].num_nodes)
    a = sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64)
    a.setdiag(0)
    a.eliminate_zeros()
    a_hat = normalized_adjacency(a)
    with StructureCache(prep.path) as cache:
        row, col, vals = cache.powers(0)
        part = np.asarray(cache.partition(0)) if cache.has("nodes/part") else None
    out: dict = {"pairs": int(len(col)), "pairs_per_node": round(len(col) / n, 1)}
    exact = np.ones(n)
    for k in range(vals.shape[1]):
        exact = a_hat @ exact  # row sums of Â^k
        stored = np.bincount(row, weights=vals[:, k].astype(np.float64), minlength=n)
        share = stored / exact
        out[f"k{k + 1}"] = {"mean": round(float(share.mean()), 5), "min": round(float(share.min()), 5)}
    # Query batches attend every stored pair of every query (encode_queries takes all of a row's pairs).
    out["batching_pairs_kept"] = 1.0
    if part is not None:
        out["partition_pairs_kept"] = round(float((part[row] == part[col]).mean()), 4)
    return out


def table(paths: list[Path]) -> str:
    """Markdown rows (one per result file, seeds merged by preset) from saved results."""
    by: dict[str, list[dict]] = {}
    mass: dict[str, dict] = {}
    for path in paths:
        r = json.loads(Path(path).read_text())
        by.setdefault(r["preset"], []).extend(r["seeds"])
        mass.setdefault(r["preset"], r.get("kept_mass") or {})
    lines = ["| preset | seeds | test acc % | val acc % | best epoch | epochs run | s / epoch | peak RSS GB | "
             "Â^1..Â^4 mass kept (mean) | pairs kept by batching |", "|---|---|---|---|---|---|---|---|---|---|"]
    for preset, seeds in by.items():
        seeds = sorted(seeds, key=lambda r: r["seed"])
        test = 100 * np.array([r["metrics"]["test"] for r in seeds])
        val = 100 * np.array([r["metrics"]["val"] for r in seeds])
        m = mass.get(preset, {})
        kept = " / ".join(f"{m[f'k{k}']['mean']:.2f}" for k in range(1, 5) if f"k{k}" in m)
        lines.append(
            f"| {preset} | {','.join(str(r['seed']) for r in seeds)} | {test.mean():.1f} ± {test.std():.1f} | "
            f"{val.mean():.1f} ± {val.std():.1f} | {', '.join(str(r['best_epoch']) for r in seeds)} | "
            f"{', '.join(str(r['epochs_run']) for r in seeds)} | "
            f"{np.mean([r['s_per_epoch'] for r in seeds]):.1f} | {max(r['peak_rss_gb'] for r in seeds):.2f} | "
            f"{kept} | {m.get('batching_pairs_kept', '')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="computers")
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)  # child: one seed here
    ap.add_argument("--name", default=None, help="run name (default: <preset>-whole)")
    ap.add_argument("--set", dest="overrides", action="append", default=None, help="config override, repeatable")
    ap.add_argument("--data-root", default="/work/shared/datasets")
    ap.add_argument("--cache-dir", default="/tmp/large/cache")
    ap.add_argument("--runs-dir", default="/tmp/large/runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="default: benchmarks/out/node_whole_<preset>.json")
    ap.add_argument("--no-mass", action="store_true", help="skip the kept-mass figures")
    ap.add_argument("--table", nargs="+", default=None, help="print the markdown table of saved result files")
    args = ap.parse_args()
    if args.table:
        print(table([Path(p) for p in args.table]))
        return
    stem = Path(args.preset).stem  # a YAML path (benchmarks/presets/...) names its files by its stem
    args.name = args.name or f"{stem}-whole"
    if args.seed is not None:
        print(json.dumps(one_seed(args)))
        return
    from xmask_cli.engine.plan import parse_seeds

    seeds = parse_seeds(args.seeds)  # --seeds as `xmask train` reads it, checked before any work
    out_path = Path(args.out or OUT / f"node_whole_{stem}.json")
    result: dict = {"preset": args.preset, "overrides": args.overrides or [], "seeds": [],
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_avg_start": os.getloadavg()[0]}
    if not args.no_mass:
        result["kept_mass"] = kept_mass(args)
        _log(json.dumps(result["kept_mass"]))
    for seed in seeds:
        cmd = [sys.executable, __file__, "--seed", str(seed), "--preset", args.preset, "--name", args.name,
               "--data-root", args.data_root, "--cache-dir", args.cache_dir, "--runs-dir", args.runs_dir,
               "--threads", str(args.threads)]
        for o in args.overrides or []:
            cmd += ["--set", o]
        child = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
        result["seeds"].append(json.loads(child.stdout.strip().splitlines()[-1]))
        tests = [r["metrics"]["test"] for r in result["seeds"]]
        result["test_mean"], result["test_std"] = float(np.mean(tests)), float(np.std(tests))
        vals = [r["metrics"]["val"] for r in result["seeds"]]
        result["val_mean"], result["val_std"] = float(np.mean(vals)), float(np.std(vals))
        result["s_per_epoch_mean"] = float(np.mean([r["s_per_epoch"] for r in result["seeds"]]))
        result["peak_rss_gb_max"] = max(r["peak_rss_gb"] for r in result["seeds"])
        result["load_avg_end"] = os.getloadavg()[0]
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=2))
        os.replace(tmp, out_path)
        _log(f"seed {seed}: test {result['seeds'][-1]['metrics']['test']:.4f}; so far "
             f"{100 * result['test_mean']:.1f} ± {100 * result['test_std']:.1f}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
