#!/usr/bin/env python
"""Graph-level epochs of xmask against a GIN of the same width, alternated, whole epochs.

For each dataset, xmask is built exactly as ``xmask train --preset <its preset>`` builds it
(:data:`PRESETS`: the resolved preset, ``Experiment``, its ``GraphTask`` and ``XMaskNet``, the engine's
optimiser and its own training epoch, ``engine.training.loop._train_epoch``, which records the input stall).
The peer is a 5-layer GIN at the same width (hidden 64; PyG ``GINConv``, ``peers_gnn._gin``) with the same
input encoder (OGB's ``AtomEncoder`` on molecules, a linear map of the same input columns on TU sets),
the preset's readout, batch size and split, Adam at the preset's learning rate, the gradient clipped as
the engine clips. Its batches come from PyG's ``DataLoader`` and its stall is measured alike.

Each round runs one whole training epoch of each side (the order alternates every round), then one
validation pass of each; figures are medians and ranges over the rounds, the ratio the median of the
per-round ratios. ``--memory`` measures each side's peak RSS in a child process of its own (data load,
one epoch and one validation pass), so one side's allocations cannot raise the other's peak.

Threads: ``--threads N`` pins torch, numba and BLAS to N threads; ``--threads auto`` takes what
``xmask train`` chooses (``xmask_cli/engine/training/threads.py``), as a new user runs it. ``--load N`` runs N busy processes
during the timing (a loaded machine on demand).

Usage (from the repository root)::

    python benchmarks/graph_speed.py --threads 1 --rounds 3 --memory --data-root ../shared/datasets
    python benchmarks/graph_speed.py --datasets PROTEINS --rounds 2 --max-train 300     # minutes

Prints a markdown table and writes JSON to ``benchmarks/out/graph_speed.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402

#: dataset -> the preset ``xmask train`` picks for it.
PRESETS = {"ogbg-molhiv": "ogbg-molhiv", "NCI1": "nci1", "PROTEINS": "proteins", "DD": "dd", "MUTAG": "graph-level"}
#: Pass marks: epoch ratio to GIN, input stall share, peak RSS (GB) where the issue sets one.
EPOCH_RATIO_MAX, STALL_MAX = 1.5, 0.05
PEAK_GB_MAX = {"ogbg-molhiv": 1.5, "DD": 2.5}
GIN_LAYERS, GIN_HIDDEN = 5, 64
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


@dataclass
class Side:
    """One side of the comparison: a training epoch (-> ``(seconds, stall seconds)``) and a validation pass."""

    epoch: Callable[[], tuple[float, float]]
    evaluate: Callable[[], None]
    batches: int


def pin_threads(threads: str) -> None:
    """``N``: torch, numba and BLAS on N threads; ``auto``: what ``xmask train`` chooses for the graph level."""
    if threads == "auto":
        from xmask_cli.engine.training.threads import apply_threads, choose_threads, usable_cores

        apply_threads(choose_threads("graph", usable_cores(), os.environ))
        return
    for var in THREAD_ENV:
        os.environ[var] = threads
    import numba
    import torch

    torch.set_num_threads(int(threads))
    numba.set_num_threads(int(threads))


def load_experiment(dataset: str, args: argparse.Namespace) -> Any:
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import Experiment

    cfg = resolve(PRESETS[dataset], [f"data.dataset={dataset}"] + list(args.set))
    return Experiment.load(cfg, cache_dir=args.cache_dir, data_root=args.data_root, offline=True)


def train_split(exp: Any, max_train: int) -> Any:
    """Seed 0's split of the preset, its training part cut to ``max_train`` graphs (0: all)."""
    from xmask_cli.engine.scoring.splits import graph_split

    split = graph_split(exp.graphs.spec.split, exp.graphs.dataset, seed=0)
    return replace(split, train=split.train[:max_train]) if max_train else split


