"""``xmask train --dry-run``'s memory estimate against the measured peak of real training steps.

Per preset, in a child process of its own (so the allocator settings below hold from its start):

* the estimate: :func:`xmask_cli.engine.dryrun.dry_run` on the preset, as ``xmask train --dry-run``
  prints it (parameters, model state, the largest possible step: the ``batch_size`` largest graphs), and
  the same memory model (:func:`xmask_cli.engine.estimate.step_bytes`) applied to each step actually
  drawn (its graphs' sizes), which is what a measurement can check;
* the measurement: the preset's experiment, task and model built as ``train`` builds them, one warm-up
  step, then every step of one epoch: before each, the gradients are dropped (``zero_grad(set_to_none)``,
  as the loop does), the batch is fetched, and the kernel's peak-RSS mark is reset
  (``/proc/self/clear_refs`` = 5); after it the step's own extra memory is ``VmHWM - VmRSS`` before
  it. With ``MALLOC_MMAP_THRESHOLD_=65536`` big tensors are mmapped and leave RSS when freed, so RSS
  follows live memory.

A preset passes when the estimate of the epoch's largest measured step is within ``TOLERANCE`` (30 %) of
its measurement. The memory model's two per-shape constants were measured on MUTAG (graph-level) and Cora;
PROTEINS and CiteSeer check them on other data. Run from the repository
root (one torch thread, as the other benchmarks)::

    nice -n 5 python benchmarks/dry_run_memory.py --data-root /work/shared/datasets --cache-dir /tmp/xdry
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

#: The presets measured, each with the overrides that keep the run to one epoch.
PRESETS = {"graph-level": [], "cora": [], "proteins": [], "citeseer": []}
#: Largest relative gap between the estimated and the measured step memory that passes.
TOLERANCE = 0.30


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def within(estimate: float, measured: float, tolerance: float = TOLERANCE) -> bool:
    """Whether ``estimate`` lies within ``tolerance`` of ``measured`` (relative to the measurement)."""
    return measured > 0 and abs(estimate - measured) <= tolerance * measured


def measure(preset: str, data_root: str | None, cache_dir: str) -> dict:
    """The dry run's estimate and the measured steps of one epoch of ``preset`` (in this process)."""
    import torch

    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.distributed import make_strategy
    from xmask_cli.engine.dryrun import dry_run
    from xmask_cli.engine.estimate import graph_batch_shape, step_bytes
    from xmask_cli.engine.experiment import Experiment, _train_config
    from xmask_cli.engine.loop import seed_everything
    from xmask_cli.engine.optimisation import Optimisation
    from xmask_cli.engine.plan import make_plan
    from xmask_cli.engine.precision import Precision
    from xmask_cli.model.network import XMaskNet

    torch.set_num_threads(1)
    cfg = resolve(preset, ["train.epochs=1", *PRESETS[preset]])
    exp = Experiment.load(cfg, cache_dir=Path(cache_dir), data_root=data_root)  # prepares a missing cache
    plan = dry_run(make_plan(cfg, [0], run_root=Path(cache_dir) / "runs"), cache_dir=Path(cache_dir),
                   data_root=data_root)
    assert plan.estimate is not None and plan.estimate.step is not None, plan.notes
    seed_everything(0)
    task = exp.task(0, "cpu")
    model = XMaskNet(exp.model_config(task))
    train_cfg = _train_config(cfg, 0, "cpu")
    strategy = make_strategy(Precision(train_cfg.precision, "cpu"), torch.device("cpu"))
    opt = Optimisation.build(model, train_cfg, strategy.precision)
    model.train()

    def step(batch, real) -> None:
        loss, _, _ = strategy.backward(task, model, batch, real)
        opt.clip(model, train_cfg.clip_norm)
        opt.step()

    est = plan.estimate
    m = cfg.model

    def estimated(batch) -> int:
        """The memory model on this batch: its graphs' sizes (graph level); the whole graph (node level)."""
        if getattr(batch, "mask", None) is None:
            return est.step_bytes
        shape = graph_batch_shape([int(n) for n in batch.mask.sum(1)], m.heads, m.graph_layout,
                                  est.step.dropped_width)
        return step_bytes(shape, parameters=est.parameters, hidden=m.hidden, layers=m.layers)

    batches = list(strategy.batches(task, 0, 0))
    opt.optimizer.zero_grad(set_to_none=True)
    step(*batches[0])  # warm-up: the optimizer's state exists from here on, as in every later step
    steps = []
    for batch, real in batches:
        opt.optimizer.zero_grad(set_to_none=True)
        rss0 = _status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the peak mark back to the current RSS
        step(batch, real)
        steps.append(((_status_kb("VmHWM") - rss0) * 1024, estimated(batch)))
    measured, estimate = max(steps)
    return {"preset": preset, "dataset": plan.dataset, "parameters": est.parameters,
            "built_parameters": sum(p.numel() for p in model.parameters()), "steps": len(steps),
            "measured_step_bytes": measured, "estimated_step_bytes": estimate,
            "dry_run_step_bytes": est.step_bytes, "dry_run_largest_step": est.step.to_json(),
            "model_state_bytes": est.model_state_bytes, "within": within(estimate, measured),
            "all_steps": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--cache-dir", default="/tmp/xdry")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/out/dry_run_memory.json")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.data_root, args.cache_dir)))
        return 0
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    rows = []
    for preset in args.presets.split(","):
        cmd = [sys.executable, __file__, "--child", preset, "--cache-dir", args.cache_dir]
        cmd += ["--data-root", args.data_root] if args.data_root else []
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'preset':12} {'params':>8} {'built':>8} {'measured MiB':>12} {'estimate MiB':>12} {'gap':>7} "
          f"{'dry run MiB':>11}  ok")
    for r in rows:
        gap = r["estimated_step_bytes"] / r["measured_step_bytes"] - 1
        print(f"{r['preset']:12} {r['parameters']:8d} {r['built_parameters']:8d} "
              f"{r['measured_step_bytes'] / 2**20:12.1f} {r['estimated_step_bytes'] / 2**20:12.1f} {gap:+7.1%} "
              f"{r['dry_run_step_bytes'] / 2**20:11.1f}  {'yes' if r['within'] else 'NO'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"load": os.getloadavg(), "rows": rows}, indent=2) + "\n")
    return 0 if all(r["within"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
