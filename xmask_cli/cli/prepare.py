"""``xmask prepare``: dataset -> structure -> HDF5 cache."""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import DataOptions, FormatOpt, PresetOpt, SetOpt, options
from xmask_cli.render import prepare as render


def prepare(
    ctx: typer.Context,
    dataset: Annotated[str | None, typer.Argument(help="Dataset name (docs/datasets.md), e.g. cora, MUTAG, ogbg-molhiv; or a folder of files, e.g. ./mygraph.", show_default=False)] = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-j", min=1, help="Processes: N > 1 computes spectra and partitions in N-1 workers alongside.")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Recompute even if the cache has this key.")] = False,
    data: DataOptions = DataOptions(),
    fmt: FormatOpt = None,
) -> None:
    """Compute normalized adjacency powers, SPD, spectra and partitions into the HDF5 cache.

    The same dataset, graphs and parameters map to the same file: a second run
    does no work and prints its path.

    Examples:

        xmask prepare cora

        xmask prepare ./mygraph

        xmask prepare PROTEINS --data-root ../shared/datasets --workers 2

        xmask prepare MUTAG --set prepare.compute=all --set structure.powers.k=6

        xmask --format json prepare cora --preset node-level

        torchrun --nproc_per_node 4 -m xmask_cli prepare ./mygraph --preset computers
    """
    from xmask_cli import config_resolve as R
    from xmask_cli.api import choose_preset
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.engine.training.distributed import env_rank, env_world_size
    from xmask_cli.prepare import prepare_dataset
    from xmask_cli.prepare.ranks import rank_world

    out = output_for(ctx, fmt)
    distributed = env_world_size() > 1  # under torchrun: ranks share the blocks
    main = not distributed or env_rank() == 0
    if not main:
        out = dataclasses.replace(out, quiet=True)  # rank 0 alone logs and prints the result
    # The preset `train --dataset` picks (the dataset's own, else its level's): prepare builds what train reads.
    preset, overrides = choose_preset(preset, dataset, set_) if dataset is not None else (preset, list(set_ or []))
    cfg = R.resolve(preset or "node-level", overrides)
    spec = get_dataset(cfg.data.dataset)
    group: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if distributed:
        from xmask_cli.engine.training.distributed import session

        group = session("cpu")  # gloo: the ranks exchange numpy blocks, never tensors on a device
    with group, out.progress(f"prepare {spec.name}", total=1) as bar:
        summary = prepare_dataset(cfg, data_root=data.data_root, cache_dir=data.cache(), workers=workers,
                                  force=force, offline=data.no_download, log=out.log, progress=bar,
                                  world=rank_world() if distributed else None)

    if main:
        out.result(summary.to_dict(), lambda con: render.human(con, summary, spec.name))


def register(app: typer.Typer) -> None:
    """Add ``xmask prepare`` to ``app``."""
    app.command(epilog=EXIT_HELP)(handle_errors(options(prepare)))