def xmask_side(exp: Any, split: Any) -> Side:
    """xmask as ``xmask train`` runs it: the preset's task, model, optimiser and training epoch."""
    import torch

    from xmask_cli.engine.tasks.graph import GraphTask, log_mask_of
    from xmask_cli.engine.training.distributed import SingleProcess
    from xmask_cli.engine.training.loop import _train_epoch
    from xmask_cli.engine.training.optimisation import Optimisation
    from xmask_cli.engine.training.precision import Precision
    from xmask_cli.engine.training.train_config import TrainConfig
    from xmask_cli.model.network import XMaskNet
    from xmask_cli.prepare.needs import model_needs

    cfg = exp.cfg
    task = GraphTask(exp.cache_path, exp.graphs, split, exp.metric, cfg.train.batch_size, 0, "cpu",
                     loader_workers=cfg.train.loader_workers, needs=model_needs(cfg),
                     node_struct=cfg.model.node_struct, log_mask=log_mask_of(cfg), log_cache_mb=cfg.train.log_cache_mb)
    torch.manual_seed(0)
    model = XMaskNet(exp.model_config(task))
    train_cfg = TrainConfig.from_section(cfg.train, seed=0, device="cpu")
    strategy = SingleProcess(Precision(train_cfg.precision, "cpu"))
    opt = Optimisation.build(model, train_cfg, strategy.precision)
    ids = np.concatenate(task.train_stream.batches(0))
    assert np.array_equal(np.sort(ids), np.sort(split.train)), "xmask's epoch must visit every training graph once"
    counter = [0]

    def epoch() -> tuple[float, float]:
        stats = _train_epoch(task, model, strategy, opt, train_cfg, None, counter[0])  # type: ignore[arg-type]
        counter[0] += 1
        return stats.train_s, stats.waited_s

    return Side(epoch, lambda: task.evaluate(model, "val"), len(task.train_stream))


def gin_side(exp: Any, split: Any) -> Side:
    """A 5-layer GIN at hidden 64 on the same graphs, input columns (or atom encoder), readout and batches."""
    import torch
    from peers_gnn import _gin
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    from xmask_cli.engine.batching.features import input_features
    from xmask_cli.engine.tasks.graph import graph_labels
    from xmask_cli.engine.training.loop import timed_batches

    cfg, graphs = exp.cfg, exp.graphs
    labels = graph_labels(graphs)
    atom = cfg.model.encoder == "atom"
    if atom:  # OGB's own input: the 9 integer atom columns through AtomEncoder
        from ogb.graphproppred.mol_encoder import AtomEncoder

        feats = [graphs.dataset[i].x.long() for i in range(len(graphs.dataset))]
        encoder, in_dim = AtomEncoder(GIN_HIDDEN), GIN_HIDDEN
    else:  # the very columns xmask's linear encoder reads (dataset features + structural channels)
        feats = input_features(graphs, cfg.model.node_struct, exp.cache_path)[0]
        encoder, in_dim = None, int(feats[0].size(1))
    data = [Data(x=feats[int(g)], edge_index=torch.from_numpy(np.ascontiguousarray(graphs.edge_index[int(g)],
                                                                                   dtype=np.int64)),
                 y=labels[int(g)].view(1).long(), num_nodes=int(graphs.num_nodes[int(g)])) for g in range(len(feats))]
    torch.manual_seed(0)
    out_dim = int(graphs.dataset.num_classes)
    gin = _gin(in_dim, out_dim, hidden=GIN_HIDDEN, layers=GIN_LAYERS, encoder=encoder, pool=cfg.model.readout)
    opt = torch.optim.Adam(gin.parameters(), lr=cfg.train.lr)
    bs = cfg.train.batch_size
    train = DataLoader([data[int(g)] for g in split.train], batch_size=bs, shuffle=True,
                       generator=torch.Generator().manual_seed(0))
    val = DataLoader([data[int(g)] for g in split.val], batch_size=bs)

    def epoch() -> tuple[float, float]:
        gin.train()
        waited, seen, t0 = [0.0], 0, time.perf_counter()
        for b in timed_batches(train, waited):
            opt.zero_grad(set_to_none=True)
            out = gin(b.x, b.edge_index, b.batch, b.num_graphs)
            # The baseline must compute a real prediction per graph, or its timing means nothing.
            assert out.shape == (b.num_graphs, out_dim) and bool(torch.isfinite(out).all()), "GIN output broken"
            torch.nn.functional.cross_entropy(out, b.y).backward()
            torch.nn.utils.clip_grad_norm_(gin.parameters(), cfg.train.clip_norm)
            opt.step()
            seen += b.num_graphs
        assert seen == len(split.train), f"GIN saw {seen} graphs of {len(split.train)}"
        return time.perf_counter() - t0, waited[0]

    def evaluate() -> None:
        gin.eval()
        with torch.no_grad():
            for b in val:
                gin(b.x, b.edge_index, b.batch, b.num_graphs)

    return Side(epoch, evaluate, len(train))


