"""A dataset whose split would leave train, val or test empty is refused up front: exit 2, one line naming
the empty part and every part's size, before any structure is prepared or run folder made."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_train_folder import write_tu_set
from tests.cli_helpers import one_error_line, run
from tests.data.test_folder import write_folder


def _refused(tmp_path: Path, *args: str) -> str:
    cache, runs = tmp_path / "cache", tmp_path / "runs"
    r = run("train", *args, "--cache-dir", str(cache), "--runs-dir", str(runs), "--set", "train.epochs=1")
    assert r.exit_code == 2, r.stderr
    line = one_error_line(r)
    assert not runs.exists()  # no run folder
    assert not list(cache.rglob("*.h5"))  # nothing prepared (rglob of a missing folder is empty)
    return line


@pytest.mark.parametrize("n, sizes", [(1, "train 1, val 0, test 0"), (2, "train 2, val 0, test 0")])
def test_a_one_or_two_node_graph_is_refused_before_prepare(tmp_path: Path, n: int, sizes: str) -> None:
    # 60/20/20 of n nodes: val and test get floor(0.2 n) = 0 nodes for n < 5.
    folder = write_folder(tmp_path / "tiny", edges=[(0, 0)] if n == 1 else [(0, 1)],
                          x=np.ones((n, 3), dtype=np.float32), y=np.arange(n, dtype=np.int64) % 2)
    line = _refused(tmp_path, "--dataset", str(folder))
    assert str(folder) in line and "random-60-20-20" in line and sizes in line
    assert "no val and no test nodes" in line
    assert (f"of {n} node " if n == 1 else f"of {n} nodes ") in line


def test_five_nodes_are_enough(tmp_path: Path) -> None:
    """The smallest node folder whose 60/20/20 split fills every part trains (3 / 1 / 1)."""
    folder = write_folder(tmp_path / "five", edges=[(0, 1), (1, 2), (2, 3), (3, 4)],
                          x=np.eye(5, dtype=np.float32), y=np.array([0, 1, 0, 1, 0]))
    r = run("train", "--dataset", str(folder), "--cache-dir", str(tmp_path / "cache"),
            "--runs-dir", str(tmp_path / "runs"), "--set", "train.epochs=1")
    assert r.exit_code == 0, r.stderr


def test_a_graph_set_too_small_for_its_split_is_refused(tmp_path: Path) -> None:
    # 80/10/10 of 4 graphs: val and test get floor(0.4) = 0.
    folder = write_tu_set(tmp_path / "sets", graphs=4)
    line = _refused(tmp_path, "--dataset", str(folder), "--set", "model.node_struct=none")
    assert "random-8-1-1" in line and "train 4, val 0, test 0" in line and "graphs" in line


def test_a_link_graph_with_too_few_edges_is_refused(tmp_path: Path) -> None:
    # Two undirected edges at 85/5/10: val and test floor to 0.
    folder = write_folder(tmp_path / "path", edges=[(0, 1), (1, 2)], x=False, y=False)
    line = _refused(tmp_path, "--dataset", str(folder))
    assert "edge-85-5-10" in line and "train 2, val 0, test 0" in line and "edges" in line


def test_a_link_graph_without_room_for_its_negatives_is_refused(tmp_path: Path) -> None:
    # K_8 less one edge: 27 edges split 24 / 1 / 2, so 3 held-out edges need 3 * 3 negatives; 1 non-edge.
    edges = [(u, v) for u in range(8) for v in range(u + 1, 8) if (u, v) != (0, 7)]
    folder = write_folder(tmp_path / "dense", edges=edges, x=False, y=False)
    line = _refused(tmp_path, "--dataset", str(folder), "--set", "link.num_neg_per_pos=3")
    assert "needs 9 negative pairs" in line and "only 1 non-edges" in line and "link.num_neg_per_pos" in line
