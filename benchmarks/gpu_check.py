#!/usr/bin/env python
"""GPU check: does xmask train on CUDA as it does on CPU, and how fast?

Ready for the day a GPU is lent; under 5 minutes on one GPU. Steps:

1. **First step, CUDA against CPU.** For Cora (full graph, the dense SDPA path
   and the sparse CSR path) and PROTEINS (size-bucketed graph batches, dense),
   the same model (seed 0, dropout off so both devices draw nothing) takes
   its first training batch on CPU and on CUDA: the losses must agree to
   ``--loss-rtol`` (default 1e-4, relative) and every gradient to
   ``--grad-rtol`` (default 1e-3 of that parameter's largest CPU gradient;
   float32 reductions run in another order on the GPU).
2. **Backends.** Median seconds per Cora training step (forward, loss,
   backward, AdamW) for ``sdpa`` (dense) and ``sparse`` (CSR kernel), each in
   fp32 and bf16 (autocast), with the peak GPU memory of each; and
   FlexAttention (``torch.nn.attention.flex_attention``, compiled on CUDA)
   against SDPA on Cora's dense mask: output and q/k/v gradients to
   ``--grad-rtol`` and the time of each (on CPU the forward only: torch 2.13
   has no flex backward on CPU). xmask has no flex path yet; this measures
   whether one would pay.
3. **Training.** ``xmask``'s own engine (``train_seeds``) trains Cora and
   PROTEINS for ``--epochs`` epochs from seed 0 on CUDA and on CPU; reported:
   steps/s, the input stall (share of each epoch spent waiting for batches,
   from ``metrics.jsonl``), the best validation metric, and the peak GPU
   memory.

Exit codes: 0 all checks passed; 1 a CUDA/CPU mismatch; 2 an error (the
message names the step); 3 no CUDA device (nothing was run; ``--cpu-only``
runs the CPU half as a smoke test).

Usage (from the repository root)::

    python benchmarks/gpu_check.py --data-root ../shared/datasets
    python benchmarks/gpu_check.py --cpu-only --datasets cora --epochs 1 --steps 2

Prints a report (``--format human|json``) on stdout, progress on stderr, and
writes the JSON to ``--out`` (default ``benchmarks/out/gpu_check.json``).
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR, EXIT_NO_CUDA = 0, 1, 2, 3
DEFAULT_DATA_ROOT = Path(os.environ.get("XMASK_DATA_ROOT") or REPO.parent / "shared" / "datasets")
DATASETS = {"cora": ("node-level", "Cora"), "proteins": ("graph-level", "PROTEINS")}


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


def _config(dataset: str, extra: list[str]) -> Any:
    from xmask_cli.config_resolve import resolve

    preset, name = DATASETS[dataset]
    return resolve(preset, [f"data.dataset={name}", *extra])


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _first_batch(task: Any) -> Any:
    return next(iter(task.train_batches(0)))


def first_step(exp: Any, device: str, loss_rtol: float, grad_rtol: float) -> dict[str, Any]:
    """Loss and gradients of the first training batch on CPU and on ``device`` (same weights, no dropout)."""

    from xmask_cli.engine.training.loop import seed_everything
    from xmask_cli.model.network import XMaskNet

    seed_everything(0)
    task_cpu, task_dev = exp.task(0, "cpu"), exp.task(0, device)
    model_cpu = XMaskNet(exp.model_config(task_cpu))
    model_dev = copy.deepcopy(model_cpu).to(device)
    losses, grads = {}, {}
    for name, task, model in (("cpu", task_cpu, model_cpu), (device, task_dev, model_dev)):
        model.train()
        model.zero_grad(set_to_none=True)
        loss, _ = task.loss(model, _first_batch(task))
        loss.backward()
        losses[name] = float(loss.detach())
        grads[name] = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters() if p.grad is not None}
    loss_rel = abs(losses[device] - losses["cpu"]) / max(abs(losses["cpu"]), 1e-30)
    worst, worst_name = 0.0, None
    if grads["cpu"].keys() != grads[device].keys():
        worst, worst_name = float("inf"), "parameters with a gradient differ"
    else:
        for n, g in grads["cpu"].items():
            scale = float(g.abs().max())
            err = float((grads[device][n] - g).abs().max()) / scale if scale > 0 else float(grads[device][n].abs().max())
            if err > worst:
                worst, worst_name = err, n
    ok = loss_rel <= loss_rtol and worst <= grad_rtol
    return {"attention": getattr(task_cpu, "attention", None), "loss_cpu": losses["cpu"], "loss_device": losses[device],
            "loss_rel": loss_rel, "grad_rel_max": worst, "grad_worst": worst_name, "loss_rtol": loss_rtol,
            "grad_rtol": grad_rtol, "pass": bool(ok)}


def backend_times(exp_for: Callable[[str], Any], device: str, steps: int) -> list[dict[str, Any]]:
    """Median seconds of a Cora training step per attention backend and precision on ``device``."""
    import torch

    from xmask_cli.engine.training.loop import seed_everything
    from xmask_cli.engine.training.precision import autocast, check_precision
    from xmask_cli.model.network import XMaskNet

    rows = []
    for backend, attention in (("sdpa", "dense"), ("sparse", "sparse")):
        exp = exp_for(attention)
        for precision in ("fp32", "bf16"):
            check_precision(precision, device)
            seed_everything(0)
            task = exp.task(0, device)
            model = XMaskNet(exp.model_config(task)).to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            batch = _first_batch(task)

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                with autocast(precision, device):
                    loss, _ = task.loss(model, batch)
                loss.backward()
                opt.step()

            model.train()
            step()  # warm-up (CSR plan, cuDNN/cuBLAS handles)
            if device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats(device)
            times = []
            for _ in range(steps):
                _sync(device)
                t = time.perf_counter()
                step()
                _sync(device)
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            rows.append({"dataset": "cora", "backend": backend, "precision": precision, "step_s": med,
                         "steps_per_s": 1.0 / med if med > 0 else None,
                         "peak_gpu_mb": (torch.cuda.max_memory_allocated(device) / 2 ** 20
                                         if device.startswith("cuda") else None)})
            log(f"{device} cora {backend} {precision}: {med * 1000:.1f} ms/step")
    return rows


def flex_check(exp: Any, device: str, steps: int, rtol: float) -> dict[str, Any]:
    """FlexAttention against SDPA on Cora's dense attention mask (the model's own, all 4 heads).

    ``score_mod`` adds the mask (X-LogSMask term, ``-inf`` outside each head's
    support) to the scaled logits. On CUDA flex is compiled and checked on the
    output and the q/k/v gradients; on CPU torch 2.13 has no flex backward, so
    the forward only (eager). Returns the relative errors and median seconds.
    """
    import warnings

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import flex_attention

    from xmask_cli.cache import StructureCache
    from xmask_cli.model.logsmask import DenseStructure
    from xmask_cli.model.network import XMaskNet

    task = exp.task(0, "cpu")
    model = XMaskNet(exp.model_config(task))
    with StructureCache(exp.cache_path) as cache:
        powers = torch.from_numpy(cache.dense_powers(0)).unsqueeze(0)
    heads, d_h = model.cfg.heads, model.cfg.hidden // model.cfg.heads
    with torch.no_grad():
        bias = model.bias(DenseStructure(powers=powers, mask=torch.ones(1, powers.size(-1), dtype=torch.bool)))
        mask = model.blocks[0].attn.dense_mask(bias, None, torch.float32).to(device)
    n = mask.size(-1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d_h, generator=g).to(device) for _ in range(3))
    full = mask.expand(1, heads, n, n)
    backward = device.startswith("cuda")

    def score_mod(score, b, h, qi, ki):
        return score + full[b, h, qi, ki]

    flex = torch.compile(flex_attention) if backward else flex_attention

    def run(kind: str) -> tuple[Any, list[Any]]:
        qq, kk, vv = (t.clone().requires_grad_(backward) for t in (q, k, v))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager flex on CPU warns that it is unfused
            out = flex(qq, kk, vv, score_mod=score_mod) if kind == "flex" else F.scaled_dot_product_attention(
                qq, kk, vv, attn_mask=mask)
        grads = list(torch.autograd.grad(out, (qq, kk, vv), torch.ones_like(out))) if backward else []
        return out.detach(), grads

    def timed(kind: str) -> float:
        times = []
        for _ in range(steps):
            _sync(device)
            t = time.perf_counter()
            run(kind)
            _sync(device)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    (out_f, grad_f), (out_s, grad_s) = run("flex"), run("sdpa")  # also the warm-up (compile)

    def rel(a: Any, b: Any) -> float:
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))

    out_rel = rel(out_f, out_s)
    grad_rel = max((rel(a, b) for a, b in zip(grad_f, grad_s)), default=None)
    ok = out_rel <= rtol and (grad_rel is None or grad_rel <= rtol)
    return {"dataset": "cora", "backend": "flex", "against": "sdpa", "backward": backward, "out_rel": out_rel,
            "grad_rel": grad_rel, "rtol": rtol, "flex_s": timed("flex"), "sdpa_s": timed("sdpa"), "pass": bool(ok)}


def train_runs(dataset: str, device: str, epochs: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train ``dataset`` with xmask's engine for ``epochs`` epochs on ``device``; timing from metrics.jsonl."""
    import torch

    from xmask_cli.engine.runs.folder import RunDir, input_stall
    from xmask_cli.engine.runs.sweep import train_seeds

    cfg = _config(dataset, [f"train.epochs={epochs}", f"train.patience={epochs}"])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    t = time.perf_counter()
    result = train_seeds(cfg, [0], device=device, cache_dir=args.cache_dir, data_root=args.data_root, offline=True,
                         run_root=root / device.replace(":", "-") / dataset, overwrite=True)
    wall = time.perf_counter() - t
    run = result["runs"][0]
    rows = RunDir(run["run_dir"]).read_metrics()
    train_s = sum(r.get("train_s", 0.0) for r in rows)
    return {"dataset": dataset, "device": device, "epochs": len(rows), "wall_s": wall,
            "epoch_s": train_s / max(len(rows), 1), "input_stall": input_stall(rows),
            "val": run["metrics"]["val"], "metric": result["metric"],
            "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.startswith("cuda") else None}


def check(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """Run every step; returns the exit code and the report."""
    import torch

    from xmask_cli.engine.runs.experiment import Experiment

    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                              "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
                              "device_name": torch.cuda.get_device_name(0) if cuda else None,
                              "cpu_only": args.cpu_only, "first_step": [], "backends": [], "flex": [], "training": [],
                              "errors": []}
    if not cuda and not args.cpu_only:
        report["errors"].append("no CUDA device: torch.cuda.is_available() is False")
        return EXIT_NO_CUDA, report
    devices = ["cpu"] if args.cpu_only else [args.device, "cpu"]
    torch.set_num_threads(args.threads)
    code = EXIT_OK

    def step(label: str, fn: Callable[[], Any]) -> Any:
        nonlocal code
        log(label)
        try:
            return fn()
        except Exception as exc:  # one failing step must not hide the others' figures
            report["errors"].append(f"{label}: {type(exc).__name__}: {exc}")
            log(traceback.format_exc().strip().splitlines()[-1])
            code = EXIT_ERROR
            return None

    exps: dict[tuple[str, str], Any] = {}

    def exp_for(dataset: str, attention: str = "auto") -> Any:
        key = (dataset, attention)
        if key not in exps:
            extra = ["model.dropout=0.0", "model.attn_dropout=0.0", "model.input_dropout=0.0"]
            if dataset == "cora":
                extra.append(f"node.attention={attention}")
            exps[key] = Experiment.load(_config(dataset, extra), cache_dir=args.cache_dir, data_root=args.data_root,
                                        offline=True, log=log)
        return exps[key]

    if not args.cpu_only:
        cases = [("cora", "dense"), ("cora", "sparse")] * ("cora" in args.datasets) + [("proteins", "auto")] * (
            "proteins" in args.datasets)
        for dataset, attention in cases:
            r = step(f"first step cpu vs {args.device}: {dataset} ({attention})",
                     lambda: first_step(exp_for(dataset, attention), args.device, args.loss_rtol, args.grad_rtol))
            if r is not None:
                report["first_step"].append({"dataset": dataset, **r})
                if not r["pass"] and code == EXIT_OK:
                    code = EXIT_MISMATCH
    if "cora" in args.datasets and not args.skip_backends:
        for device in devices:
            rows = step(f"backend step times on {device}", lambda: backend_times(lambda a: exp_for("cora", a), device,
                                                                               args.steps))
            report["backends"] += [{"device": device, **r} for r in rows or []]
            if not args.skip_flex:
                r = step(f"flex vs sdpa on {device}", lambda: flex_check(exp_for("cora", "dense"), device,
                                                                       args.steps, args.grad_rtol))
                if r is not None:
                    report["flex"].append({"device": device, **r})
                    if not r["pass"] and code == EXIT_OK:
                        code = EXIT_MISMATCH
    with tempfile.TemporaryDirectory(prefix="xmask-gpu-check-") as tmp:
        for dataset in args.datasets:
            for device in devices:
                r = step(f"train {dataset} on {device} for {args.epochs} epochs",
                         lambda: train_runs(dataset, device, args.epochs, args, Path(tmp)))
                if r is not None:
                    report["training"].append(r)
    return code, report


def human(code: int, report: dict[str, Any]) -> str:
    lines = [f"gpu_check: {['passed', 'MISMATCH', 'ERROR', 'no CUDA device'][code]} "
             f"(torch {report['torch']}, CUDA {report['cuda']}, {report['device_name'] or 'no GPU'})"]
    for r in report["first_step"]:
        lines.append(f"first step {r['dataset']} ({r['attention']}): loss cpu {r['loss_cpu']:.6f} device "
                     f"{r['loss_device']:.6f} (rel {r['loss_rel']:.1e} <= {r['loss_rtol']:g}?), grads max rel "
                     f"{r['grad_rel_max']:.1e} at {r['grad_worst']} (<= {r['grad_rtol']:g}?): "
                     f"{'ok' if r['pass'] else 'MISMATCH'}")
    for r in report["backends"]:
        mem = "" if r["peak_gpu_mb"] is None else f", peak {r['peak_gpu_mb']:.0f} MB"
        lines.append(f"{r['device']} cora {r['backend']} {r['precision']}: {1000 * r['step_s']:.1f} ms/step "
                     f"({r['steps_per_s']:.1f} steps/s){mem}")
    for r in report["flex"]:
        grad = "" if r["grad_rel"] is None else f", grads rel {r['grad_rel']:.1e}"
        lines.append(f"{r['device']} cora flex vs sdpa ({'forward and backward' if r['backward'] else 'forward only'}): "
                     f"out rel {r['out_rel']:.1e}{grad} (<= {r['rtol']:g}?): {'ok' if r['pass'] else 'MISMATCH'}; "
                     f"flex {1000 * r['flex_s']:.1f} ms, sdpa {1000 * r['sdpa_s']:.1f} ms")
    for r in report["training"]:
        mem = "" if r["peak_gpu_mb"] is None else f", peak {r['peak_gpu_mb']:.0f} MB"
        stall = "n/a" if r["input_stall"] is None else f"{100 * r['input_stall']:.1f} %"
        lines.append(f"{r['device']} train {r['dataset']}: {r['epochs']} epochs, {r['epoch_s']:.2f} s/epoch, "
                     f"input stall {stall}, val {r['metric']} {r['val']:.4f}, wall {r['wall_s']:.1f} s{mem}")
    lines += [f"error: {e}" for e in report["errors"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    p.add_argument("--cache-dir", type=Path, default=None, help="structure caches (default: a temporary dir)")
    p.add_argument("--device", default="cuda", help="the GPU to check (default: %(default)s)")
    p.add_argument("--cpu-only", action="store_true", help="run the CPU half only (smoke test without a GPU)")
    p.add_argument("--datasets", default="cora,proteins", help="among cora,proteins (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=3, help="training epochs per dataset and device")
    p.add_argument("--steps", type=int, default=5, help="timed steps per backend (median)")
    p.add_argument("--skip-backends", action="store_true", help="skip the backend step times (and flex)")
    p.add_argument("--skip-flex", action="store_true", help="skip the FlexAttention check")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    p.add_argument("--grad-rtol", type=float, default=1e-3)
    p.add_argument("--format", choices=("human", "json"), default="human")
    p.add_argument("--out", type=Path, default=HERE / "out" / "gpu_check.json")
    args = p.parse_args(argv)
    args.datasets = [d.strip().lower() for d in args.datasets.split(",") if d.strip()]
    bad = [d for d in args.datasets if d not in DATASETS]
    if bad:
        print(f"error: unknown dataset {bad[0]!r} for --datasets; choose among {', '.join(DATASETS)}", file=sys.stderr)
        return EXIT_ERROR
    tmp = tempfile.TemporaryDirectory(prefix="xmask-gpu-cache-") if args.cache_dir is None else None
    args.cache_dir = args.cache_dir or Path(tmp.name)
    try:
        code, report = check(args)
    finally:
        if tmp is not None:
            tmp.cleanup()
    report["exit_code"] = code
    args.out.parent.mkdir(parents=True, exist_ok=True)
    part = args.out.with_name(args.out.name + ".tmp")
    part.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(part, args.out)
    print(json.dumps(report, indent=2) if args.format == "json" else human(code, report))
    if code == EXIT_NO_CUDA:
        print("error: no CUDA device here (torch.cuda.is_available() is False); run on a GPU machine, "
              "or pass --cpu-only for the CPU half", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
