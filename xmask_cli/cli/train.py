"""``xmask train``: one run folder per seed."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from xmask_cli.cli.app import (EXIT_HELP, CacheDirOpt, DataRootOpt, DatasetOpt, DeviceOpt, FormatOpt, OfflineOpt,
                               PresetOpt, SetOpt, handle_errors, output_for, run_preset)
from xmask_cli.errors import UsageError
from xmask_cli.render import train as render

def train(
    ctx: typer.Context,
    preset: PresetOpt = None,
    dataset: DatasetOpt = None,
    set_: SetOpt = None,
    seed: Annotated[Optional[int], typer.Option("--seed", min=0, help="One seed (default 0).", show_default=False)] = None,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="A sweep: 0-4, 0,2,7 or 0-2,9; writes aggregate.json (mean ± std).", show_default=False)] = None,
    device: DeviceOpt = "auto",
    resume: Annotated[bool, typer.Option("--resume", help="Continue killed runs from their last.pt (finished ones are only re-reported); refused when the config differs in more than train.epochs.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run folders' previous runs (without it an existing run is refused).")] = False,
    runs_dir: Annotated[Optional[Path], typer.Option("--runs-dir", help="Root of run folders [default: the preset's run.root, ./runs].", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Run name: `runs/<name>/<seed>/` [default `<dataset>-<level>`].", show_default=False)] = None,
    logger: Annotated[Optional[list[str]], typer.Option("--logger", help="Extra logger, repeatable: tensorboard (event files in each run folder; pip install \"xmask[tensorboard]\"). Same as --set train.loggers=[tensorboard].", show_default=False)] = None,
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Train the X-LogSMask transformer; one run folder per seed.

    Node, link, edge-regression and graph tasks share one engine. The structure
    cache is read (and prepared first when missing). Early stopping and the
    restored checkpoint are chosen on validation only; test is reported.
    Each run writes `runs/<name>/<seed>/`: config.json (resolved), metrics.jsonl,
    best.pt, last.pt, summary.json, curves.png (loss and metrics per epoch, the
    selected epoch marked; also written when a run stops early on Ctrl-C or a
    diverged loss). A folder holding a run is refused unless
    --resume or --overwrite is given; a folder is locked while a run writes it.

    Examples:

        xmask train --preset graph-level

        xmask train --preset graph-level --dataset PROTEINS --seeds 0-4 --data-root ../shared/datasets

        xmask train --preset node-level --dataset cora --set model.layers=1 --set train.epochs=200

        xmask train --preset link-level --dataset cora --format json > link.json

        xmask train --preset edge-regression --set edge.file=flights.csv

        xmask train --preset graph-level --seeds 0-4 --resume

        xmask train --preset node-level --dataset cora --logger tensorboard
    """
    from xmask_cli import config as C
    from xmask_cli.engine.experiment import parse_seeds, resolve_device, train_seeds
    from xmask_cli.prepare import resolve_cache_dir

    from xmask_cli.engine.distributed import env_rank

    out = output_for(ctx, fmt)
    rank = env_rank()
    if rank != 0:  # under torchrun only rank 0 logs and prints results (errors still show, from any rank)
        out = dataclasses.replace(out, quiet=True)
    if seed is not None and seeds is not None:
        raise UsageError("give --seed or --seeds, not both")
    seed_list = parse_seeds(seeds if seeds is not None else seed)
    preset, overrides = run_preset(preset, dataset, set_)
    if name is not None:
        overrides.append(f"run.name={name}")
    if logger:
        overrides.append(f"train.loggers=[{','.join(logger)}]")
    cfg = C.resolve(preset, overrides)
    dev = resolve_device(device)
    tty_bar = not (out.json or out.quiet) and sys.stderr.isatty()
    every = max(1, cfg.train.epochs // 10)

    with out.progress("train", total=cfg.train.epochs) as bar:
        state = {"seed": seed_list[0]}

        def on_seed_start(s: int, epochs: int) -> None:
            state["seed"] = s
            bar(0, epochs)

        def on_epoch(s: int, row: dict[str, Any]) -> None:
            bar(row["epoch"] + 1, cfg.train.epochs)
            if not tty_bar and (row["epoch"] % every == 0):
                vals = " ".join(f"{k} {v:.4f}" for k, v in row.items() if k.startswith("val_"))
                out.log(f"seed {s} epoch {row['epoch']}: loss {row['loss']:.4f} {vals}")

        result = train_seeds(cfg, seed_list, device=dev, cache_dir=resolve_cache_dir(cache_dir),
                             data_root=data_root, offline=True if offline else None, run_root=runs_dir,
                             resume=resume, overwrite=overwrite, log=out.log, on_epoch=on_epoch,
                             on_seed_start=on_seed_start)

    if rank == 0:
        out.result(result, lambda con: render.human(con, result))


def register(app: typer.Typer) -> None:
    """Add ``xmask train`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(train))
