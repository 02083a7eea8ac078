"""benchmarks/growth.py: the SBM graphs it writes, the folder xmask reads from them, and what it measures of a child."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def growth():
    return load_script("growth")


def test_sbm_graph_is_seeded_with_the_stated_shape(growth) -> None:
    src, dst, x, y = growth.sbm(5000, seed=4)
    src2, dst2, x2, y2 = growth.sbm(5000, seed=4)
    assert np.array_equal(src, src2) and np.array_equal(dst, dst2) and np.array_equal(x, x2) and np.array_equal(y, y2)
    assert not np.array_equal(growth.sbm(5000, seed=5)[0][:100], src[:100])
    # each undirected edge once, no self loops
    assert np.all(src < dst) and len(np.unique(src * 5000 + dst)) == len(src)
    assert 9.5 < 2 * len(src) / 5000 <= 10.0  # mean degree 10 before repeats are removed
    assert sorted(np.unique(y)) == list(range(10)) and y.dtype == np.int64
    assert x.shape == (5000, 32) and x.dtype == np.float32 and set(np.unique(x)) == {0.0, 1.0}
    inside = np.mean(y[src] == y[dst])
    assert 0.70 < inside < 0.76  # 70 % drawn inside the block, plus 10 % of the uniform draws by chance
    # block-specific feature rates: the label is learnable from the features
    rates = np.stack([x[y == b].mean(0) for b in range(10)])
    near = np.minimum(np.abs(rates - 0.15), np.abs(rates - 0.6))
    assert near.max() < 0.06 and (rates > 0.4).any() and (rates < 0.3).any()


def test_folder_reads_back_through_xmask(growth, tmp_path: Path) -> None:
    from xmask_cli.data.folder import folder_spec, load_folder

    src, dst, x, y = growth.sbm(3000, seed=1)
    growth.write_folder(tmp_path / "g", src, dst, x, y)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["edges.npz", "features.npy", "labels.npy"]
    spec = folder_spec(str(tmp_path / "g"))
    assert "node" in spec.levels
    data = load_folder(spec)
    g = data.dataset[0]
    assert int(g.num_nodes) == 3000
    np.testing.assert_array_equal(np.asarray(g.x), x)
    np.testing.assert_array_equal(np.asarray(g.y).ravel(), y)
    ei = np.asarray(g.edge_index)
    got = np.unique(np.minimum(ei[0], ei[1]) * 3000 + np.maximum(ei[0], ei[1]))
    np.testing.assert_array_equal(got, src * 3000 + dst)


def test_measure_reports_a_childs_peak_memory_and_cpu(growth, tmp_path: Path) -> None:
    code = ("import time\nb = bytearray(300 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "t = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint('{}')")
    r = growth.measure([sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, tmp_path / "c", 0.0, None)
    assert r["status"] == "ok" and r["rc"] == 0
    assert 0.29 < r["peak_rss_gib"] < 0.40  # 300 MiB touched, plus the interpreter
    assert r["cpu_s"] >= 0.5 and r["wall_s"] >= r["cpu_s"] * 0.9


def test_measure_kills_a_child_when_memory_runs_low(growth, tmp_path: Path) -> None:
    # No machine has a petabyte free: the guard fires at once and the child is killed.
    r = growth.measure([sys.executable, "-c", "import time; time.sleep(30)"], {"PATH": "/usr/bin:/bin"},
                       tmp_path / "c", 1e6, None)
    assert r["status"] == "aborted: low memory" and r["wall_s"] < 10


def test_exponents_and_verdicts(growth) -> None:
    def row(n, wall, peak=1.0):
        side = {"status": "ok", "wall_s": wall, "cpu_s": wall / 2, "peak_rss_gib": peak, "sampled_tree_peak_gib": 0.0}
        return {"nodes": n, "prepare": side, "train": dict(side)}

    rows = [row(80_000, 10.0), row(320_000, 40.0 * 4 ** 0.2), row(1_000_000, 200.0, peak=7.0)]
    ex = growth.exponents(rows, "prepare", "wall_s")
    assert ex[0] is None and ex[1] == pytest.approx(1.2)
    assert ex[2] == pytest.approx(math.log(200.0 / (40.0 * 4 ** 0.2)) / math.log(1_000_000 / 320_000))
    v = growth.verdicts(rows)
    assert any(s.startswith("1M under 8 GB: prepare 7.00 GiB pass") for s in v)
    assert any("prepare wall_s exponent" in s and "FAIL" in s for s in v)
    assert any(s.startswith("3M under 16 GB: not run") for s in v)
    assert "| 1M |" in growth.table(rows) and growth.parse_size("3M") == 3_000_000 and growth.size_label(80_000) == "80k"