def busy(stop: Any) -> None:
    """A process that keeps one core busy until ``stop`` is set (``--load``)."""
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def time_dataset(dataset: str, args: argparse.Namespace) -> dict[str, Any]:
    """Alternated rounds of whole epochs (and validation passes) of both sides on ``dataset``."""
    exp = load_experiment(dataset, args)
    split = train_split(exp, args.max_train)
    sides = {"xmask": xmask_side(exp, split), "gin": gin_side(exp, split)}
    rounds: dict[str, dict[str, list[float]]] = {n: {"epoch_s": [], "stall": [], "eval_s": []} for n in sides}
    for r in range(args.rounds + args.warmup):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            seconds, waited = sides[name].epoch()
            t = time.perf_counter()
            sides[name].evaluate()
            if r >= args.warmup:
                rounds[name]["epoch_s"].append(seconds)
                rounds[name]["stall"].append(waited / seconds)
                rounds[name]["eval_s"].append(time.perf_counter() - t)
        print(f"{dataset} round {r}: " + ", ".join(f"{n} {rounds[n]['epoch_s'][-1]:.2f}s" for n in sides
                                                    if rounds[n]['epoch_s']), file=sys.stderr, flush=True)
    ratios = [a / b for a, b in zip(rounds["xmask"]["epoch_s"], rounds["gin"]["epoch_s"])]
    return {"dataset": dataset, "preset": PRESETS[dataset], "train_graphs": len(split.train),
            "batches": {n: s.batches for n, s in sides.items()},
            **{n: {k: spread(v) for k, v in rounds[n].items()} | {"runs": rounds[n]} for n in sides},
            "epoch_ratio": spread(ratios), "pass_ratio": statistics.median(ratios) <= EPOCH_RATIO_MAX,
            "pass_stall": statistics.median(rounds["xmask"]["stall"]) < STALL_MAX}


