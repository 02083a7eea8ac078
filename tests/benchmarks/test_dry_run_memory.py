"""benchmarks/dry_run_memory.py: the pass mark and the table the benchmark page shows."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.benchmarks import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_script("dry_run_memory")


def test_within_is_relative_to_the_measurement(bench) -> None:
    assert bench.within(130, 100) and bench.within(70, 100) and bench.within(100, 100)
    assert not bench.within(131, 100) and not bench.within(69, 100)
    assert not bench.within(0, 0)  # a step that measured nothing is no pass
    assert bench.TOLERANCE == 0.30


def test_the_page_shows_the_committed_figures(bench) -> None:
    """Every row of benchmarks/dry-run.md is the committed JSON's, and its pass mark is the script's."""
    rows = json.loads((ROOT / "benchmarks" / "out" / "dry_run_memory.json").read_text())["rows"]
    page = (ROOT / "benchmarks" / "dry-run.md").read_text()
    for r in rows:
        gap = r["estimated_step_bytes"] / r["measured_step_bytes"] - 1
        line = next(ln for ln in page.splitlines() if ln.startswith(f"| `{r['preset']}`"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{r['parameters']:,}" and r["parameters"] == r["built_parameters"]
        assert cells[2] == f"{r['measured_step_bytes'] / 2**20:.1f} MiB"
        assert cells[3] == f"{r['estimated_step_bytes'] / 2**20:.1f} MiB"
        assert cells[4] == f"{gap:+.1%}".replace("%", " %")
        assert cells[5] == f"{r['dry_run_step_bytes'] / 2**20:.1f} MiB"
        assert cells[6] == ("yes" if bench.within(r["estimated_step_bytes"], r["measured_step_bytes"]) else "no")
    assert re.search(r"within 30 %", page)
