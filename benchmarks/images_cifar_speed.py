"""Training speed of the Table 11 configurations on CIFAR-10: both arms, steps/s and peak memory.

For each preset (default: T3's X-LogSMask arm and its ViT arm) the task and model are built exactly
as ``xmask train`` builds them; after ``--warmup`` steps, ``--steps`` optimiser steps (AdamW, the
preset's batch size, gradient clipping as the loop does) are timed, synchronising the device.
Writes ``benchmarks/out/images/cifar_speed.json``.

    python benchmarks/images_cifar_speed.py --data-root ~/data --device cuda
    python benchmarks/images_cifar_speed.py --presets vit-cifar10-t1,vit-cifar10-t1-pe --device cuda
"""
from __future__ import annotations

import argparse
import itertools
import platform
import time
from pathlib import Path

import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.experiment import Experiment
from xmask_cli.engine.runs.folder import write_json
from xmask_cli.engine.runs.plan import resolve_device
from xmask_cli.model.network import XMaskNet


def measure(preset: str, overrides: list[str], args: argparse.Namespace, device: str) -> dict:
    cfg = resolve(preset, overrides)
    exp = Experiment.load(cfg, cache_dir=args.cache_dir, data_root=args.data_root)
    task = exp.task(0, device)
    torch.manual_seed(0)
    model = XMaskNet(exp.model_config(task)).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    if len(task.split.train) == 0:
        raise SystemExit(f"{preset}: no training images")
    batches = (b for epoch in itertools.count() for b in task.train_batches(epoch))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss, _ = task.loss(model, next(batches))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip_norm)
        opt.step()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    seconds = time.perf_counter() - t0
    steps_per_epoch = -(-len(task.split.train) // cfg.train.batch_size)
    row = {"preset": preset, "overrides": overrides, "batch_size": cfg.train.batch_size, "steps": args.steps,
           "steps_per_s": args.steps / seconds, "images_per_s": args.steps * cfg.train.batch_size / seconds,
           "seconds_per_epoch_est": steps_per_epoch * seconds / args.steps,
           "params": sum(p.numel() for p in model.parameters()),
           "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.startswith("cuda") else None}
    print(f"{preset}: {row['steps_per_s']:.2f} steps/s, {row['images_per_s']:.0f} images/s, "
          f"~{row['seconds_per_epoch_est']:.0f} s per epoch of {steps_per_epoch} steps", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="vit-cifar10-t3,vit-cifar10-t3-pe")
    ap.add_argument("--set", action="append", default=[], help="extra --set overrides for every preset")
    ap.add_argument("--data-root", type=Path, default=None)
    ap.add_argument("--cache-dir", type=Path, default=Path("cache"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "out" / "images" / "cifar_speed.json")
    args = ap.parse_args()
    device = resolve_device(args.device)
    rows = [measure(p.strip(), args.set, args, device) for p in args.presets.split(",") if p.strip()]
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor() or "cpu"
    write_json(args.out, {"device": device, "hardware": gpu, "torch": torch.__version__, "rows": rows,
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
