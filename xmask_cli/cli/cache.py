"""``xmask cache ls|verify|clear``: the HDF5 structure cache."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xmask_cli.cli.app import add_group, output_for
from xmask_cli.cli.options import CacheDirOpt, FormatOpt
from xmask_cli.errors import UsageError
from xmask_cli.render import cache as render


def cache_ls(
    ctx: typer.Context,
    dataset: Annotated[str | None, typer.Argument(help="Only this dataset.", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """List cache files with size, dataset, parameters, date and status.

    Status: ok; corrupt (unreadable: `xmask prepare` rebuilds it); writing
    (a temp file of a running prepare); stale (a temp file of a killed one,
    removed by the next prepare in that folder or by `cache clear`).

    Examples:

        xmask cache ls

        xmask cache ls cora --format json
    """
    from xmask_cli import cache as K
    from xmask_cli.prepare import resolve_cache_dir

    out = output_for(ctx, fmt)
    rows = K.listing(resolve_cache_dir(cache_dir), dataset)

    out.result(rows, lambda con: render.ls(con, rows, resolve_cache_dir(cache_dir)))


def cache_verify(
    ctx: typer.Context,
    target: Annotated[str | None, typer.Argument(help="A cache file, or a dataset name (default: all).", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    check_inputs: Annotated[
        bool, typer.Option("--check-inputs", help="Also reload each dataset (offline; a folder dataset from the folder its cache records) and "
                                              "compare its fingerprint.")
    ] = False,
    data_root: Annotated[
        Path | None, typer.Option("--data-root", help="Data root for --check-inputs [env XMASK_DATA_ROOT].", show_default=False)
    ] = None,
    fmt: FormatOpt = None,
) -> None:
    """Check every cache file: readable, checksums, key matches fingerprint, format current.

    With --check-inputs, also read each input again (a registry dataset by name, a
    folder dataset from the folder its cache records) and compare fingerprints.
    Exits 4 if any file has a problem (an input that changed included); 3 if a
    recorded folder is gone, 2 if it no longer reads as a dataset folder.

    Examples:

        xmask cache verify

        xmask cache verify cache/mutag/3f1c0e9a2b.h5 --format json

        xmask cache verify cora --check-inputs --data-root ../shared/datasets

        xmask cache verify mygraph --check-inputs
    """
    from xmask_cli import cache as K
    from xmask_cli.errors import CacheError
    from xmask_cli.prepare import resolve_cache_dir

    out = output_for(ctx, fmt)
    if target and Path(target).suffix == ".h5":
        if not Path(target).is_file():
            raise UsageError(f"no such cache file: {target}")
        files = [Path(target)]
    else:
        files = K.cache_files(resolve_cache_dir(cache_dir), target)
    inputs = K.InputFingerprints(data_root, resolve_cache_dir(cache_dir)) if check_inputs else None

    def check(p: Path) -> list[str]:
        """The file's problems; with --check-inputs, also against its input read again now."""
        expected, problems = inputs.expected(p) if inputs is not None else (None, [])
        return K.verify(p, expected) + problems

    report = [{"path": str(p), "ok": not probs, "problems": probs} for p in files for probs in [check(p)]]

    out.result(report, lambda con: render.verify(con, report))
    bad = [r for r in report if not r["ok"]]
    if bad:
        typer.echo(f"error: {len(bad)} of {len(report)} cache file(s) failed verification; rebuild with `xmask prepare ... --force`", err=True)
        raise typer.Exit(CacheError.exit_code)


def cache_clear(
    ctx: typer.Context,
    dataset: Annotated[str | None, typer.Argument(help="Only this dataset (default: everything).", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Remove cache files (and leftovers of interrupted writes).

    Deletes only files it can prove are its own: `<key>.h5` files in the cache
    dir's dataset folders that record that key and a format version, temp files
    of writers that are gone, and the `_pyg` staging folder it marked. Anything
    else is kept and listed. A path argument must be a dataset folder of the
    cache dir (exit 2 otherwise).

    Examples:

        xmask cache clear mutag

        xmask cache clear

        xmask cache clear --cache-dir /scratch/xmask-cache --format json
    """
    from xmask_cli import cache as K
    from xmask_cli.prepare import resolve_cache_dir

    out = output_for(ctx, fmt)
    kept: list[Path] = []
    removed = [str(p) for p in K.clear(resolve_cache_dir(cache_dir), dataset, kept=kept)]

    out.result({"removed": removed, "kept": [str(p) for p in kept]}, lambda con: render.clear(con, removed, kept))


def register(app: typer.Typer) -> None:
    """Add the ``xmask cache`` group (``ls``, ``verify``, ``clear``) to ``app``."""
    add_group(app, "cache", "List, verify and clear the HDF5 structure cache.\n\nExamples:\n\n    xmask cache ls\n\n"
              "    xmask cache verify\n\n    xmask cache clear mutag",
              {"ls": cache_ls, "verify": cache_verify, "clear": cache_clear})
