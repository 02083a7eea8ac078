"""The CLI reference (docs/cli.md), generated from the typer app so it cannot drift from ``--help``.

Walks the app's click command tree in ``xmask --help`` order and writes, per command, its help text
(examples as shell blocks), its usage line and one table row per argument and option, exactly as
``--help`` words them (default, range and environment variable included). Regenerate with::

    python -m xmask_cli.cli.reference > docs/cli.md

``tests/cli/test_reference.py`` fails when docs/cli.md differs from what this module prints.
"""
from __future__ import annotations

import re
import sys
from typing import Any

import typer

from xmask_cli.cli import app
from xmask_cli.errors import EXIT_CODES

#: The command that regenerates the page; named in the page and in the test's failure message.
REGENERATE = "python -m xmask_cli.cli.reference > docs/cli.md"

_INDENTED = re.compile(r"^ {4}\S")
#: One entry of the main help's "Environment:" paragraph: ``XMASK_NAME (meaning)``.
_ENV_ENTRY = re.compile(r"(XMASK_[A-Z_]+(?:=1)?) \(([^()]*)\)")


def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _help_markdown(text: str) -> list[str]:
    """A command's help text as Markdown: prose kept, each run of 4-space-indented example lines fenced."""
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            out.extend(["```bash", *block, "```"])
            block.clear()

    for line in text.strip("\n").splitlines():
        if _INDENTED.match(line):
            block.append(line[4:].rstrip())
        elif not line.strip() and block:
            continue  # a blank line between examples: the block goes on
        else:
            if block:
                flush()
                out.append("")
            out.append(line.rstrip())
    flush()
    return [line for i, line in enumerate(out) if line or (i and out[i - 1])]  # no doubled blank lines


def _environment(main_help: str) -> list[tuple[str, str]]:
    """The variables the main help's "Environment:" paragraph lists, as (name, meaning) pairs."""
    _, _, paragraph = main_help.partition("Environment: ")
    text = " ".join(paragraph.split("\n\n", 1)[0].split())
    return _ENV_ENTRY.findall(text)


def _param_rows(command: Any, ctx: Any) -> list[str]:
    """Table rows (name | meaning) for the command's visible arguments and options, as ``--help`` shows them."""
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, meaning = record
        rows.append(f"| `{_cell(names)}` | {_cell(meaning) or ' '} |")
    return rows


def _command_section(command: Any, ctx: Any, path: str, level: int) -> list[str]:
    """The section of one command: heading, help text, usage, parameter table; then its subcommands."""
    lines = [f"{'#' * level} `{path}`", ""]
    lines += [*_help_markdown(command.help or ""), ""]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += ["```text", f"{path} {usage}".rstrip(), "```", ""]
    rows = _param_rows(command, ctx)
    if rows:
        lines += ["| argument / option | meaning |", "|---|---|", *rows, ""]
    if isinstance(command, typer.core.TyperGroup):
        for name in command.list_commands(ctx):
            sub = command.commands[name]
            sub_ctx = type(ctx)(sub, info_name=name, parent=ctx)
            lines += _command_section(sub, sub_ctx, f"{path} {name}", level + 1)
    return lines


def render() -> str:
    """The whole reference page as Markdown text."""
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)  # the app has commands, so typer builds a group
    ctx = type(root).context_class(root, info_name="xmask")
    intro, _, _ = (root.help or "").partition("\n\nExamples:")
    lines = [
        "# CLI reference",
        "",
        f"Generated from the typer app by `{REGENERATE}`; every text below is what `--help` prints.",
        "",
        intro.strip(),
        "",
        "## Commands",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    commands = {name: root.commands[name] for name in root.list_commands(ctx)}
    for name, command in commands.items():
        summary = (command.help or "").strip().split("\n\n", 1)[0]
        lines.append(f"| [`xmask {name}`](#xmask-{name}) | {_cell(summary)} |")
    lines += ["", "## Global options", "", "Given before the command: `xmask --format json train ...`.", ""]
    lines += ["| option | meaning |", "|---|---|", *_param_rows(root, ctx), ""]
    lines += ["## Environment", "", "| variable | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(meaning)} |" for name, meaning in _environment(root.help or "")]
    lines.append("")
    lines += ["## Exit codes", "", "| code | meaning |", "|---:|---|"]
    lines += [f"| {code} | {_cell(meaning)} |" for code, meaning in EXIT_CODES.items()]
    lines += ["", "Each code in full, with what to do: [safety.md](safety.md).", ""]
    for name, command in commands.items():
        sub_ctx = type(ctx)(command, info_name=name, parent=ctx)
        lines += _command_section(command, sub_ctx, f"xmask {name}", 2)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    """Print the reference to stdout (the CLI layer may print)."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
