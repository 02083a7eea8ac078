"""benchmarks/folds_table.py: the fold-protocol table it prints from xmask's and the peers' JSON results."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def folds_table():
    return load_script("folds_table")


def _write(tmp_path: Path, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    xs = rng.uniform(0.5, 1.0, 10)
    # xmask's --format json result, folds listed out of order: the table must not depend on it
    runs = [{"seed": 0, "fold": i, "epochs_run": 20 + i, "metrics": {"test": float(xs[i]), "val": 0.9}}
            for i in map(int, rng.permutation(10))]
    (tmp_path / "PROTEINS-xmask.json").write_text(json.dumps({"name": "proteins-folds", "runs": runs}))
    peers = {m: rng.uniform(0.5, 1.0, 10) for m in ("GIN", "baseline")}
    prs = [{"model": m, "seed": 0, "fold": i, "epochs_run": 10, "seconds": 2.5, "metrics": {"test": float(v[i])}}
           for m, v in peers.items() for i in range(10)]
    (tmp_path / "PROTEINS-peers.json").write_text(json.dumps({"runs": prs}))
    return xs, peers


def test_table_gives_mean_and_population_std_over_folds(folds_table, tmp_path: Path) -> None:
    xs, peers = _write(tmp_path, np.random.default_rng(3))
    out = folds_table.table(tmp_path, {"PROTEINS": 123.0})
    row = [ln for ln in out.splitlines() if ln.startswith("| PROTEINS")]
    assert len(row) == 1 and "MUTAG" not in out  # a set without files is left out
    cells = [c.strip() for c in row[0].strip("|").split("|")][2:]
    for cell, v in zip(cells, (xs, peers["GIN"], peers["baseline"])):
        assert cell.startswith(f"{100 * v.mean():.2f} ± {100 * v.std(ddof=0):.2f} (10 folds")
    assert "24 ep., 123 s" in cells[0]  # epochs 20..29 -> mean 24.5 rounds to 24; xmask's wall given
    assert "10 ep., 25 s" in cells[1] and "10 ep., 25 s" in cells[2]  # 10 runs x 2.5 s


def test_missing_side_is_said(folds_table, tmp_path: Path) -> None:
    _write(tmp_path, np.random.default_rng(0))
    (tmp_path / "PROTEINS-peers.json").unlink()
    row = [ln for ln in folds_table.table(tmp_path, {}).splitlines() if ln.startswith("| PROTEINS")][0]
    assert row.count("not measured") == 2 and " s)" not in row.split("|")[3]


def test_peers_scored_on_the_folds_xmask_ran(folds_table, tmp_path: Path) -> None:
    xs, peers = _write(tmp_path, np.random.default_rng(7))
    path = tmp_path / "PROTEINS-xmask.json"
    d = json.loads(path.read_text())
    d["runs"] = [r for r in d["runs"] if r["fold"] in (0, 1, 2)]  # a run stopped after three folds
    path.write_text(json.dumps(d))
    row = [ln for ln in folds_table.table(tmp_path, {}).splitlines() if ln.startswith("| PROTEINS")][0]
    cells = [c.strip() for c in row.strip("|").split("|")][2:]
    for cell, v in zip(cells, (xs[:3], peers["GIN"][:3], peers["baseline"][:3])):
        assert cell.startswith(f"{100 * v.mean():.2f} ± {100 * v.std(ddof=0):.2f} (3 folds")


def test_the_largest_selected_epoch_and_the_budget_are_shown(folds_table, tmp_path: Path) -> None:
    _write(tmp_path, np.random.default_rng(1))
    best = {"GIN": [3, 17, 0], "baseline": [41, 2, 9]}  # 0-based selected epochs of three folds
    for name, key in (("xmask", None), ("peers", "model")):
        path = tmp_path / f"PROTEINS-{name}.json"
        d = json.loads(path.read_text())
        d["runs"] = [r for r in d["runs"] if r["fold"] < 3]
        for r in d["runs"]:
            r["best_epoch"] = best[r[key]][r["fold"]] if key else 5 * r["fold"]
            if key:
                r.update(epochs=1000, patience=100)
        path.write_text(json.dumps(d))
    row = [ln for ln in folds_table.table(tmp_path, {}).splitlines() if ln.startswith("| PROTEINS")][0]
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert cells[0] == "1000 / 100"
    # the largest 0-based index over the folds, shown 1-based: xmask 5 * 2 + 1, GIN 17 + 1, baseline 41 + 1
    assert [c.rsplit("sel. ≤ ", 1)[1] for c in cells[1:]] == ["11)", "18)", "42)"]


def test_mutag_is_marked_outside_erricas_set(folds_table, tmp_path: Path) -> None:
    _write(tmp_path, np.random.default_rng(2))
    for side in ("xmask", "peers"):
        (tmp_path / f"PROTEINS-{side}.json").rename(tmp_path / f"MUTAG-{side}.json")
    rows = [ln for ln in folds_table.table(tmp_path, {}).splitlines() if ln.startswith("| MUTAG")]
    assert len(rows) == 1 and rows[0].startswith("| MUTAG (outside Errica's set) |")
