"""A user's folder as a dataset: what the model receives equals the files, and every inconsistency is
one line naming the file and row (exit 2)."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.config_resolve import resolve
from xmask_cli.data.folder import check_train_classes, find_files, folder_spec, is_folder_ref, load_folder
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import DataNotFoundError, UsageError

N = 30


def _graph(seed: int = 0) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """A small 3-block graph: edge list (u < v, each once), features [N, 4], labels (the block)."""
    rng = np.random.default_rng(seed)
    block = np.arange(N) % 3
    edges = [(u, v) for u in range(N) for v in range(u + 1, N)
             if rng.random() < (0.4 if block[u] == block[v] else 0.05)]
    x = (rng.normal(size=(N, 4)) + block[:, None]).astype(np.float32)
    return edges, x, block.astype(np.int64)


def write_folder(folder: Path, edges=None, x=None, y=None, *, edge_fmt: str = "csv", feat_fmt: str = "npy",
                 label_fmt: str = "npy") -> Path:
    """Write a dataset folder in the documented layout (any of the formats)."""
    g_edges, g_x, g_y = _graph()
    edges = g_edges if edges is None else edges
    x = g_x if x is None else x
    y = g_y if y is None else y
    folder.mkdir(parents=True, exist_ok=True)
    src = np.asarray([e[0] for e in edges], dtype=np.int64)
    dst = np.asarray([e[1] for e in edges], dtype=np.int64)
    if edge_fmt == "csv":
        (folder / "edges.csv").write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in edges))
    elif edge_fmt == "npz":
        np.savez(folder / "edges.npz", src=src, dst=dst)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq  # the test extra installs it
        pq.write_table(pa.table({"src": src, "dst": dst}), folder / "edges.parquet")
    if x is not False:
        if feat_fmt == "npy":
            np.save(folder / "features.npy", x)
        elif feat_fmt == "npz":
            np.savez(folder / "features.npz", x=x)
        elif feat_fmt == "csv":
            (folder / "features.csv").write_text(
                ",".join(f"f{j}" for j in range(x.shape[1])) + "\n"
                + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in x))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq  # the test extra installs it
            pq.write_table(pa.table({f"f{j}": x[:, j] for j in range(x.shape[1])}), folder / "features.parquet")
    if y is not False:
        if label_fmt == "npy":
            np.save(folder / "labels.npy", y)
        elif label_fmt == "csv":
            (folder / "labels.csv").write_text("label\n" + "".join(f"{int(v)}\n" for v in y))
        elif label_fmt == "npz":
            np.savez(folder / "labels.npz", y=y)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq  # the test extra installs it
            pq.write_table(pa.table({"label": y}), folder / "labels.parquet")
    return folder


def _csv_edges(path: Path) -> np.ndarray:
    """The edges of a CSV through Python's csv module (independent of the loader)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["src", "dst"]
    return np.asarray([[int(r[0]), int(r[1])] for r in rows[1:]], dtype=np.int64).T


# ------------------------------------------------------------------ what the model receives
def test_node_task_receives_the_files(tmp_path: Path) -> None:
    """x, y, the split and Â^1 of the cache that NodeTask reads equal what the files say (independent parse)."""
    import torch

    from xmask_cli.engine.runs.experiment import Experiment

    folder = write_folder(tmp_path / "g")
    for part, idx in (("train", np.arange(0, 18)), ("val", np.arange(18, 24)), ("test", np.arange(24, 30))):
        np.save(folder / f"{part}.npy", idx[::-1])  # any order
    cfg = resolve("node-level", [f"data.dataset={json.dumps(str(folder))}", "structure.partition.parts=0"])
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache")
    task = exp.task(0, "cpu")
    assert task.x.dtype == torch.float32 and np.array_equal(task.x.numpy(), np.load(folder / "features.npy"))
    assert np.array_equal(task.y.numpy(), np.load(folder / "labels.npy"))
    assert task.split.name == "files"
    for part in ("train", "val", "test"):
        assert sorted(getattr(task.split, part).tolist()) == sorted(np.load(folder / f"{part}.npy").tolist())
    # Â^1 = D^-1/2 (A + I) D^-1/2 of the symmetrised file edges, in numpy.
    e = _csv_edges(folder / "edges.csv")
    a = np.zeros((N, N))
    a[e[0], e[1]] = a[e[1], e[0]] = 1
    a += np.eye(N)
    d = a.sum(1) ** -0.5
    want = d[:, None] * a * d[None, :]
    from xmask_cli.cache import StructureCache

    with StructureCache(exp.cache_path) as c:
        dense = c.dense_powers(0)
    assert np.allclose(dense[0], want, atol=1e-6)
    assert task.out_dim == 3 and exp.dataset == "g" and exp.level == "node"


