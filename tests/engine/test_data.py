"""An experiment's data: the loader its level's data kind names, the checks on the loaded data, its cache."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.data.test_folder import write_folder
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine import data as data_mod
from xmask_cli.engine.data import LoadedData, LoadOptions, check_data, check_splittable, load_data
from xmask_cli.engine.plan import make_plan
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.errors import ConfigError, UsageError

FAST = ["structure.spd.enabled=false", "structure.spectrum.enabled=false", "structure.partition.parts=0",
        "structure.powers.k=1", "model.heads=1", "model.hidden=8"]


def test_each_level_is_read_by_the_loader_of_its_data_kind(monkeypatch, tmp_path):
    called: list[str] = []

    def recorder(kind: str):
        return lambda plan, opts: called.append(kind) or LoadedData(kind)

    for kind in ("graphs", "images", "edge-file"):
        monkeypatch.setitem(data_mod.LOADERS, kind, recorder(kind))
    expected = {"graph": "graphs", "node": "graphs", "link": "graphs", "image": "images", "edge": "edge-file"}
    assert set(LEVELS) == set(expected)
    plan = make_plan(resolve("graph-level"))
    for level, kind in expected.items():
        assert LEVELS[level].data == kind
        assert load_data(dataclasses.replace(plan, level=level), LoadOptions(cache_dir=tmp_path)).dataset == kind
    assert called == list(expected.values())
    assert set(data_mod.LOADERS) == {row.data for row in LEVELS.values()}  # every kind has a loader


def test_a_graph_dataset_is_loaded_with_its_structure_cache(tmp_path):
    cfg = resolve("graph-level", FAST)
    lines: list[str] = []
    loaded = load_data(make_plan(cfg), LoadOptions(cache_dir=tmp_path, log=lines.append))
    assert loaded.dataset == "MUTAG" and len(loaded.graphs.dataset) == 188 and loaded.edge_data is None
    assert loaded.cache_path is not None and loaded.cache_path.is_file()
    assert any(line.startswith("structure cache was missing: prepared") for line in lines)
    lines.clear()
    again = load_data(make_plan(cfg), LoadOptions(cache_dir=tmp_path, log=lines.append))
    assert again.cache_path == loaded.cache_path
    assert not any("structure cache was missing" in line for line in lines)  # read, not prepared again


def test_a_link_level_keeps_no_dataset_cache(tmp_path, monkeypatch):
    write_folder(tmp_path / "g")
    monkeypatch.chdir(tmp_path)
    loaded = load_data(make_plan(resolve("base", ["data.dataset=./g", "task.level=link", *FAST])),
                       LoadOptions(cache_dir=tmp_path / "cache"))
    assert loaded.dataset == "g" and loaded.cache_path is None  # the link task prepares its training edges
    assert int(loaded.graphs.dataset[0].num_nodes) == 30


def test_an_edge_file_is_read_as_its_rows(tmp_path):
    rows = [(u, v) for u in range(6) for v in range(u + 1, 6)]  # 15 distinct pairs
    path = tmp_path / "e.csv"
    path.write_text("src,dst,delay\n" + "".join(f"{u},{v},{u + v}.5\n" for u, v in rows))
    loaded = load_data(make_plan(resolve("edge-regression", [f"edge.file={path}"])), LoadOptions(cache_dir=tmp_path))
    assert loaded.dataset == "edges" and loaded.graphs is None and loaded.cache_path is None
    assert loaded.edge_data is not None and loaded.edge_data.edge_index.shape[1] == 15
    short = tmp_path / "short.csv"
    short.write_text("src,dst,delay\n0,1,1\n1,2,2\n")
    with pytest.raises(UsageError, match="short.csv: 2 row"):
        load_data(make_plan(resolve("edge-regression", [f"edge.file={short}"])), LoadOptions(cache_dir=tmp_path))


@pytest.mark.parametrize("rows, fractions, empty", [
    (9, [0.8, 0.1, 0.1], "val, test"),  # floor(0.9) = 0 rows each
    (10, [0.8, 0.1, 0.1], None),        # 8 / 1 / 1
    (19, [0.8, 0.1, 0.1], None),        # 17 / 1 / 1
    (5, [0.8, 0.2, 0.0], None),         # 4 / 1 / 0: a zero fraction may stay empty
    (4, [0.8, 0.2, 0.0], "val"),        # 4 / 0 / 0
    (0, [1.0, 0.0, 0.0], "train"),      # train always needs a row
])
def test_check_splittable(rows, fractions, empty):
    if empty is None:
        check_splittable("f.csv", rows, fractions)
    else:
        with pytest.raises(UsageError, match=f"f.csv: {rows} row\\(s\\) are too few .*\\(no {empty} rows\\)"):
            check_splittable("f.csv", rows, fractions)


def _graphs(name: str, tmp_path: Path):
    return load_graphs(get_dataset(name), data_root=None, cache_dir=tmp_path / "cache")


def test_folds_are_checked_against_the_smallest_class(tmp_path):
    graphs = _graphs("mutag", tmp_path)  # 125 and 63 graphs per class
    check_data(resolve("graph-level", ["data.folds=63"]), "graph", graphs)
    with pytest.raises(ConfigError, match="the smallest class has 63 graphs, fewer than the 64 folds"):
        check_data(resolve("graph-level", ["data.folds=64"]), "graph", graphs)


def test_a_link_split_needs_enough_non_edges(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # K6: 15 edges and no non-edge, so no val or test edge gets a negative pair.
    write_folder(tmp_path / "k6", edges=[(u, v) for u in range(6) for v in range(u + 1, 6)],
                 x=False, y=False)
    graphs = _graphs("./k6", tmp_path)
    # 0.8 / 0.1 / 0.1 of 15: floor(1.5) = 1 val and 1 test edge, each with one negative pair.
    with pytest.raises(UsageError, match="needs 2 negative pairs for its 2 val and test edges, but the graph has "
                                         "only 0 non-edges"):
        check_data(resolve("base", ["data.dataset=./k6", "task.level=link", "link.fractions=[0.8,0.1,0.1]"]),
                   "link", graphs)
    # 0.9 / 0.0 / 0.1: 14 / 0 / 1, and selection needs a val edge.
    with pytest.raises(UsageError, match=r"split of 15 edges leaves no val edges \(train 14, val 0, test 1\)"):
        check_data(resolve("base", ["data.dataset=./k6", "task.level=link", "link.fractions=[0.9,0.0,0.1]"]),
                   "link", graphs)
    # A path on 6 nodes: 5 edges, 15 - 5 = 10 non-edges.
    write_folder(tmp_path / "p6", edges=[(u, u + 1) for u in range(5)], x=False, y=False)
    check_data(resolve("base", ["data.dataset=./p6", "task.level=link", "link.fractions=[0.6,0.2,0.2]"]),
               "link", _graphs("./p6", tmp_path))


def test_a_memo_hands_a_dataset_only_to_a_run_that_reads_it_alike(tmp_path):
    import torch

    from xmask_cli.engine.data import DatasetMemo

    memo = DatasetMemo()
    opts = LoadOptions(cache_dir=tmp_path, datasets=memo)
    plain = load_data(make_plan(resolve("graph-level", FAST)), opts)
    other_model = load_data(make_plan(resolve("graph-level", [*FAST, "model.hidden=16"])), opts)
    assert other_model.graphs is plain.graphs and memo.loads == 1
    normalized = load_data(make_plan(resolve("graph-level", [*FAST, "data.normalize_features=true"])), opts)
    assert normalized.graphs is not plain.graphs and memo.loads == 2  # its transform is its own
    # The reused set keeps no transform; the normalized one has its own (MUTAG's one-hot rows sum to 1 already).
    assert plain.graphs.dataset.transform is None and normalized.graphs.dataset.transform is not None
    raw, rows = plain.graphs.dataset[0].x, normalized.graphs.dataset[0].x
    assert torch.allclose(rows, raw / raw.sum(1, keepdim=True))
    fresh = load_data(make_plan(resolve("graph-level", FAST)), LoadOptions(cache_dir=tmp_path))
    assert fresh.graphs is not plain.graphs and torch.equal(fresh.graphs.dataset[0].x, raw)  # no memo: a new read
