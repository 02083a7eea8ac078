"""PROTEINS training epoch with 1 and 2 data-parallel processes (gloo, CPU), and the all-reduce share of a step.

Each process uses one torch thread. Both jobs run the engine's own strategy
(``engine.training.distributed.make_strategy``); the 2-process one is ``DDPStrategy``: DDP, ``shard_batches``
(the size buckets dealt by rank) and its weighted backward with its per-step item-count all-reduce. The
gradient all-reduce is timed by a DDP communication hook (the default all-reduce, each bucket
timed from the hook's call to its future's completion; buckets overlap the backward, so this is
the time spent in all-reduce, not all of it exposed); the item-count all-reduce is timed around
its call. Epoch time is the training pass only (validation excluded); the first epoch (DDP's
static-graph discovery, allocator warm-up) is reported apart.

    nice -n 10 python benchmarks/ddp_speed.py --data-root /work/shared/datasets --epochs 3

Prints one JSON document on stdout.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _experiment(args: argparse.Namespace):
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import Experiment

    cfg = resolve("proteins", [f"train.batch_size={args.batch_size}"])
    return Experiment.load(cfg, cache_dir=Path(args.cache_dir), data_root=args.data_root, offline=True)


def _worker(rank: int, size: int, init_file: str, args: argparse.Namespace, out_dir: str) -> None:
    from xmask_cli.engine.training import distributed, loop
    from xmask_cli.engine.training.precision import Precision
    from xmask_cli.model.network import XMaskNet

    torch.set_num_threads(1)
    if size > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=1800))
    w = distributed.world()
    exp = _experiment(args)
    task = exp.task(0, "cpu")
    loop.seed_everything(0)
    model = XMaskNet(exp.model_config(task))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    comm: list[float] = []  # seconds in gradient all-reduce (per bucket)
    counts: list[float] = []  # seconds in the per-step item-count all-reduce
    strategy = distributed.make_strategy(Precision("fp32", "cpu"), torch.device("cpu"))
    strategy.setup(model)
    if isinstance(strategy, distributed.DDPStrategy) and strategy.ddp is not None:
        ddp = strategy.ddp

        def timed_allreduce(state, bucket):
            t0 = time.perf_counter()
            fut = dist.all_reduce(bucket.buffer().div_(w.size), async_op=True).get_future()

            def done(f):
                comm.append(time.perf_counter() - t0)
                return f.value()[0]
            return fut.then(done)

        ddp.register_comm_hook(None, timed_allreduce)
        plain_sum = distributed.all_sum

        def timed_sum(values, device):
            t0 = time.perf_counter()
            try:
                return plain_sum(values, device)
            finally:
                counts.append(time.perf_counter() - t0)
        distributed.all_sum = timed_sum  # the strategy looks it up at call time

    epochs = []
    for epoch in range(args.epochs):
        comm.clear()
        counts.clear()
        model.train()
        steps = 0
        t0 = time.perf_counter()
        for batch, real in strategy.batches(task, epoch, 0):
            opt.zero_grad(set_to_none=True)
            strategy.backward(task, model, batch, real)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            steps += 1
        epochs.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "steps": steps,
                       "grad_allreduce_s": sum(comm), "count_allreduce_s": sum(counts)})
    with open(Path(out_dir) / f"rank{rank}.json", "w") as fh:
        json.dump(epochs, fh)
    if w.distributed:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "xmask-bench-cache"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    exp = _experiment(args)  # prepares the cache once, before any timing
    result = {"dataset": "PROTEINS", "train_graphs": int(len(exp.task(0, "cpu").split.train)),
              "batch_size": args.batch_size, "threads_per_process": 1, "epochs": args.epochs,
              "load_before": os.getloadavg(), "runs": {}}
    for size in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_worker, args=(size, os.path.join(tmp, "rdzv"), args, tmp), nprocs=size, join=True)
            ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(size)]
        later = [max(r[e]["seconds"] for r in ranks) for e in range(1, args.epochs)] or [ranks[0][0]["seconds"]]
        step_s = sum(ranks[0][e]["seconds"] for e in range(1, args.epochs)) / max(
            sum(ranks[0][e]["steps"] for e in range(1, args.epochs)), 1)
        grad = [sum(r[e]["grad_allreduce_s"] for e in range(1, args.epochs)) for r in ranks]
        count = [sum(r[e]["count_allreduce_s"] for e in range(1, args.epochs)) for r in ranks]
        total = [sum(r[e]["seconds"] for e in range(1, args.epochs)) for r in ranks]
        result["runs"][str(size)] = {
            "first_epoch_s": max(r[0]["seconds"] for r in ranks),
            "epoch_s": sum(later) / len(later), "steps_per_epoch": ranks[0][-1]["steps"], "step_s": step_s,
            "grad_allreduce_share": [g / t for g, t in zip(grad, total)],
            "count_allreduce_share": [c / t for c, t in zip(count, total)],
            "per_rank_epochs": ranks,
        }
    r1, r2 = result["runs"]["1"], result["runs"]["2"]
    result["speedup"] = r1["epoch_s"] / r2["epoch_s"]
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
