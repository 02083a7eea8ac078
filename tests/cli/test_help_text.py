"""Every command's ``--help`` as a terminal shows it: placeholders such as ``runs/<name>/<seed>/`` kept (the
markdown renderer drops what looks like an HTML tag), no value type on flags (``--resume``, ``--help``), the
value types of options that take one kept."""
from __future__ import annotations

import re

import pytest
import typer

from tests.cli_helpers import run
from xmask_cli.cli import app

#: A placeholder in a help text and the path-like word around it: ``runs/<name>/<seed>/fold-<i>/``.
PLACEHOLDER = re.compile(r"[\w./-]*<[\w-]+>[\w./<>-]*")


def _tree() -> list[tuple[list[str], typer.core.TyperCommand | typer.core.TyperGroup]]:
    """Every command path with its click object: the root, each group, each command."""
    root = typer.main.get_command(app)
    out: list = [([], root)]
    for name, command in root.commands.items():
        out.append(([name], command))
        for sub, sub_command in (getattr(command, "commands", None) or {}).items():
            out.append(([name, sub], sub_command))
    return out


TREE = _tree()


def _help(path: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "250")  # one row per option: nothing split by wrapping
    r = run(*path, "--help")
    assert r.exit_code == 0, r.output
    return r.stdout


def _texts(command) -> list[str]:
    """The command's own help text and each parameter's."""
    return [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]


def test_the_tree_covers_every_command():
    paths = {" ".join(p) for p, _ in TREE}
    assert {"", "train", "prepare", "eval", "explain", "ablate", "tune", "cache", "cache ls", "presets show",
            "runs compare"} <= paths


@pytest.mark.parametrize("path, command", TREE, ids=[" ".join(p) or "xmask" for p, _ in TREE])
def test_help_keeps_placeholders_and_shows_no_value_on_flags(path, command, monkeypatch):
    out = _help(path, monkeypatch)
    flat = " ".join(out.replace("│", " ").split())
    assert "<bool>" not in out and "<>" not in out, out
    assert not re.search(r"(?<![:/])//", out), out  # a placeholder eaten between two slashes
    wanted = {m.strip(".,;:`") for text in _texts(command) for m in PLACEHOLDER.findall(text)}
    assert [w for w in wanted if w not in flat] == [], out
    rows = [ln.strip("│ ") for ln in out.splitlines() if ln.startswith("│ --")]  # the options panel's rows
    for p in command.params:
        if not isinstance(p, typer.core.TyperOption) or getattr(p, "hidden", False):
            continue
        long = max(p.opts, key=len)
        (row,) = [r for r in rows if r.split()[0] == long]
        # A flag shows no value type; an option that takes a value shows its type.
        typed = re.match(rf"{re.escape(long)}(?:\s+-\w)?\s+<\w", row)
        assert bool(typed) != bool(p.is_flag), (long, row)
