"""benchmarks/peers_epochs.py: the wall limit stops a child and keeps its peak memory, the progress line a
stopped peer leaves is read back, and the summary and table split first and later epochs by hand-worked rounds."""
from __future__ import annotations

import sys

import pytest

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def pe():
    return load_script("peers_epochs")


def test_a_child_over_the_limit_is_stopped_and_keeps_its_peak_memory(pe, tmp_path):
    """A child that allocates ~200 MB then sleeps is stopped at the limit; its peak RSS shows the allocation."""
    code = "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)"
    res = pe.run_limited([sys.executable, "-c", code], {}, tmp_path / "log", limit_s=3.0)
    assert res["stopped_at_limit"] and res["rc"] != 0 and 3.0 <= res["wall_s"] < 30.0
    assert res["peak_rss_mb"] > 200
    done = pe.run_limited([sys.executable, "-c", "print('ok')"], {}, tmp_path / "log2", limit_s=60.0)
    assert not done["stopped_at_limit"] and done["rc"] == 0 and (tmp_path / "log2").read_text().strip() == "ok"


def test_reached_reads_the_last_progress_line(pe, tmp_path):
    log = tmp_path / "log"
    log.write_text("loading\nprogress: epoch 0 batch 1/40 0.50 s\nwarning\nprogress: epoch 0 batch 7/40 12.25 s\n")
    assert pe.reached(log) == {"epoch": 0, "batches_done": 7, "batches_per_epoch": 40, "seconds_into_epoch": 12.25}
    log.write_text("nothing yet\n")
    assert pe.reached(log) is None


def _side(name, seconds, rss, load=(1.0, 2.0), **kw):
    return {"side": name, "epoch_seconds": seconds, "child": {"peak_rss_mb": rss, "load_before": [load[0], 0, 0],
            "load_after": [load[1], 0, 0], "wall_s": 100.0, "stopped_at_limit": "reached" in kw, "rc": -15}, **kw}


def test_summary_and_table_split_first_and_later_epochs(pe):
    rounds = [[_side("xmask", [9.0, 1.0], 700), _side("GPS", [40.0, 30.0], 5000)],
              [_side("GPS", [44.0, 34.0], 5100, (3.0, 4.0)), _side("xmask", [11.0, 3.0], 720)]]
    s = pe.summarize(rounds)
    assert s["xmask"]["first"] == [9.0, 11.0] and s["xmask"]["later_median_s"] == 2.0
    assert s["GPS"]["later_range_s"] == [30.0, 34.0] and s["GPS"]["first_median_s"] == 42.0
    text = pe.table([{"dataset": "Cora", "preset": "cora", "rounds": rounds}])
    row = next(line for line in text.splitlines() if "| GPS |" in line)
    assert "42.00 (40.00-44.00; 2)" in row and "32.00 (30.00-34.00; 2)" in row
    assert "16.0x (later)" in row and "5,000-5,100" in row and "1.0-4.0" in row


def test_an_unfinished_peer_is_reported_with_what_it_reached(pe):
    reached = {"epoch": 0, "batches_done": 120, "batches_per_epoch": 1029, "seconds_into_epoch": 1790.0}
    rounds = [[_side("xmask", [70.0], 3100), _side("GPS", [], 1800, reached=reached)]]
    row = next(line for line in pe.table([{"dataset": "ogbg-molhiv", "preset": "ogbg-molhiv",
                                           "rounds": rounds}]).splitlines() if "| GPS |" in line)
    assert "stopped at 100 s (limit) in epoch 0: 120 of 1029 batches in 1790 s" in row
    assert "| – | – |" in row  # no epoch time where no epoch finished