def test_random_split_is_60_20_20_of_the_labelled_nodes(tmp_path: Path) -> None:
    from xmask_cli.engine.scoring.splits import node_split

    _, _, y = _graph()
    y = y.copy()
    y[[1, 5, 7, 20]] = -1
    graphs = load_folder(folder_spec(str(write_folder(tmp_path / "g", y=y))))
    labelled = set(np.flatnonzero(y >= 0).tolist())
    m = len(labelled)
    s0 = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    parts = [set(s0.train.tolist()), set(s0.val.tolist()), set(s0.test.tolist())]
    assert set().union(*parts) == labelled and sum(map(len, parts)) == m  # disjoint, labelled only
    assert [len(p) for p in parts] == [m - 2 * (m // 5), m // 5, m // 5]
    s1 = node_split(graphs.spec.split, graphs.dataset[0], seed=1)
    assert s1.train.tolist() != s0.train.tolist()
    assert node_split(graphs.spec.split, graphs.dataset[0], seed=0).train.tolist() == s0.train.tolist()


@pytest.mark.parametrize("edge_fmt, feat_fmt, label_fmt", [("npz", "npz", "csv"), ("csv", "csv", "npz"),
                                                           ("parquet", "parquet", "parquet")])
def test_every_format_reads_the_same_graph(tmp_path: Path, edge_fmt: str, feat_fmt: str, label_fmt: str) -> None:
    ref = load_folder(folder_spec(str(write_folder(tmp_path / "ref"))))
    other = load_folder(folder_spec(str(write_folder(tmp_path / "other", edge_fmt=edge_fmt, feat_fmt=feat_fmt,
                                                     label_fmt=label_fmt))))
    a, b = ref.dataset[0], other.dataset[0]
    assert np.array_equal(a.edge_index.numpy(), b.edge_index.numpy())
    assert np.array_equal(a.x.numpy(), b.x.numpy()) and b.x.dtype == a.x.dtype
    assert np.array_equal(a.y.numpy(), b.y.numpy())
    assert ref.edge_index[0].tolist() == other.edge_index[0].tolist()


def test_masks_file_and_weights(tmp_path: Path) -> None:
    edges, _, y = _graph()
    folder = write_folder(tmp_path / "g", edges=edges)
    (folder / "edges.csv").write_text("src,dst,weight\n" + "".join(f"{u},{v},{1 + (u % 3)}\n" for u, v in edges)
                                      + "".join(f"{v},{u},{1 + (u % 3)}\n" for u, v in edges[:3]))
    train = np.zeros(N, bool)
    train[:20] = True
    np.savez(folder / "masks.npz", train=train, val=np.arange(N) >= 25, test=(np.arange(N) >= 20) & (np.arange(N) < 25))
    g = load_folder(folder_spec(str(folder)))
    d = g.dataset[0]
    assert d.train_mask.numpy().tolist() == train.tolist() and int(d.val_mask.sum()) == 5
    assert d.edge_weight.numpy().tolist() == [1 + (u % 3) for u, _ in edges] + [1 + (u % 3) for u, _ in edges[:3]]
    assert g.spec.split == "files" and g.spec.levels == ("node", "link")


def test_levels_and_paths(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g", y=False, x=False)
    spec = get_dataset("./" + str(folder.relative_to(tmp_path)))  # cwd is tmp_path (conftest)
    assert spec.family == "folder" and spec.levels == ("link",) and spec.ref == str(folder)
    assert spec.name == "g" and spec.key == "g"
    assert is_folder_ref("./g") and is_folder_ref("~/g") and is_folder_ref("a/b") and not is_folder_ref("cora")
    g = load_folder(spec)
    assert int(g.num_nodes[0]) == max(max(e) for e in _graph()[0]) + 1 and not g.has_features()
    with pytest.raises(DataNotFoundError, match="not found"):
        get_dataset("./nothing-here")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        get_dataset("./file.txt")


# ------------------------------------------------------------------ fingerprint
def test_fingerprint_changes_with_any_file(tmp_path: Path) -> None:
    from xmask_cli.cache import cache_key
    from xmask_cli.prepare.graphs import structure_params

    folder = write_folder(tmp_path / "g")
    params = structure_params(resolve("node-level").structure, "node")

    def key() -> str:
        return cache_key(load_folder(folder_spec(str(folder))).fingerprint(), params)

    k0 = key()
    assert key() == k0  # stable
    copy = write_folder(tmp_path / "copy")  # same content elsewhere: same key
    assert cache_key(load_folder(folder_spec(str(copy))).fingerprint(), params) == k0
    x = np.load(folder / "features.npy")
    x[3, 1] += 1
    np.save(folder / "features.npy", x)
    k1 = key()
    assert k1 != k0
    y = np.load(folder / "labels.npy")
    y[0] = 2 if y[0] != 2 else 1
    np.save(folder / "labels.npy", y)
    k2 = key()
    assert k2 not in (k0, k1)
    with open(folder / "edges.csv", "a") as f:
        f.write("0,29\n" if "0,29\n" not in (folder / "edges.csv").read_text() else "1,28\n")
    assert key() not in (k0, k1, k2)


# ------------------------------------------------------------------ every inconsistency: one line, file and row
def _refused(folder: Path, *extra: str) -> str:
    r = run("prepare", str(folder), "--cache-dir", str(folder.parent / "cache"), *extra)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    return one_error_line(r)


def test_edge_id_out_of_range_names_csv_line(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    text = (folder / "edges.csv").read_text().splitlines()
    text.insert(4, "# a comment line")
    text.insert(6, "3,30")  # line 7 of the file
    (folder / "edges.csv").write_text("\n".join(text) + "\n")
    line = _refused(folder)
    assert f"{folder / 'edges.csv'}:7:" in line and "dst 30 is out of range" in line and "30 nodes" in line


def test_without_features_or_labels_a_huge_id_names_its_line_and_the_bound(tmp_path: Path) -> None:
    # 30 nodes' edges plus one naming node 10^8: the node count would be 10^8 + 1.
    folder = write_folder(tmp_path / "g", x=False, y=False)
    edges = (folder / "edges.csv").read_text().splitlines()
    (folder / "edges.csv").write_text("\n".join(edges[:3] + ["2,100000000"] + edges[3:]) + "\n")
    distinct = len({int(v) for row in edges[1:] for v in row.split(",")} | {2, 10**8})
    line = _refused(folder, "--set", "task.level=link")
    assert line == (f"error: {folder / 'edges.csv'}:4: node id 100000000 is far above the {distinct} distinct ids "
                    f"(without a features or labels file ids must lie below 1000); renumber the nodes "
                    f"0..{distinct - 1}, or add features or labels with one row per node")


def test_edge_id_out_of_range_names_npz_row(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g", edge_fmt="npz")
    z = dict(np.load(folder / "edges.npz"))
    z["src"][5] = 31
    np.savez(folder / "edges.npz", **z)
    assert f"{folder / 'edges.npz'} row 5: src 31 is out of range" in _refused(folder)


@pytest.mark.parametrize("bad, why", [("1.5", "src '1.5' is not an integer"), ("-2", "src -2 is negative"),
                                      ("x", "src 'x' is not an integer")])
def test_edge_values_that_do_not_parse(tmp_path: Path, bad: str, why: str) -> None:
    folder = write_folder(tmp_path / "g")
    (folder / "edges.csv").write_text("src,dst\n0,1\n\n" + f"{bad},2\n")
    line = _refused(folder)
    assert f"{folder / 'edges.csv'}:4:" in line and why in line


def _norm_powers(pairs: list[tuple[int, int]], n: int, k: int) -> np.ndarray:
    """``[k, n, n]`` powers of ``D^-1/2 (A + I) D^-1/2``, A the symmetric 0/1 matrix of ``pairs`` (dense numpy)."""
    a = np.zeros((n, n))
    for u, v in pairs:
        a[u, v] = a[v, u] = 1.0
    a_hat = a + np.eye(n)
    d = a_hat.sum(1) ** -0.5
    a_hat = d[:, None] * a_hat * d[None, :]
    out, p = [], np.eye(n)
    for _ in range(k):
        p = p @ a_hat
        out.append(p)
    return np.stack(out)


def test_repeated_rows_merge_into_their_first(tmp_path: Path) -> None:
    """An edge listed three times is one edge: the graph is the file's distinct rows in file order, its
    structure the dense powers of that graph, and one log line counts the merged rows and names the first."""
    import h5py

    edges, _, _ = _graph()
    rows = list(edges)
    rows.insert(3, edges[0])  # line 5 repeats line 2
    rows += [edges[0], edges[7], (edges[2][1], edges[2][0])]  # the last is the reverse: a row of its own
    folder = write_folder(tmp_path / "g", edges=rows)
    g = load_folder(folder_spec(str(folder)))
    distinct = list(dict.fromkeys(rows))  # the first listing of each (src, dst) row, in file order
    assert len(distinct) == len(rows) - 3
    assert g.edge_index[0].T.tolist() == [list(e) for e in distinct]
    assert g.merged_edge_rows == 3
    assert g.notes == ("merged 3 repeated rows of edges.csv; first: line 5 repeats line 2",)
    assert g.dataset[0].edge_index.T.tolist() == [list(e) for e in distinct]

    cache = tmp_path / "cache"
    r = run("--format", "json", "prepare", str(folder), "--cache-dir", str(cache))
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("merged 3 repeated rows of edges.csv; first: line 5 repeats line 2") == 1
    summary = json.loads(r.stdout)
    assert summary["merged_edge_rows"] == 3 and summary["edges"] == len({tuple(sorted(e)) for e in distinct})
    with h5py.File(summary["path"], "r") as f:
        assert int(f.attrs["merged_edge_rows"]) == 3
    from xmask_cli.cache import StructureCache

    with StructureCache(summary["path"]) as c:
        got = c.dense_powers(0)
    np.testing.assert_allclose(got, _norm_powers(distinct, N, got.shape[0]), atol=1e-6)
    again = run("--format", "json", "prepare", str(folder), "--cache-dir", str(cache))  # read back from the cache
    assert again.exit_code == 0 and json.loads(again.stdout)["cached"] and json.loads(again.stdout)["merged_edge_rows"] == 3
    v = run("cache", "verify", "--check-inputs", "--cache-dir", str(cache))
    assert v.exit_code == 0, v.stdout + v.stderr


def test_without_repeats_nothing_is_merged_or_recorded(tmp_path: Path) -> None:
    """A folder without repeated rows reads as before: same arrays, same fingerprint formula (so the same cache
    key), no merge attribute."""
    import hashlib

    import h5py

    from xmask_cli.data.folder import folder_digest
    from xmask_cli.data.graphset import graphs_fingerprint

    folder = write_folder(tmp_path / "g")
    g = load_folder(folder_spec(str(folder)))
    assert g.merged_edge_rows == 0 and g.notes == ()
    edges = _csv_edges(folder / "edges.csv")
    fp = graphs_fingerprint([edges], np.asarray([N]))
    assert g.fingerprint() == hashlib.sha256(f"{fp}:{folder_digest(find_files(folder))}".encode()).hexdigest()
    r = run("--format", "json", "prepare", str(folder), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0 and "merged" not in r.stderr
    summary = json.loads(r.stdout)
    assert summary["merged_edge_rows"] == 0
    with h5py.File(summary["path"], "r") as f:
        assert "merged_edge_rows" not in f.attrs


def test_repeated_rows_of_npz_and_weights(tmp_path: Path) -> None:
    """Binary rows are named by index; a weighted repeat merges when its weight is the row's, else both lines."""
    folder = write_folder(tmp_path / "g", edge_fmt="npz")
    np.savez(folder / "edges.npz", src=np.array([0, 1, 2, 0, 1]), dst=np.array([1, 2, 3, 1, 2]))
    g = load_folder(folder_spec(str(folder)))
    assert g.edge_index[0].tolist() == [[0, 1, 2], [1, 2, 3]]
    assert g.notes == ("merged 2 repeated rows of edges.npz; first: row 3 repeats row 0",)
    (folder / "edges.npz").unlink()
    (folder / "edges.csv").write_text("src,dst,weight\n0,1,2\n1,2,3\n0,1,2\n2,1,3\n")
    g = load_folder(folder_spec(str(folder)))
    assert g.edge_index[0].tolist() == [[0, 1, 2], [1, 2, 1]]
    assert g.dataset[0].edge_weight.tolist() == [2.0, 3.0, 3.0]
    assert g.notes[0] == "merged 1 repeated row of edges.csv; first: line 4 repeats line 2"
    (folder / "edges.csv").write_text("src,dst,weight\n0,1,2\n1,2,3\n0,1,5\n")
    line = _refused(folder)
    assert line == (f"error: {folder / 'edges.csv'}:4: edge (0, 1) has weight 5.0 but the same row "
                    f"{folder / 'edges.csv'}:2 has 2.0; a repeated row is merged only when its weight is the same")


def test_reverse_edges_with_other_weights(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    (folder / "edges.csv").write_text("src,dst,weight\n0,1,1\n1,2,2\n2,1,3\n")
    line = _refused(folder)
    assert f"{folder / 'edges.csv'}:3: edge (1, 2) has weight 2.0" in line and "edges.csv:4 has 3.0" in line


def test_row_count_mismatch(tmp_path: Path) -> None:
    _, _, y = _graph()
    folder = write_folder(tmp_path / "g", y=y[:-1])
    line = _refused(folder)
    assert str(folder / "labels.npy") in line and "29 labels but features.npy has 30 rows" in line


def test_nan_feature_names_row(tmp_path: Path) -> None:
    _, x, _ = _graph()
    x = x.copy()
    x[7, 2] = np.nan
    assert f"{tmp_path / 'g' / 'features.npy'} row 7: feature column 2 is nan" in _refused(write_folder(tmp_path / "g", x=x))


def test_infinite_feature_in_csv_names_line(tmp_path: Path) -> None:
    _, x, _ = _graph()
    folder = write_folder(tmp_path / "g", feat_fmt="csv")
    lines = (folder / "features.csv").read_text().splitlines()
    lines[11] = "inf," + lines[11].split(",", 1)[1]  # node 10, line 12 of the file
    (folder / "features.csv").write_text("\n".join(lines) + "\n")
    assert f"{folder / 'features.csv'}:12:" in _refused(folder)


def test_headerless_features_csv_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g", feat_fmt="csv")
    lines = (folder / "features.csv").read_text().splitlines()
    (folder / "features.csv").write_text("\n".join(lines[1:]) + "\n")
    assert f"{folder / 'features.csv'}:1: the first row holds numbers" in _refused(folder)


def test_class_missing_from_training_split(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    y = np.load(folder / "labels.npy")
    np.save(folder / "train.npy", np.flatnonzero(y != 2)[:12])
    np.save(folder / "val.npy", np.flatnonzero(y == 2)[:5])
    np.save(folder / "test.npy", np.flatnonzero(y == 2)[5:])
    line = _refused(folder)
    assert f"{folder / 'labels.npy'}: class 2 has no node in the training split (train.npy)" in line


def test_a_label_no_node_has(tmp_path: Path) -> None:
    _, _, y = _graph()
    y = np.where(y == 1, 3, y)  # labels 0, 2, 3: class 1 has no node at all, whatever the split
    line = _refused(write_folder(tmp_path / "g", y=y))
    assert f"{tmp_path / 'g' / 'labels.npy'}: no node has label 1" in line


def test_class_missing_from_a_seeds_random_draw(tmp_path: Path) -> None:
    """Class 2 has one labelled node; a seed whose 60/20/20 draw leaves it out of train is refused, naming the seed."""
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import Experiment

    _, _, y = _graph()
    y = np.where(y == 2, -1, y)
    y[29] = 2
    folder = write_folder(tmp_path / "g", y=y)
    labelled = np.flatnonzero(y >= 0)
    # Independently of the loader: where seed s's permutation of the labelled nodes puts node 29.
    m = len(labelled)
    n_train = m - 2 * (m // 5)
    pos = {s: int(np.flatnonzero(labelled[np.random.default_rng(s).permutation(m)] == 29)[0]) for s in range(20)}
    bad = next(s for s in range(20) if pos[s] >= n_train)
    good = next(s for s in range(20) if pos[s] < n_train)
    cfg = resolve("node-level", [f"data.dataset={json.dumps(str(folder))}"])
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache")
    assert exp.task(good, "cpu").split.train.tolist().count(29) == 1
    with pytest.raises(UsageError, match=rf"labels.npy: class 2 has no node in the training split "
                                         rf"\(random-60-20-20, seed {bad}\); every class needs a training node"):
        exp.task(bad, "cpu")
    # The check against a hand count: every class with a training node passes.
    check_train_classes(np.array([0, 1, 1, -1, 2]), np.array([0, 1, 4]), "labels.npy", "x")


def test_duplicate_id_in_split_file(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    (folder / "train.csv").write_text("node\n" + "".join(f"{i}\n" for i in [0, 1, 2, 3, 4, 5, 2]))
    np.save(folder / "val.npy", np.arange(20, 25))
    np.save(folder / "test.npy", np.arange(25, 30))
    assert f"{folder / 'train.csv'}:8: node 2 repeats {folder / 'train.csv'}:4" in _refused(folder)


def test_split_overlap_and_range(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    np.save(folder / "train.npy", np.arange(0, 18))
    np.save(folder / "val.npy", np.array([18, 19, 3]))
    np.save(folder / "test.npy", np.arange(24, 30))
    line = _refused(folder)
    assert f"{folder / 'val.npy'} row 2: node 3 is in both train ({folder / 'train.npy'} row 3) and val" in line
    np.save(folder / "val.npy", np.array([18, 40]))
    assert f"{folder / 'val.npy'} row 1: node id 40 is out of range" in _refused(folder)


def test_unlabelled_node_in_split_and_bad_label(tmp_path: Path) -> None:
    _, _, y = _graph()
    y = y.copy()
    y[19] = -1
    folder = write_folder(tmp_path / "g", y=y)
    np.save(folder / "train.npy", np.arange(0, 18))
    np.save(folder / "val.npy", np.array([18, 19]))
    np.save(folder / "test.npy", np.arange(24, 30))
    assert f"{folder / 'val.npy'} row 1: node 19 is unlabelled" in _refused(folder)
    y[4] = -3
    np.save(folder / "labels.npy", y)
    assert f"{folder / 'labels.npy'} row 4: label -3 is below -1" in _refused(folder)


def test_symlinked_file_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    outside = tmp_path / "elsewhere.npy"
    (folder / "features.npy").rename(outside)
    (folder / "features.npy").symlink_to(outside)
    assert f"{folder / 'features.npy'}: a symbolic link" in _refused(folder)


def test_missing_edges_and_clashing_files(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    np.savez(folder / "edges.npz", src=np.array([0]), dst=np.array([1]))
    assert "both edges.csv and edges.npz" in _refused(folder)
    (folder / "edges.csv").unlink()
    (folder / "edges.npz").unlink()
    with pytest.raises(DataNotFoundError, match="has no edges file"):
        find_files(folder)
    r = run("prepare", str(folder))
    assert r.exit_code == 3 and "has no edges file" in one_error_line(r)


def test_parquet_without_pyarrow_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    folder = write_folder(tmp_path / "g", y=False)
    (folder / "labels.parquet").write_bytes(b"PAR1 not really")
    real = builtins.__import__

    def no_pyarrow(name, *args, **kw):
        if name.startswith("pyarrow"):
            raise ImportError("No module named 'pyarrow'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    line = _refused(folder)
    assert f"{folder / 'labels.parquet'}: reading Parquet needs pyarrow: pip install 'xmask-cli[parquet]'" in line


# ------------------------------------------------------------------ special files and lying headers
@contextlib.contextmanager
def _no_hang(seconds: int = 60) -> Iterator[None]:
    """Fail (never hang the suite) if the code under test blocks, e.g. opening a FIFO no one writes to."""
    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for {seconds}s: a FIFO was opened and waited on")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _mutag_set(root: Path, fifo: str | None) -> Path:
    """The bundled MUTAG raw files under ``root/MUTAG/raw/``, with file ``fifo`` (if any) replaced by a FIFO."""
    from xmask_cli.data.load import EMBEDDED_ROOT

    shutil.copytree(EMBEDDED_ROOT / "MUTAG" / "raw", root / "MUTAG" / "raw")
    if fifo is not None:
        (root / "MUTAG" / "raw" / fifo).unlink()
        os.mkfifo(root / "MUTAG" / "raw" / fifo)
    return root / "MUTAG"


@pytest.mark.parametrize("fifo", ["MUTAG_edge_labels.txt", "MUTAG_node_labels.txt", "MUTAG_A.txt",
                                  "MUTAG_graph_labels.txt"])
def test_a_fifo_in_a_graph_set_is_named_not_waited_on(tmp_path: Path, fifo: str) -> None:
    """Every raw file of a TU-format set is checked before PyG reads the folder: a FIFO (one PyG's reader, or
    the staging hash, would wait on forever) exits 2 naming it, and a FIFO at NAME_A.txt is still a graph set."""
    folder = _mutag_set(tmp_path / "sets", fifo)
    with _no_hang():
        line = _refused(folder)
    assert line == (f"error: {folder / 'raw' / fifo}: a FIFO (named pipe), not a regular file; xmask reads only "
                    f"regular files in a dataset folder")


def test_a_fifo_under_a_data_root_is_named_for_a_registry_name(tmp_path: Path) -> None:
    """``xmask prepare mutag --data-root R``: a FIFO among R's MUTAG files is refused, not skipped for the bundled copy
    (a required file) nor handed to PyG (an optional one)."""
    for fifo in ("MUTAG_A.txt", "MUTAG_node_labels.txt"):
        root = tmp_path / fifo
        _mutag_set(root, fifo)
        with _no_hang():
            r = run("prepare", "mutag", "--data-root", str(root), "--cache-dir", str(tmp_path / "cache"))
        assert r.exit_code == 2, r.stderr
        assert one_error_line(r).startswith(f"error: {root / 'MUTAG' / 'raw' / fifo}: a FIFO (named pipe), not a regular")


def test_a_graph_set_with_a_required_file_missing(tmp_path: Path) -> None:
    folder = _mutag_set(tmp_path / "sets", None)
    (folder / "raw" / "MUTAG_graph_labels.txt").unlink()
    r = run("prepare", str(folder), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 3 and f"{folder / 'raw' / 'MUTAG_graph_labels.txt'} not found" in one_error_line(r)


@pytest.mark.parametrize("name", ["edges.csv", "features.npy", "labels.npy"])
def test_a_fifo_in_a_node_folder(tmp_path: Path, name: str) -> None:
    folder = write_folder(tmp_path / "g")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    with _no_hang():
        line = _refused(folder)
    assert line.startswith(f"error: {folder / name}: a FIFO (named pipe), not a regular file")


def _lying_npy(path: Path, shape: tuple[int, ...], data_bytes: int, descr: str = "<f4") -> bytes:
    """A .npy whose header declares ``shape`` over ``data_bytes`` bytes of data (written with numpy's own header writer)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    data = buf.getvalue() + b"\0" * data_bytes
    path.write_bytes(data)
    return data


def test_features_npy_whose_header_lies_is_refused_before_allocating(tmp_path: Path) -> None:
    """A header claiming (10^11, 4) float32 over 64 data bytes: one line naming file, shape and sizes (no 1.5 TiB
    allocation, no MemoryError)."""
    folder = write_folder(tmp_path / "g")
    _lying_npy(folder / "features.npy", (10**11, 4), 64)
    line = _refused(folder)
    assert line == (f"error: {folder / 'features.npy'}: the header declares shape [100000000000, 4] of float32 "
                    f"(1,600,000,000,000 bytes) but 64 data bytes are there; the file is truncated or its header "
                    f"is wrong")


def test_features_npz_member_whose_header_lies(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g", feat_fmt="npz")
    member = _lying_npy(tmp_path / "x.npy", (10**11, 4), 64)
    with zipfile.ZipFile(folder / "features.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", member)
    line = _refused(folder)
    assert line == (f"error: {folder / 'features.npz'} array x: the header declares shape [100000000000, 4] of "
                    f"float32 (1,600,000,000,000 bytes) but 64 data bytes are there; the file is truncated or its "
                    f"header is wrong")