def child_peak(side: str, dataset: str, args: argparse.Namespace) -> float:
    """Peak RSS (MB) of a child that loads ``dataset`` and runs one epoch and one validation pass of ``side``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--datasets", dataset,
           "--threads", args.threads, "--max-train", str(args.max_train), "--data-root", str(args.data_root),
           "--cache-dir", str(args.cache_dir)] + [a for s in args.set for a in ("--set", s)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"])


def peak_rss_mb() -> float:
    """This process's peak resident set, MB: ``VmHWM``, which ``exec`` resets (``ru_maxrss`` keeps the peak of
    the process that forked it, so a child of a large parent would report the parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_child(args: argparse.Namespace) -> int:
    exp = load_experiment(args.datasets[0], args)
    split = train_split(exp, args.max_train)
    side = (xmask_side if args.child == "xmask" else gin_side)(exp, split)
    side.epoch()
    side.evaluate()
    print(json.dumps({"peak_rss_mb": peak_rss_mb()}))
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| dataset | xmask epoch s (range) | GIN epoch s (range) | ratio (range) | xmask / GIN stall | "
             "xmask / GIN val pass s | peak RSS xmask / GIN GB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        x, g, q = r["xmask"], r["gin"], r["epoch_ratio"]
        peak = r.get("peak_rss_gb")
        mem = "-" if peak is None else f"{peak['xmask']:.2f} / {peak['gin']:.2f}"
        lines.append(
            f"| {r['dataset']} | {x['epoch_s']['median']:.2f} ({x['epoch_s']['min']:.2f}-{x['epoch_s']['max']:.2f}) "
            f"| {g['epoch_s']['median']:.2f} ({g['epoch_s']['min']:.2f}-{g['epoch_s']['max']:.2f}) "
            f"| {q['median']:.2f}x ({q['min']:.2f}-{q['max']:.2f}) "
            f"| {100 * x['stall']['median']:.1f} % / {100 * g['stall']['median']:.1f} % "
            f"| {x['eval_s']['median']:.2f} / {g['eval_s']['median']:.2f} "
            f"| {mem} |")
    return "\n".join(lines)


def memory_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| dataset | peak RSS xmask GB | peak RSS GIN GB |", "|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['peak_rss_gb']['xmask']:.2f} | {r['peak_rss_gb']['gin']:.2f} |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=lambda s: s.split(","), default=list(PRESETS))
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds of one epoch per side")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (the log-mask cache fills)")
    p.add_argument("--max-train", type=int, default=0, help="cut the training split to this many graphs (0: all)")
    p.add_argument("--threads", default="1", help="threads for torch / numba / BLAS, or 'auto' (xmask's choice)")
    p.add_argument("--load", type=int, default=0, help="busy processes running during the timing")
    p.add_argument("--memory", action="store_true", help="peak RSS of each side in its own child process")
    p.add_argument("--no-timing", action="store_true", help="with --memory: the peaks only")
    p.add_argument("--set", action="append", default=[], help="preset override KEY=VALUE (both sides read it)")
    p.add_argument("--data-root", type=Path, default=Path(os.environ.get("XMASK_DATA_ROOT", REPO.parent / "shared"
                                                                       / "datasets")))
    p.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("XMASK_CACHE", REPO / "cache")))
    p.add_argument("--out", type=Path, default=HERE / "out" / "graph_speed.json")
    p.add_argument("--child", choices=("xmask", "gin"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.datasets) - set(PRESETS)
    if unknown:
        p.error(f"unknown dataset(s) {sorted(unknown)}; choose among {list(PRESETS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pin_threads(args.threads)
    if args.child:
        return run_child(args)
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=busy, args=(stop,), daemon=True) for _ in range(args.load)]
    for b in burners:
        b.start()
    rows = []
    try:
        for dataset in args.datasets:
            row = {"dataset": dataset} if args.no_timing else time_dataset(dataset, args)
            row["load_average_end"] = list(os.getloadavg())
            if args.memory:
                row["peak_rss_gb"] = {s: child_peak(s, dataset, args) / 1024.0 for s in ("xmask", "gin")}
                limit = PEAK_GB_MAX.get(dataset)
                row["pass_peak"] = None if limit is None else row["peak_rss_gb"]["xmask"] <= limit
            rows.append(row)
    finally:
        stop.set()
        for b in burners:
            b.join()
    import torch

    env = {"threads": args.threads, "torch_threads": torch.get_num_threads(), "load": args.load,
           "rounds": args.rounds, "max_train": args.max_train, "cpu_count": os.cpu_count(),
           "set": list(args.set), "load_average_end": list(os.getloadavg())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from xmask_cli.fs import atomic_write

    text = json.dumps({"environment": env, "rows": rows}, indent=2) + "\n"
    atomic_write(args.out, lambda f: f.write(text.encode()))
    print(memory_table(rows) if args.no_timing else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
