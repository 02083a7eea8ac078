"""``xmask train --dataset ./folder`` end to end: node level (small: full attention; large by the size rule:
query batches), link level from the same folder, and a graph set in TU's raw format."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import run
from tests.data.test_folder import write_folder

TINY = ["--set", "model.hidden=8", "--set", "model.layers=1", "--set", "train.epochs=2",
        "--set", "train.warmup_epochs=0", "--set", "structure.partition.parts=0", "--device", "cpu"]


def _train(*args: str) -> dict:
    r = run("--format", "json", "train", *args, *TINY)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("memory_gb, mode", [(4, "full"), (1e-4, "query")])
def test_node_level_from_folder(tmp_path: Path, memory_gb: float, mode: str) -> None:
    """The folder picks the node level; node.mode=auto picks full or query by the memory budget, as for registry
    sets."""
    write_folder(tmp_path / "mygraph")
    out = _train("--dataset", "./mygraph", "--set", f"node.memory_gb={memory_gb}")
    assert out["dataset"] == "mygraph" and out["level"] == "node" and out["metric"] == "accuracy"
    assert out["features"]["detail"] == "features.npy (4 columns)"
    config = json.loads((tmp_path / "runs" / "mygraph-node" / "0" / "config.json").read_text())
    assert config["config"]["data"]["dataset"] == str(tmp_path / "mygraph")
    assert config["node"]["mode"] == mode
    assert config["split"]["name"] == "random-60-20-20" and len(config["split"]["train"]) == 18
    # The run reads its folder back (config.json holds the absolute path): eval recomputes the test metric.
    e = run("--format", "json", "eval", str(tmp_path / "runs" / "mygraph-node" / "0"), "--split", "test",
            "--device", "cpu")
    assert e.exit_code == 0, e.stderr
    assert json.loads(e.stdout)["metrics"]["test"] == out["runs"][0]["metrics"]["test"]


def test_a_folder_given_by_set_or_from_python_is_saved_by_its_absolute_path(tmp_path: Path) -> None:
    """However the folder is named (``--set data.dataset=./g``, a Config from Python), config.json holds its
    absolute path, so ``xmask eval`` from another working directory finds it."""
    import os

    import xmask_cli
    from xmask_cli.config_resolve import resolve

    write_folder(tmp_path / "mygraph")
    _train("--preset", "node-level", "--set", "data.dataset=./mygraph", "--name", "viaset")
    cfg = resolve("node-level", ["model.hidden=8", "model.layers=1", "train.epochs=2", "train.warmup_epochs=0",
                                 "structure.partition.parts=0"])
    xmask_cli.train(cfg, dataset="./mygraph", name="viapython", runs_dir=tmp_path / "runs",
                    cache_dir=tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)  # the test's working directory is tmp_path (conftest): pytest restores it
    for name in ("viaset", "viapython"):
        run_dir = tmp_path / "runs" / name / "0"
        config = json.loads((run_dir / "config.json").read_text())
        assert config["config"]["data"]["dataset"] == str(tmp_path / "mygraph"), name
        e = run("--format", "json", "eval", str(run_dir), "--split", "test", "--device", "cpu",
                "--cache-dir", str(tmp_path / "cache"))
        assert e.exit_code == 0, e.stderr


def test_link_level_from_the_same_folder(tmp_path: Path) -> None:
    write_folder(tmp_path / "mygraph")
    out = _train("--preset", "link-level", "--dataset", "./mygraph")
    assert out["dataset"] == "mygraph" and out["level"] == "link" and out["metric"] == "mrr"
    assert 0 < out["runs"][0]["metrics"]["test"] <= 1


def test_edges_only_folder_is_link_level(tmp_path: Path) -> None:
    """Without labels the folder's only level is link (features: the training edges' degree one-hot)."""
    write_folder(tmp_path / "g", x=False, y=False)
    out = _train("--dataset", "./g")
    assert out["level"] == "link"
    r = run("train", "--preset", "node-level", "--dataset", "./g", *TINY)
    assert r.exit_code == 2 and "has no node-level task" in r.stderr


def write_tu_set(root: Path, name: str = "RINGS", graphs: int = 12) -> Path:
    """A graph set in TU's raw format: 12 graphs, cycles (label 1) and paths (label 0) of 4-7 nodes."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    a, indicator, graph_labels, node_labels = [], [], [], []
    first = 1  # TU node ids are 1-based over the whole set
    for g in range(graphs):
        size, cycle = 4 + g % 4, g % 2
        ids = list(range(first, first + size))
        pairs = list(zip(ids[:-1], ids[1:])) + ([(ids[-1], ids[0])] if cycle else [])
        for u, v in pairs:  # both directions, as TU files store them
            a += [f"{u}, {v}", f"{v}, {u}"]
        indicator += [str(g + 1)] * size
        node_labels += [str(i % 2) for i in range(size)]
        graph_labels.append(str(cycle))
        first += size
    for suffix, lines in (("A", a), ("graph_indicator", indicator), ("graph_labels", graph_labels),
                          ("node_labels", node_labels)):
        (raw / f"{name}_{suffix}.txt").write_text("\n".join(lines) + "\n")
    return root / name


