"""``xmask presets ls`` and ``presets show`` from the command line."""
from __future__ import annotations

import json

from tests.cli_helpers import run


def test_presets_ls_and_show_json():
    rows = json.loads(run("presets", "ls", "--format", "json").stdout)
    names = {r["name"] for r in rows}
    assert {"base", "node-level", "graph-level"} <= names
    cfg = json.loads(run("-f", "json", "presets", "show", "node-level", "--set", "structure.powers.k=3").stdout)
    assert cfg["structure"]["powers"]["k"] == 3
    assert cfg["structure"]["partition"]["parts"] == 32  # from node-level
    assert cfg["structure"]["spd"]["max_distance"] == 8  # inherited from base
    human = run("presets", "show", "graph-level").stdout
    assert "max_distance: 8" in human
