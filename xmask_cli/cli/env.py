"""``xmask env``: the software, device and threads xmask runs on, for a bug report."""
from __future__ import annotations

from typing import Annotated

import typer

from xmask_cli.cli.app import EXIT_HELP, handle_errors, output_for
from xmask_cli.cli.options import FormatOpt, options
from xmask_cli.render import env as render


def env(
    ctx: typer.Context,
    device: Annotated[str, typer.Option("--device", help="The device to describe: auto (CUDA when present), cpu, cuda or cuda:N.")] = "auto",
    fmt: FormatOpt = None,
) -> None:
    """Print the versions of xmask, Python and the packages a run depends on, the device and the thread
    counts: what every run records in its config.json (`environment`), and what a bug report needs.

    Examples:

        xmask env

        xmask env --format json > env.json
    """
    from xmask_cli.errors import UsageError
    from xmask_cli.versions import OTHER_PACKAGES, environment, package_versions

    output = output_for(ctx, fmt)
    name = device.strip().lower()
    if name not in ("auto", "cpu") and not (name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit())):
        raise UsageError(f"--device '{device}': expected auto, cpu, cuda or cuda:N")
    record = environment(name)
    others = {k: v for k, v in package_versions(OTHER_PACKAGES).items() if k != "xmask"}
    payload = {**record, "other_packages": others}
    output.result(payload, lambda con: render.env(con, payload))


def register(app: typer.Typer) -> None:
    """Add ``xmask env`` to ``app``."""
    app.command("env", epilog=EXIT_HELP)(handle_errors(options(env)))
