"""Paper 000 Table 12 on the offline digits: ViT + X-LogSMask vs ViT with positions (vs neither), 5 seeds.

Each (variant, seed) is trained exactly as ``xmask ablate --preset vit-digits --variants
full,no-logmask,positional --seeds 0-4`` trains it (same preset, same overrides, same split per seed,
selection on validation), timed epoch by epoch. Writes ``benchmarks/out/images/digits.json``.

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/images_digits.py [--seeds 0-4] [--variants ...] [--set k=v]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from xmask_cli.ablate import variant_overrides
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.folder import write_json
from xmask_cli.engine.runs.plan import parse_seeds
from xmask_cli.engine.runs.sweep import train_seeds

VARIANTS = ("full", "no-logmask", "positional")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="vit-digits")
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of ablate variants")
    ap.add_argument("--set", action="append", default=[], help="extra --set overrides for every variant")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "images" / "digits.json")
    ap.add_argument("--work", type=Path, default=Path("/tmp/xmask-bench-images"))
    ap.add_argument("--runs", default="runs", help="run folder under --work")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    base = resolve(args.preset, args.set)
    seeds = parse_seeds(args.seeds)
    rows = []
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        cfg = resolve(args.preset, [*args.set, *variant_overrides(variant, base), f"run.name=digits-{variant}"])
        per_seed = []
        for seed in seeds:
            folder = args.work / args.runs / f"digits-{variant}" / str(seed)
            timing = folder / "timing.json"
            if (folder / "summary.json").is_file() and timing.is_file():  # finished before: read back
                run = json.loads((folder / "summary.json").read_text())
                epoch_s, total = (json.loads(timing.read_text())[k] for k in ("seconds_per_epoch", "seconds_total"))
            else:
                stamps: list[float] = []
                t0 = time.perf_counter()
                result = train_seeds(cfg, [seed], device="cpu", cache_dir=args.work / "cache",
                                     run_root=args.work / args.runs, overwrite=True,
                                     on_epoch=lambda s, row: stamps.append(time.perf_counter()))
                total = time.perf_counter() - t0
                run = result["runs"][0]
                # Mean epoch (train + validation) after the first, which also builds the task.
                epoch_s = float(np.mean(np.diff([t0, *stamps])[1:])) if len(stamps) > 1 else total
                write_json(timing, {"seconds_per_epoch": epoch_s, "seconds_total": total})
            per_seed.append({"seed": seed, **{p: run["metrics"][p] for p in ("train", "val", "test")},
                             "best_epoch": run["best_epoch"], "epochs_run": run["epochs_run"],
                             "seconds_per_epoch": epoch_s, "seconds_total": total})
            print(f"{variant} seed {seed}: val {run['metrics']['val']:.4f} test {run['metrics']['test']:.4f} "
                  f"best epoch {run['best_epoch']} of {run['epochs_run']}, {epoch_s:.2f} s/epoch", flush=True)
        stats = {}
        for key in ("val", "test", "seconds_per_epoch"):
            v = np.array([r[key] for r in per_seed])
            stats[key] = {"mean": float(v.mean()), "std": float(v.std(ddof=0))}
        rows.append({"variant": variant, "overrides": variant_overrides(variant, base), "runs": per_seed, **stats})
    full = rows[0]["test"]["mean"]
    for r in rows:
        r["delta_test_vs_full"] = r["test"]["mean"] - full
    write_json(args.out, {
        "preset": args.preset, "overrides": args.set, "seeds": seeds, "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch_threads": 1,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()}",
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
