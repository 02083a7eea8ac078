"""The command registry of the CLI: every command module registers in order, and the documented recipe for a
new command (one module with register(app), one COMMANDS entry) gives a working command."""
from __future__ import annotations

import json
import re
import types
from typing import Annotated

import typer
from typer.testing import CliRunner

from xmask_cli import cli
from xmask_cli.cli.app import EXIT_HELP, OneLineErrors, handle_errors, main_callback, output_for
from xmask_cli.cli.options import FormatOpt
from xmask_cli.errors import UsageError


def _listed(help_text: str) -> list[str]:
    """Command names in the order the help's command panel lists them."""
    panel = help_text[help_text.index("Commands"):]
    return re.findall(r"^\W+\s(\w+)\s{2,}", panel, flags=re.M)


def test_help_lists_the_registered_commands_in_their_order():
    out = CliRunner().invoke(cli.app, ["--help"], terminal_width=120).stdout
    assert _listed(out) == ["prepare", "train", "eval", "ablate", "explain", "export", "tune", "env", "presets",
                            "runs", "cache"]
    assert [m.__name__.rsplit(".", 1)[-1] for m in cli.COMMANDS] == ["prepare", "train", "evaluate", "ablate",
                                                                     "explain", "export", "tune", "env", "presets", "runs",
                                                                     "cache"]


def _hello_module() -> types.ModuleType:
    """A toy command written as cli/__init__.py says a new one is."""
    mod = types.ModuleType("xmask_cli.cli.hello")

    def render(con, result):
        con.print(f"hello {result['name']} x{result['times']}")

    def hello(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Who.")],
              times: Annotated[int, typer.Option("--times", help="How often.")] = 1, fmt: FormatOpt = None) -> None:
        """Say hello (a toy command)."""
        if times < 1:
            raise UsageError(f"--times {times}: must be at least 1")
        result = {"name": name, "times": times}
        output_for(ctx, fmt).result(result, lambda con: render(con, result))

    def register(app: typer.Typer) -> None:
        app.command(epilog=EXIT_HELP)(handle_errors(hello))

    mod.hello, mod.register = hello, register
    return mod


def test_a_new_command_is_one_module_and_one_entry():
    app = typer.Typer(cls=OneLineErrors, name="xmask", invoke_without_command=True, add_completion=False,
                      pretty_exceptions_enable=False, rich_markup_mode="markdown")
    app.callback()(main_callback)
    for module in (*cli.COMMANDS[:5], _hello_module(), *cli.COMMANDS[5:]):  # the entry's place sets its help place
        module.register(app)
    runner = CliRunner()
    assert _listed(runner.invoke(app, ["--help"], terminal_width=120).stdout) == [
        "prepare", "train", "eval", "ablate", "explain", "hello", "export", "tune", "env", "presets", "runs", "cache"]
    human = runner.invoke(app, ["hello", "ada", "--times", "2"])
    assert human.exit_code == 0 and human.stdout == "hello ada x2\n"
    as_json = runner.invoke(app, ["--format", "json", "hello", "ada"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == {"name": "ada", "times": 1}
    bad = runner.invoke(app, ["hello", "ada", "--times", "0"])
    assert bad.exit_code == 2 and bad.stderr == "error: --times 0: must be at least 1\n"


def test_cli_start_up_loads_no_array_or_tensor_library():
    """`xmask --help` and every command's parsing run before any heavy import: the CLI starts in well under a
    second, and each command imports what it needs when it runs."""
    import subprocess
    import sys

    code = ("import sys, xmask_cli.cli; print([m for m in ('torch', 'torch_geometric', 'h5py', 'numpy') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
