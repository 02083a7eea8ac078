"""``xmask tune``: an Optuna search over a preset's ``tune:`` space, scored on validation only."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, DeviceOpt, FormatOpt, RunOptions, options


def tune(
    ctx: typer.Context,
    run: RunOptions = RunOptions(),
    trials: Annotated[int, typer.Option("--trials", "-n", min=0, help="Trials this process runs (N processes on one study: the sum); with --resume: until the study holds N finished trials.")] = 20,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds each trial trains; its value is the mean validation metric over them.")] = "0-2",
    final_seeds: Annotated[str, typer.Option("--final-seeds", help="Seeds the best configuration is trained on after the search, test reported once; `none` skips.")] = "0-9",
    timeout: Annotated[str | None, typer.Option("--timeout", help="Start no trial after this long: 90s, 30m, 2h, 1h30m.", show_default=False)] = None,
    study: Annotated[str | None, typer.Option("--study", help="Study name and folder `runs/<study>/` [default `<dataset>-<level>-tune`].", show_default=False)] = None,
    storage: Annotated[str | None, typer.Option("--storage", help="Optuna storage URL shared by parallel processes [default `sqlite:///<runs-dir>/<study>/study.db`].", show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a stopped study up to --trials finished trials; trials its killed process left running are recorded as failed.")] = False,
    sampler_seed: Annotated[int, typer.Option("--sampler-seed", min=0, help="Seed of the TPE sampler (a study is reproducible).")] = 0,
    pruner: Annotated[str, typer.Option("--pruner", help="median (stop trials below the median at the same seed and epoch) or none.")] = "median",
    folds: Annotated[int, typer.Option("--folds", min=0, help="Graph level: score each trial on the inner holdouts (validation) of the first F outer folds of the fold protocol (data.folds, 10 if unset); 0: the dataset's split.")] = 0,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Draw the PNG plots (parallel workers can leave them to one process).")] = True,
    device: DeviceOpt = "auto",
    runs_dir: Annotated[Path | None, typer.Option("--runs-dir", help="Root of study folders [default: the preset's run.root, ./runs].", show_default=False)] = None,
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Search the preset's `tune:` space with Optuna (TPE, median pruner), scored on validation only.

    Each trial trains --seeds as `xmask train` does and scores the mean validation
    metric; test is never read during the search. Then the best configuration is
    trained on --final-seeds and test is reported once. The study folder holds
    study.db, best.yaml (`xmask train --preset best.yaml`), trials.csv,
    summary.json and PNG plots; watch it live with `optuna-dashboard sqlite:///runs/<study>/study.db`.
    A --set on a searched key fixes it: that key is not searched (a note says so).

    Examples:

        xmask tune --preset mutag --trials 40 --seeds 0-2 --final-seeds 0-9

        xmask tune --preset cora --trials 60 --timeout 2h --study cora-t60

        xmask tune --preset cora --trials 60 --study cora-t60 --resume

        xmask tune --preset cora --study s --storage postgresql://host/db --trials 20 --final-seeds none
    """
    from xmask_cli.engine.runs.plan import parse_seeds, resolve_device
    from xmask_cli.tune.narrow import fixed_keys
    from xmask_cli.tune.options import TuneOptions, parse_duration
    from xmask_cli.tune.outputs import human_report
    from xmask_cli.tune.study import run_study

    out = output_for(ctx, fmt)
    cfg = run.config()
    opts = TuneOptions(trials=trials, seeds=parse_seeds(seeds),
                       final_seeds=[] if final_seeds.strip().lower() == "none" else parse_seeds(final_seeds),
                       timeout_s=parse_duration(timeout), study=study, storage=storage, runs_dir=runs_dir,
                       resume=resume, sampler_seed=sampler_seed, pruner=pruner, plots=plots, folds=folds, device=resolve_device(device),
                       cache_dir=data.cache(), data_root=data.data_root, offline=data.no_download,
                       fixed=fixed_keys(run.set_ or []))
    result = run_study(cfg, opts, log=out.log)
    out.result(result.to_json(), lambda con: human_report(con, result))


def register(app: typer.Typer) -> None:
    """Add ``xmask tune`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(tune)))
