"""docs/cli.md is the generated CLI reference, current with the app, and covers what ``--help`` shows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from tests.cli_helpers import run
from xmask_cli.cli import app
from xmask_cli.cli.reference import REGENERATE, _environment, _help_markdown, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"


def _commands() -> list[list[str]]:
    """Every command path (``["train"]``, ``["cache", "ls"]`` ...), walked from the click tree."""
    root = typer.main.get_command(app)
    paths = []
    for name, command in root.commands.items():
        subs = getattr(command, "commands", None)
        paths += [[name, sub] for sub in subs] if subs else [[name]]
    return paths


def _section(text: str, path: list[str]) -> str:
    """The part of docs/cli.md under the heading of ``xmask PATH``, up to the next heading of any level."""
    heading = re.search(rf"^#+ `xmask {' '.join(path)}`$", text, flags=re.MULTILINE)
    assert heading, f"docs/cli.md has no section for xmask {' '.join(path)}"
    rest = text[heading.end():]
    end = re.search(r"^#+ ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def test_cli_reference_is_current() -> None:
    """docs/cli.md is exactly what the generator prints for today's app."""
    assert PAGE.read_text() == render(), f"docs/cli.md is out of date with the CLI; regenerate it: {REGENERATE}"


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_every_option_of_help_is_in_the_reference(path: list[str]) -> None:
    """Each option `xmask PATH --help` lists (read from the help screen itself) is a row of its section."""
    result = run(*path, "--help", terminal_width=200)
    assert result.exit_code == 0, result.output
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", result.stdout)) - {"--help"}
    section = _section(render(), path)
    rows = {m.group(1) for m in re.finditer(r"^\| `[^`]*?(--[a-z][a-z-]*)[ ,`<]", section, flags=re.MULTILINE)}
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    options = {o for p in command.params if not p.hidden for o in p.opts if o.startswith("--")}
    assert options <= shown, f"--help does not show {options - shown}"
    assert options == rows, f"reference rows {sorted(rows)} against the command's options {sorted(options)}"


def test_examples_become_one_shell_block() -> None:
    """Indented example lines, blank lines between them, turn into one fenced block; prose stays as it is."""
    text = "Do a thing.\n\nExamples:\n\n    xmask a --b\n\n    xmask c\n\nAfter.\n"
    assert _help_markdown(text) == ["Do a thing.", "", "Examples:", "", "```bash", "xmask a --b", "xmask c", "```",
                                    "", "After."]


def test_environment_entries_parse_from_the_main_help() -> None:
    """The main help's Environment paragraph yields one (name, meaning) pair per variable, none lost."""
    assert _environment("x\n\nEnvironment: XMASK_A (one, two), XMASK_B=1\n(three).\n\nExit codes: 0 ok.") == [
        ("XMASK_A", "one, two"), ("XMASK_B=1", "three")]
    main_help = typer.main.get_command(app).help or ""
    paragraph = main_help.split("Environment: ", 1)[1].split("\n\n", 1)[0]
    assert [name for name, _ in _environment(main_help)] == re.findall(r"XMASK_[A-Z_]+(?:=1)?", paragraph)
