"""The typer app of ``xmask``: global options, error handling, output choice (shared option types: :mod:`.options`).

The commands live one per module beside this one (see :mod:`xmask_cli.cli`);
each renders its human output through :mod:`xmask_cli.render`. Results go to
stdout (``--format human|json``); logs and progress to stderr. Errors are one
line on stderr and a documented exit code; set ``XMASK_DEBUG=1`` for the
traceback.
"""
from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from xmask_cli import __version__
from xmask_cli.cli.options import FlagsGroup
from xmask_cli.console import Output
from xmask_cli.errors import EXIT_CODES, NotWritableError, UsageError, XMaskError
from xmask_cli.fs import DISK_FULL, write_failed

EXIT_HELP = "Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + "."

_MAIN_HELP = """Structure-aware graph transformers (X-LogSMask) from the command line.

Examples:

    xmask prepare cora

    xmask train --preset graph-level

    xmask train --preset node-level --dataset cora --seeds 0-4 --format json > cora.json

    xmask eval runs/mutag-graph/0

    xmask ablate --preset node-level --dataset cora --seeds 0-4

    xmask tune --preset mutag --trials 40 --seeds 0-2 --final-seeds 0-9

    xmask explain runs/mutag-graph/0 --graph 17

    xmask runs compare runs/mutag-graph runs/cora-node

    xmask --format json prepare MUTAG --set structure.powers.k=3

    xmask presets show graph-level

    xmask cache ls

Environment: XMASK_FORMAT (the default of --format), XMASK_DATA_ROOT (the default of
--data-root), XMASK_CACHE (the default of --cache-dir, else ./cache), XMASK_OFFLINE=1 (never
download, as --offline), XMASK_PRESETS (extra preset folders, `:`-separated, searched first),
XMASK_DEBUG=1 (show the traceback behind an error), XMASK_DIST_TIMEOUT (seconds a collective
waits for the other ranks under torchrun), XMASK_MAX_NODES (the most nodes a dataset folder's
features file alone may give, 10000000 by default), XMASK_THREADS (torch and numba threads per
process; default: one at the graph level, else the usable cores shared among torchrun's local ranks).

""" + EXIT_HELP

def _parser_error_base() -> type[Exception]:
    """The base class of every option-parser error (unknown option, bad value, missing argument, no such
    command): the root below ``Exception`` of typer's public ``BadParameter``. Reached through that class, so
    no module path of click (vendored by typer, or not) is named here."""
    return [c for c in typer.BadParameter.__mro__ if issubclass(c, Exception) and c is not Exception][-1]


_ParserError = _parser_error_base()


class OneLineErrors(FlagsGroup):
    """Option-parser errors (``--bogus``, ``--workers 0``) as one ``error:`` line and exit 2, like every
    other xmask error, instead of click's boxed usage text."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        # click's own parameters, spelled out: a positional argument can then never meet a keyword twice.
        kwargs: dict[str, Any] = {"windows_expand_args": windows_expand_args, **extra}
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
        except _ParserError as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            text = exc.format_message() if hasattr(exc, "format_message") else str(exc)  # click's errors have it
            message = " ".join(line.strip() for line in text.splitlines() if line.strip())
            sys.stderr.write(f"error: {message}{hint}\n")
            sys.exit(getattr(exc, "exit_code", 2))
        except typer.Abort:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        # Without standalone mode click returns the code of a typer.Exit (our error codes) instead of exiting.
        sys.exit(rv if isinstance(rv, int) else 0)


def help_without_command(ctx: typer.Context) -> None:
    """``xmask`` or ``xmask cache`` alone: the help on stdout, exit 2 (a command is missing). The groups'
    callback with ``invoke_without_command=True``, instead of the parser's no-args-is-help error, whose
    class typer does not export."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)


app = typer.Typer(
    cls=OneLineErrors,
    name="xmask",
    help=_MAIN_HELP,
    invoke_without_command=True,  # bare `xmask`: main_callback prints the help (help_without_command)
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

def debug() -> bool:
    """Whether ``XMASK_DEBUG`` asks for tracebacks."""
    return os.environ.get("XMASK_DEBUG", "").strip() not in ("", "0", "false")


def output_for(ctx: typer.Context, fmt: str | None) -> Output:
    """The command's :class:`Output`: its ``--format``, else the global one, else ``XMASK_FORMAT``, else human."""
    obj = ctx.find_root().obj or {}
    chosen = (fmt or obj.get("format") or os.environ.get("XMASK_FORMAT") or "human").lower()
    if chosen not in ("human", "json"):
        raise UsageError(f"--format must be 'human' or 'json', got '{chosen}'")
    return Output(fmt=chosen, quiet=bool(obj.get("quiet")))


#: What an interrupted command leaves, and how to go on (appended to "error: interrupted").
_RESUME_HINTS = {
    "train": "; `xmask train` with the same options and --resume continues from the last finished epoch",
    "prepare": "; no partial cache file is kept: run `xmask prepare` again",
    "ablate": "; run the same `xmask ablate` again: finished runs are read back, killed ones resume",
    "tune": "; the same `xmask tune` with --resume continues the study (the trial that was running is recorded as failed)",
}


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn xmask errors into one stderr line and an exit code (traceback with XMASK_DEBUG=1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except XMaskError as exc:
            if debug():
                traceback.print_exc()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo(f"error: interrupted{_RESUME_HINTS.get(fn.__name__, '')}", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:  # a bug or an unexpected library failure
            if debug():
                traceback.print_exc()
            if isinstance(exc, OSError) and exc.errno in DISK_FULL:  # a full disk wherever it hit: exit 5
                err = write_failed(exc, Path(exc.filename)) if exc.filename else NotWritableError(
                    (exc.strerror or "no space left on device").lower())
                typer.echo(f"error: {err}", err=True)
                raise typer.Exit(err.exit_code) from None
            first = str(exc).splitlines()[0] if str(exc) else ""
            typer.echo(f"error: {type(exc).__name__}: {first} (set XMASK_DEBUG=1 for the traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xmask {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    fmt: Annotated[str | None, typer.Option("--format", "-f", help="Result format: human or json [env XMASK_FORMAT; default human].", show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No log lines on stderr.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Global options; the help text is _MAIN_HELP."""
    # No default here: an unset --format must not shadow XMASK_FORMAT (see output_for).
    ctx.obj = {"format": fmt.lower() if fmt else None, "quiet": quiet}
    help_without_command(ctx)


def add_group(app: typer.Typer, name: str, help: str, commands: dict[str, Callable[..., Any]]) -> None:
    """Add the command group ``xmask <name>`` with ``commands`` (name -> function), each wrapped in
    :func:`handle_errors` and given the exit-code epilog like every top-level command."""
    from xmask_cli.cli.options import options

    group = typer.Typer(cls=FlagsGroup, help=help, invoke_without_command=True, callback=help_without_command)
    for command, fn in commands.items():
        group.command(command, epilog=EXIT_HELP)(handle_errors(options(fn)))
    app.add_typer(group, name=name)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
