"""benchmarks/transformers_table.py: the child's peak memory, the memory estimate of a row not started, and the
table's cells for finished, probed and not-run rows."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def tt():
    yield load_script("transformers_table", "transformers_table_under_test")
    sys.modules.pop("transformers_table_under_test", None)


def test_child_peak_rss_sees_what_the_child_allocated(tt):
    """A child holding 300 MB of touched memory peaks at 300 MB or more; one that holds nothing stays far below.

    Linux keeps a process's peak RSS across exec, so a child reports at least its parent's RSS at the spawn:
    the check runs from a fresh interpreter (as the script's parent, which holds only imports, about 220 MB
    with torch, below every measured row), not from this test process, which may hold gigabytes by now."""
    code = (
        "import json, sys\n"
        "from tests.benchmarks import load_script\n"
        "tt = load_script('transformers_table')\n"
        "big = tt.run_child([sys.executable, '-c', \"b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])\"])\n"
        "small = tt.run_child([sys.executable, '-c', 'pass'])\n"
        "print(json.dumps({'big': big, 'small': small}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[2]))
    res = json.loads(out.stdout)
    big, small = res["big"], res["small"]
    assert big["rc"] == 0 and small["rc"] == 0
    assert big["peak_rss_mb"] >= 300
    assert small["peak_rss_mb"] < 100
    assert big["wall_s"] > 0 and len(big["load_before"]) == 3


def test_gps_estimate_scales_the_quadratic_part(tt):
    """Cora measured at 5,600 MB with a 600 MB base: CiteSeer needs 600 + 5,000 * (3327 / 2708)^2 MB."""
    est = tt.gps_memory_estimate({"dataset": "Cora", "peak_rss_mb": 5600.0}, "CiteSeer")
    assert est["status"] == "not run"
    assert est["needs_gb"] == pytest.approx((600 + 5000 * (3327 / 2708) ** 2) / 1024)
    assert "Cora's measured 5.5 GB" in est["reason"]


def test_parse_pairs(tt):
    assert tt.parse_pairs(["GPS=1", " Polynormer = 40"]) == {"GPS": "1", "Polynormer": "40"}
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        tt.parse_pairs(["GPS"])


def test_table_rows(tt):
    rows = [
        {"dataset": "Cora", "side": "GPS", "status": "probe", "probe": 1, "seconds_per_epoch": 41.7,
         "peak_rss_mb": 5115.0, "params": 502439, "precompute_seconds": 3.1, "budget": {"epochs": 200, "patience": 30},
         "epochs_run_mean": 1.0, "test": None},
        {"dataset": "Cora", "side": "xmask", "status": "ok", "seeds": [0, 1, 2],
         "test": {"mean": 0.8253, "std": 0.0071}, "prepare_seconds": 2.5, "cache_mb": 7.65, "peak_rss_mb": 900.0,
         "seconds_per_epoch": 0.1234, "params": 129863, "budget": {"epochs": 200, "patience": 30},
         "epochs_run_mean": 120.0},
        {"dataset": "Computers", "side": "GPS", "status": "not run", "reason": "needs ~113 GB", "needs_gb": 113.0},
    ]
    lines = tt.table(rows).splitlines()
    assert len(lines) == 5
    assert lines[2].startswith("| Cora | xmask | 82.5 ± 0.7 (3 seeds) | 200 / 30; 120 | 2.5 | 7.7 | 900 | 0.123 | "
                               "129,863 |")
    assert "| Cora | GPS | probe only |" in lines[3] and "probe: 1 epochs timed" in lines[3]
    assert "| Computers | GPS | not run |" in lines[4] and "needs ~113 GB" in lines[4]


def test_another_preset_row_follows_xmask_own(tt):
    def row(side: str) -> dict:
        return {"dataset": "Computers", "side": side, "status": "ok", "seeds": [0], "test": {"mean": 0.9, "std": 0.0}}

    lines = tt.table([row("SGFormer"), row("xmask-computers-full"), row("xmask")]).splitlines()[2:]
    assert [ln.split(" | ")[1] for ln in lines] == ["xmask", "xmask-computers-full", "SGFormer"]


def test_a_preset_given_by_path_is_labelled_by_its_stem(tt):
    """A recipe kept in benchmarks/presets/ runs by path; its row, logs and speed file carry the file's stem, so
    its JSON keeps the name the pages cite (Computers-xmask-computers-full.json) and no file name holds a '/'."""
    assert tt.label("benchmarks/presets/computers-full.yaml") == "computers-full"
    assert tt.label("computers") == "computers"
    assert "/" not in tt.label(str(Path.cwd() / "x" / "y.yml"))
