#!/usr/bin/env python
"""Benchmark node-level partition training on a large graph: peak memory and seconds per epoch.

Loads the dataset through the project's loader, prepares (or reuses) its
structure cache with the ``node-level`` preset (METIS ``partition.parts=32``;
SPD and spectra off by default since partition training does not read them),
then trains :class:`~xmask_cli.engine.tasks.node.NodeTask` in ``partition`` mode
(sparse attention inside each part) with a small model through
:func:`~xmask_cli.engine.loop.fit`.

Reported: peak resident memory of this process (``ru_maxrss``, which covers
loading, prepare and training; psutil's current RSS beside it), the prepare
and task-building times, seconds per epoch (training plus the validation
pass, as ``fit`` runs them) and the final metrics.

Usage (from the repository root)::

    python benchmarks/node_large.py --dataset physics --epochs 2 \\
        --data-root /work/shared/datasets --cache-dir /tmp/nodebench-cache

Prints one JSON object to stdout; progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

from xmask_cli.config import NodeSection
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.loop import TrainConfig, fit, seed_everything
from xmask_cli.engine.splits import node_split
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_dataset


def _peak_rss_gb() -> float:
    """High-water mark of this process's resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _current_rss_gb() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss / 2**30


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns (and prints) the JSON result."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="physics")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--data-root", default="/work/shared/datasets")
    ap.add_argument("--cache-dir", default="/tmp/nodebench-cache")
    ap.add_argument("--run-dir", default=None, help="default: a temporary folder, removed at the end")
    ap.add_argument("--set", dest="overrides", action="append", default=None,
                    help="config override, repeatable (default: SPD and spectra off)")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--parts-per-batch", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    overrides = args.overrides if args.overrides is not None else [
        "structure.spd.enabled=false", "structure.spectrum.enabled=false"]
    cfg = resolve("node-level", [f"data.dataset={args.dataset}", *overrides])
    cache_dir = Path(args.cache_dir)
    t0 = time.perf_counter()
    prep = prepare_dataset(cfg, data_root=args.data_root, cache_dir=cache_dir, log=_log)
    t_prepare = time.perf_counter() - t0
    _log(f"cache {prep.path} ({'reused' if prep.cached else 'built'}, {t_prepare:.1f}s)")

    t0 = time.perf_counter()
    graphs = load_graphs(get_dataset(args.dataset), data_root=Path(args.data_root), cache_dir=cache_dir)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=args.seed)
    t_load = time.perf_counter() - t0
    rss_loaded = _peak_rss_gb()

    seed_everything(args.seed)
    t0 = time.perf_counter()
    task = NodeTask(prep.path, graphs, split, parts_per_batch=args.parts_per_batch,
                    seed=args.seed, device=args.device, node=NodeSection(mode="partition"))
    t_task = time.perf_counter() - t0
    pairs = sum(int(b.edge_index.size(1)) for b in task.eval_batches)
    _log(f"task: {len(task.eval_batches)} batches, {pairs} in-part pairs ({t_task:.1f}s)")

    model_cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, hidden=args.hidden, heads=args.heads,
                            layers=args.layers, dropout=0.1, task=task.model_task)
    model = XMaskNet(model_cfg).to(args.device)
    train_cfg = TrainConfig(epochs=args.epochs, lr=args.lr, warmup_epochs=0, patience=args.epochs,
                            seed=args.seed, device=args.device)
    stamps = [time.perf_counter()]

    def log(row: dict) -> None:
        stamps.append(time.perf_counter())
        _log(f"epoch {row['epoch']}: loss {row['loss']:.4f} val {row['val_accuracy']:.4f} "
             f"({stamps[-1] - stamps[-2]:.1f}s)")

    with tempfile.TemporaryDirectory() as tmp:
        summary = fit(task, model, train_cfg, args.run_dir or Path(tmp) / "run", model_config=model_cfg.to_dict(),
                      log=log)
    epochs = [b - a for a, b in zip(stamps, stamps[1:])]
    result = {
        "dataset": graphs.spec.name, "nodes": task.num_nodes, "features": task.in_dim, "classes": task.out_dim,
        "mode": task.mode, "batches": len(task.eval_batches), "in_part_pairs": pairs,
        "model": {"hidden": args.hidden, "heads": args.heads, "layers": args.layers},
        "epochs": args.epochs, "threads": torch.get_num_threads(), "device": args.device,
        "prepare_s": round(t_prepare, 2), "prepare_cached": prep.cached, "load_s": round(t_load, 2),
        "task_build_s": round(t_task, 2),
        "s_per_epoch": round(sum(epochs) / len(epochs), 2), "epoch_s": [round(e, 2) for e in epochs],
        "peak_rss_gb": round(_peak_rss_gb(), 3), "peak_rss_after_load_gb": round(rss_loaded, 3),
        "rss_now_gb": None if (now := _current_rss_gb()) is None else round(now, 3),
        "metrics": summary["metrics"], "best_epoch": summary["best_epoch"],
        "python": platform.python_version(), "torch": torch.__version__,
    }
    print(json.dumps(result, indent=2))
    return result


def measure_physics(args: argparse.Namespace) -> dict:
    """Physics, 2 epochs, in a child process (so its peak RSS is its own); used by train_speed.py --physics."""
    import subprocess
    import sys

    cmd = [sys.executable, str(Path(__file__).resolve()), "--dataset", "physics", "--epochs", "2",
           "--data-root", str(args.data_root), "--cache-dir", str(Path(args.cache_dir) / "physics")]
    if getattr(args, "threads", 0):
        cmd += ["--threads", str(args.threads)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    result = json.loads(out[out.index("{"):])
    return {"peak_rss_gb": result["peak_rss_gb"], "s_per_epoch": result["s_per_epoch"],
            "target": "peak < 8 GB", "pass": result["peak_rss_gb"] < 8, "detail": result}


if __name__ == "__main__":
    main()
