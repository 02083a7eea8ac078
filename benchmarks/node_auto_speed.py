#!/usr/bin/env python
"""``node.mode: auto`` on a preset: its full-graph epoch beside the query-batch epoch, alternated in one process.

Builds the preset's node task twice from one loaded experiment, as shipped (``auto``: one full-graph sparse
step an epoch where the step fits ``node.memory_gb``) and with ``node.mode=query`` (its ``query_batch``
training queries per step), each with its own model and AdamW. Then, for ``--rounds`` rounds (the order
alternated every round, so both sides share the machine's load), each side trains ``--epochs`` epochs: its
training steps plus the validation pass, as ``xmask train`` runs an epoch. Per epoch the wall time and the
process's CPU time are recorded (run with one thread: on a shared machine the CPU time is the figure that
depends least on the load); the first epoch of each side (kernel compilation, CSR plans) is dropped.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/node_auto_speed.py --preset computers \\
        --data-root /work/shared/datasets --cache-dir /tmp/cache --out benchmarks/out/node_auto_speed_computers.json

Writes the JSON given by ``--out`` and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any


def _side(cfg: Any, cache_dir: Path, data_root: Path) -> tuple[Any, Any, Any]:
    """(task, model, optimizer) of ``cfg`` for seed 0 on the CPU."""
    import torch

    from xmask_cli.engine.runs.experiment import Experiment
    from xmask_cli.engine.training.loop import seed_everything
    from xmask_cli.model.network import XMaskNet

    exp = Experiment.load(cfg, cache_dir=cache_dir, data_root=data_root, offline=True)
    seed_everything(0)
    task = exp.task(0, "cpu")
    model = XMaskNet(exp.model_config(task))
    return task, model, torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)


def _epoch(task: Any, model: Any, opt: Any, epoch: int) -> tuple[float, float, float]:
    """One epoch (training steps, then the validation pass): ``(wall s, CPU s, val accuracy)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    model.train()
    for batch in task.train_batches(epoch):
        opt.zero_grad(set_to_none=True)
        loss, _ = task.loss(model, batch)
        loss.backward()
        opt.step()
    val, _ = task.evaluate(model, "val")
    return time.perf_counter() - wall, time.process_time() - cpu, float(val)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--data-root", type=Path, required=True)
    p.add_argument("--cache-dir", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3, help="epochs per side and round")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    import torch

    from xmask_cli.config_resolve import resolve
    torch.set_num_threads(1)
    sides = {"auto": resolve(args.preset), "query": resolve(args.preset, ["node.mode=query"])}
    built = {name: _side(cfg, args.cache_dir, args.data_root) for name, cfg in sides.items()}
    modes = {name: f"{b[0].mode} ({b[0].attention})" for name, b in built.items()}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    done = {name: 0 for name in sides}
    for name, (task, model, opt) in built.items():  # warm-up epoch each (compilation, plans): not counted
        _epoch(task, model, opt, 0)
        done[name] = 1
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(list(sides)))
        for name in order:
            task, model, opt = built[name]
            for _ in range(args.epochs):
                wall, cpu, val = _epoch(task, model, opt, done[name])
                rows[name].append({"round": r, "epoch": done[name], "wall_s": wall, "cpu_s": cpu, "val": val})
                done[name] += 1
        load.append(os.getloadavg()[0])

    def stats(name: str, key: str) -> dict[str, float]:
        xs = [row[key] for row in rows[name]]
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    out = {"preset": args.preset, "modes": modes, "rounds": args.rounds, "epochs_per_round": args.epochs,
           "threads": 1, "load_1min": load,
           "full_step_gib": None if built["auto"][0].full_step is None else built["auto"][0].full_step.total / 2**30,
           "sides": {name: {"wall_s": stats(name, "wall_s"), "cpu_s": stats(name, "cpu_s"), "epochs": rows[name]}
                     for name in sides},
           "cpu_ratio_auto_over_query": stats("auto", "cpu_s")["median"] / stats("query", "cpu_s")["median"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    tmp.replace(args.out)
    print(json.dumps({k: v for k, v in out.items() if k != "sides"} | {
        name: {"wall_s": s["wall_s"], "cpu_s": s["cpu_s"]} for name, s in out["sides"].items()}, indent=2))


if __name__ == "__main__":
    main()
