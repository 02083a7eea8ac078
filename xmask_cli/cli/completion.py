"""What the shell completes (``xmask --install-completion``): preset names and run folders.

Typer calls these with the word typed so far, while the shell waits, so each reads only names: the preset
folders' YAML file names, and a few directory levels below the folder being typed.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["complete_preset", "complete_run_dir"]

#: How deep below a folder a run may sit for the folder to be offered: ``runs/<name>/<seed>/fold-<i>``.
_RUN_DEPTH = 3
#: A folder holding this file is a run (:class:`xmask_cli.engine.runs.folder.RunDir`'s config).
_RUN_FILE = "config.json"


def complete_preset(incomplete: str) -> list[str]:
    """Preset names (``xmask presets ls``) starting with ``incomplete``."""
    from xmask_cli.config_resolve import list_presets

    try:
        names = list(list_presets())
    except OSError:  # an unreadable XMASK_PRESETS folder: nothing to offer, never a traceback in the shell
        return []
    return [n for n in names if n.startswith(incomplete)]


def _holds_run(folder: Path) -> bool:
    """Whether ``folder`` is a run or has one up to :data:`_RUN_DEPTH` levels below it."""
    if (folder / _RUN_FILE).is_file():
        return True
    pattern = ""
    for _ in range(_RUN_DEPTH):
        pattern += "*/"
        if next(folder.glob(pattern + _RUN_FILE), None) is not None:
            return True
    return False


def complete_run_dir(incomplete: str) -> list[str]:
    """Folders below the one typed so far that are runs or hold runs (``runs/mutag-graph``,
    ``runs/mutag-graph/0``), starting with ``incomplete``; a folder that is not itself a run ends in ``/``
    so the next tab goes on into it."""
    base, slash, stem = incomplete.rpartition("/")
    parent = Path(base + slash) if slash else Path(".")
    try:
        children = sorted(c for c in parent.iterdir() if c.is_dir() and c.name.startswith(stem))
    except OSError:  # no such folder, or unreadable: nothing to offer
        return []
    out = []
    for child in children:
        if child.name.startswith(".") and not stem.startswith("."):
            continue
        try:
            if not _holds_run(child):
                continue
        except OSError:
            continue
        shown = f"{base}{slash}{child.name}"
        out.append(shown if (child / _RUN_FILE).is_file() else shown + "/")
    return out
