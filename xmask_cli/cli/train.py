"""``xmask train``: one run folder per seed."""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, DeviceOpt, FoldsOpt, FormatOpt, RunOptions, options
from xmask_cli.console import Bar, Output
from xmask_cli.errors import UsageError
from xmask_cli.render import train as render


def train(
    ctx: typer.Context,
    run: RunOptions = RunOptions(),
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="One seed (default 0).", show_default=False)] = None,
    seeds: Annotated[str | None, typer.Option("--seeds", help="A sweep: 0-4, 0,2,7 or 0-2,9; writes aggregate.json (mean ± std).", show_default=False)] = None,
    device: DeviceOpt = "auto",
    resume: Annotated[bool, typer.Option("--resume", help="Continue killed runs from their last.pt (finished ones are only re-reported); refused when the config differs in more than train.epochs.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run folders' previous runs (without it an existing run is refused).")] = False,
    runs_dir: Annotated[Path | None, typer.Option("--runs-dir", help="Root of run folders [default: the preset's run.root, ./runs].", show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", help="Run name: `runs/<name>/<seed>/` [default `<dataset>-<level>`].", show_default=False)] = None,
    folds: FoldsOpt = None,
    logger: Annotated[list[str] | None, typer.Option("--logger", help="Extra logger, repeatable: tensorboard (event files in each run folder; pip install \"xmask-cli[tensorboard]\"). Same as --set train.loggers=[tensorboard].", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write and train nothing: print the resolved config, the run folders it would make, the structure cache file it needs (present or to prepare) and an estimate of stored pairs, parameters and peak memory per step (the dataset is read offline).")] = False,
    data: DataOptions = DataOptions(),
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

        xmask train --dataset ./mygraph

        xmask train --preset edge-regression --set edge.file=flights.csv

        xmask train --preset graph-level --seeds 0-4 --resume

        xmask train --preset proteins --folds 10 --data-root ../shared/datasets --format json > proteins-10fold.json

        xmask train --preset node-level --dataset cora --logger tensorboard

        xmask train --preset proteins --seeds 0-4 --data-root ../shared/datasets --dry-run
    """
    from xmask_cli.api import train as train_runs
    from xmask_cli.engine.training.distributed import env_rank

    out = output_for(ctx, fmt)
    rank = env_rank()
    if rank != 0:  # under torchrun only rank 0 logs and prints results (errors still show, from any rank)
        out = dataclasses.replace(out, quiet=True)
    if seed is not None and seeds is not None:
        raise UsageError("give --seed or --seeds, not both")
    from xmask_cli.engine.runs.plan import parse_seeds, resolve_device

    # Parsed here so that a bad value is named by its option (--seeds, --device), not the API's keyword.
    seed_list, device = parse_seeds(seeds if seeds is not None else seed), resolve_device(device)
    overrides = list(run.set_ or [])
    # The options that set a config key go as Python values, after the --set texts (the API's a__b keywords).
    typed: dict[str, Any] = {**({"train__loggers": list(logger)} if logger else {}),
                             **({} if folds is None else {"data__folds": folds})}
    if dry_run:
        return _dry_run(out, run.preset, overrides, dataset=run.dataset, seeds=seed_list, device=device, name=name,
                        runs_dir=runs_dir, cache_dir=data.cache(), data_root=data.data_root, resume=resume,
                        overwrite=overwrite, **typed)
    tty_bar = not (out.json or out.quiet) and sys.stderr.isatty()
    with out.progress("train", total=None) as bar:
        progress = _EpochProgress(bar, out.log, log_lines=not tty_bar)
        result = train_runs(run.preset, overrides, dataset=run.dataset, seeds=seed_list, device=device,
                            name=name, runs_dir=runs_dir, cache_dir=data.cache(), data_root=data.data_root,
                            offline=data.no_download, resume=resume, overwrite=overwrite, log=out.log,
                            on_epoch=progress.on_epoch, on_run_start=progress.on_run_start, **typed)

    if rank == 0:
        out.result(result.to_json(), lambda con: render.human(con, result))



def _dry_run(out: Output, preset: str | None, overrides: list[str], **kwargs: Any) -> None:
    """``--dry-run``: print what the same ``train`` would make, read and cost (:func:`xmask_cli.api.dry_run`)."""
    from xmask_cli.api import dry_run

    plan = dry_run(preset, overrides, **kwargs).to_json()
    out.result(plan, lambda con: render.dry_run(con, plan))


class _EpochProgress:
    """The training callbacks: the progress bar per epoch (naming the run, the epoch, the last validation
    metric and the time left), and (without a terminal bar) a log line every tenth epoch."""

    def __init__(self, bar: Bar, log: Callable[[str], None], *, log_lines: bool) -> None:
        self.bar, self.log, self.log_lines = bar, log, log_lines
        self.epochs, self.every = 0, 1

    def on_run_start(self, s: int, fold: int | None, epochs: int) -> None:
        self.epochs, self.every = epochs, max(1, epochs // 10)
        self.bar.restart(epochs, f"train seed {s}{'' if fold is None else f' fold {fold}'}", unit="epoch")

    def on_epoch(self, s: int, row: dict[str, Any]) -> None:
        self.bar(row["epoch"] + 1, self.epochs)
        vals = {k: v for k, v in row.items() if k.startswith("val_") and v is not None}
        # The selection metric (the val_ key that is not the loss) in the bar; the loss only without one.
        shown = [k for k in vals if k != "val_loss"] or list(vals)
        self.bar.status(" ".join(f"val {k[4:]} {vals[k]:.4f}" for k in shown[:1]))
        if self.log_lines and row["epoch"] % self.every == 0:
            text = " ".join(f"{k} {v:.4f}" for k, v in vals.items())
            self.log(f"seed {s} epoch {row['epoch']}: loss {row['loss']:.4f} {text}")


def register(app: typer.Typer) -> None:
    """Add ``xmask train`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(train)))
