"""``xmask presets ls|show``: the YAML presets."""
from __future__ import annotations

from typing import Annotated

import typer

from xmask_cli.cli.app import add_group, output_for
from xmask_cli.cli.completion import complete_preset
from xmask_cli.cli.options import FormatOpt, SetOpt
from xmask_cli.render import presets as render


def presets_ls(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    """List the available presets.

    Examples:

        xmask presets ls

        xmask presets ls --format json
    """
    from xmask_cli import config_resolve as R

    out = output_for(ctx, fmt)
    found = R.list_presets()
    rows = []
    for name, path in found.items():
        raw = R.read_yaml(path)
        parents = raw.get("extends") or []
        rows.append({"name": name, "path": str(path), "extends": [parents] if isinstance(parents, str) else parents,
                     "description": str(raw.get("description", "")) if "description" in raw else ""})

    out.result(rows, lambda con: render.ls(con, rows))


def presets_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Preset name or YAML path.", autocompletion=complete_preset)],
    set_: SetOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Print a preset fully resolved (inheritance and overrides applied, validated).

    Examples:

        xmask presets show graph-level

        xmask presets show cora --set structure.powers.k=2 --format json
    """
    from xmask_cli import config_resolve as R

    out = output_for(ctx, fmt)
    cfg = R.resolve(name, list(set_ or []))
    out.result(cfg.to_dict(), lambda con: render.show(con, cfg.to_dict()))


def register(app: typer.Typer) -> None:
    """Add the ``xmask presets`` group (``ls``, ``show``) to ``app``."""
    add_group(app, "presets", "List and show the YAML presets.\n\nExamples:\n\n    xmask presets ls\n\n"
              "    xmask presets show node-level --set structure.powers.k=3", {"ls": presets_ls, "show": presets_show})
