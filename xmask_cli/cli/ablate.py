"""``xmask ablate``: every variant over the seeds, one table (paper 000, Table 7)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, debug, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, DeviceOpt, FoldsOpt, FormatOpt, RunOptions, options
from xmask_cli.render import ablate as render


def ablate(
    ctx: typer.Context,
    run: RunOptions = RunOptions(),
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds of every variant: 0-4, 0,2,7 ...")] = "0-4",
    variants: Annotated[str | None, typer.Option("--variants", help="Comma list of full, no-symnorm, no-logmask, no-multihead, one-layer, no-spd, no-rrwp, no-magnetic, no-eigen, no-edge (the preset without that learned bias), for M3Dphormer presets no-local, no-cluster, no-global, flat-routing, no-routing, and for image presets positional (learned position embeddings, no mask) [default: the core five plus those that apply to the preset; images: full,no-logmask,positional].", show_default=False)] = None,
    folds: FoldsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Ablation folder [default `./ablations/<dataset>-<level>`].", show_default=False)] = None,
    device: DeviceOpt = "auto",
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Component ablation (paper 000, Table 7): every variant over the seeds, one table.

    Variants: full; no-symnorm (N((A+I)^k) instead of Â^k); no-logmask (plain
    attention); no-multihead (every head reads Â^1); one-layer. Each runs as
    `xmask train` would, into `OUT/runs/<name>-<variant>/<seed>/`; with --folds K
    as `xmask train --folds K`, every variant on the same outer folds
    (`<seed>/fold-<i>/`). Finished runs are read back, not retrained; a killed
    one goes on from its last.pt when the same command runs again. The table
    gives each variant's mean ± std over its runs and its test minus full's run
    by run (same seed and fold, same test set: the paired difference), with the
    runs it is above / below full. Writes OUT/ablation.csv and OUT/ablation.json;
    a failed variant is reported in its row.

    Examples:

        xmask ablate --preset node-level --dataset cora

        xmask ablate --dataset PROTEINS --seeds 0-2 --variants full,no-logmask --data-root ../shared/datasets

        xmask --format json ablate --preset graph-level --seeds 0-1 > ablation.json

        xmask ablate --preset proteins --folds 10 --seeds 0 --variants full,no-symnorm,no-logmask,no-multihead --data-root ../shared/datasets

        xmask ablate --preset vit-digits --variants full,no-logmask,positional
    """
    from xmask_cli.ablate import parse_variants, run_ablation
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.plan import parse_seeds, resolve_device, resolve_level, run_name

    output = output_for(ctx, fmt)
    preset, overrides = run.choose()
    base = resolve(preset, overrides)
    level = resolve_level(base)
    names = parse_variants(variants, base)
    folder = out or Path("ablations") / run_name(base, level)  # a folder dataset: its name, never its path
    result = run_ablation(preset, overrides, seeds=parse_seeds(seeds), out_dir=folder, folds=folds,
                          cache_dir=data.cache(), variants=names, data_root=data.data_root,
                          offline=data.no_download, device=resolve_device(device), log=output.log,
                          debug=debug())

    output.result(result.to_json(), lambda con: render.human(con, result, seeds, folder))


def register(app: typer.Typer) -> None:
    """Add ``xmask ablate`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(ablate)))