def test_tu_format_folder_trains_at_graph_level(tmp_path: Path) -> None:
    write_tu_set(tmp_path / "sets")
    out = _train("--dataset", "./sets/RINGS", "--set", "model.node_struct=none")
    assert out["dataset"] == "RINGS" and out["level"] == "graph"
    assert out["features"]["detail"] == "PyG TUDataset x: one-hot node labels (2)"
    config = json.loads((tmp_path / "runs" / "rings-graph" / "0" / "config.json").read_text())
    split = config["split"]
    assert split["name"] == "random-8-1-1"
    assert sorted(split["train"] + split["val"] + split["test"]) == list(range(12))


def test_tu_folder_graphs_equal_the_files(tmp_path: Path) -> None:
    """The graphs the loader gives equal the TU files, parsed here by hand."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    folder = write_tu_set(tmp_path / "sets")
    graphs = load_graphs(get_dataset(str(folder)), data_root=None, cache_dir=tmp_path / "cache")
    indicator = np.loadtxt(folder / "raw" / "RINGS_graph_indicator.txt", dtype=np.int64)
    a = np.loadtxt(folder / "raw" / "RINGS_A.txt", delimiter=",", dtype=np.int64) - 1
    offsets = np.concatenate([[0], np.cumsum(np.bincount(indicator)[1:])])
    assert graphs.num_nodes.tolist() == np.bincount(indicator)[1:].tolist()
    for g in range(12):
        mine = a[indicator[a[:, 0]] == g + 1] - offsets[g]
        assert sorted(map(tuple, mine.tolist())) == sorted(map(tuple, graphs.edge_index[g].T.tolist()))
    labels = np.loadtxt(folder / "raw" / "RINGS_graph_labels.txt", dtype=np.int64)
    assert [int(graphs.dataset[i].y) for i in range(12)] == labels.tolist()


def test_ablate_a_folder_writes_under_its_name(tmp_path: Path) -> None:
    """Ablation folders and run names come from the folder's name, never its path."""
    write_folder(tmp_path / "mygraph")
    r = run("--format", "json", "ablate", "--dataset", "./mygraph", "--variants", "full", *TINY)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["name"] == "mygraph-node" and Path(out["out_dir"]) == Path("ablations") / "mygraph-node"
    assert (tmp_path / "ablations" / "mygraph-node" / "runs" / "mygraph-node-full" / "0" / "summary.json").is_file()


def test_a_folder_with_repeated_rows_trains_as_the_merged_graph(tmp_path: Path) -> None:
    """Repeated edge rows merge: training on a folder listing rows twice gives the numbers of the same folder with
    each row once (same seed, same split, same structure); stderr says what was merged, once."""
    from tests.data.test_folder import _graph

    edges, _, _ = _graph()
    write_folder(tmp_path / "clean", edges=edges)
    write_folder(tmp_path / "repeats", edges=edges[:10] + edges[:4] + edges[10:] + edges[-2:])
    r = run("--format", "json", "train", "--dataset", "./repeats", *TINY)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("merged 6 repeated rows of edges.csv; first: line 12 repeats line 2") == 1
    repeats = json.loads(r.stdout)
    clean = _train("--dataset", "./clean")
    assert "test" in clean["runs"][0]["metrics"]
    assert repeats["runs"][0]["metrics"] == clean["runs"][0]["metrics"]
