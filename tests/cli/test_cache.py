"""``xmask cache verify --check-inputs`` on caches of a user's folder: the recorded folder is read again and
its fingerprint compared; a changed file fails (exit 4), a gone or unusable folder is one error line."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.cli.test_train_folder import write_tu_set
from tests.cli_helpers import one_error_line, run
from tests.data.test_folder import write_folder
from xmask_cli.cache import SOURCE_ATTR


def _prepare(dataset: str, cache: Path) -> Path:
    r = run("-f", "json", "prepare", dataset, "--cache-dir", str(cache))
    assert r.exit_code == 0, r.stderr
    return Path(json.loads(r.stdout)["path"])


def _verify(cache: Path, *extra: str):
    return run("-f", "json", "cache", "verify", "--cache-dir", str(cache), "--check-inputs", *extra)


def _problems(r) -> list[str]:
    report = json.loads(r.stdout)
    assert len(report) == 1
    return report[0]["problems"]


@pytest.fixture
def prepared(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(folder, cache dir, cache file)`` of the folder ``./mygraph`` prepared into ``cache/``."""
    folder = write_folder(tmp_path / "mygraph")
    cache = tmp_path / "cache"
    return folder, cache, _prepare("./mygraph", cache)


def test_a_prepared_folder_passes_and_a_changed_file_fails(prepared) -> None:
    folder, cache, path = prepared
    with h5py.File(path, "r") as f:
        assert f.attrs[SOURCE_ATTR] == os.path.realpath(folder)
    ok = _verify(cache)
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["ok"]
    ls = json.loads(run("-f", "json", "cache", "ls", "--cache-dir", str(cache)).stdout)
    assert [(r["dataset"], r["status"], r["num_graphs"]) for r in ls] == [("mygraph", "ok", 1)]

    original = (folder / "features.npy").read_bytes()
    x = np.load(folder / "features.npy")
    x[3, 1] += 0.5  # one value
    np.save(folder / "features.npy", x)
    bad = _verify(cache)
    assert bad.exit_code == 4  # as a registry dataset whose raw files changed
    assert any("other input graphs" in p for p in _problems(bad))
    assert bad.stderr.startswith("error: 1 of 1 cache file(s) failed verification")
    # The cache file itself is still sound: plain verify passes.
    assert run("cache", "verify", "--cache-dir", str(cache)).exit_code == 0
    (folder / "features.npy").write_bytes(original)  # the same bytes again: the same input
    assert _verify(cache).exit_code == 0

    lines = (folder / "edges.csv").read_text().splitlines()
    pairs = {tuple(sorted(map(int, ln.split(",")))) for ln in lines[1:]}
    u = int(lines[1].split(",")[0])
    v = next(w for w in range(30) if w != u and tuple(sorted((u, w))) not in pairs)
    lines[1] = f"{u},{v}"  # one edge moved to a pair the graph did not have
    (folder / "edges.csv").write_text("\n".join(lines) + "\n")
    assert _verify(cache).exit_code == 4


def test_a_removed_folder_is_one_error_line(prepared) -> None:
    folder, cache, _ = prepared
    shutil.rmtree(folder)
    r = _verify(cache)
    assert r.exit_code == 3 and r.stdout == ""
    line = one_error_line(r)
    assert str(folder) in line and "no longer exists" in line and "xmask prepare" in line and "--force" in line


@pytest.mark.parametrize("damage, code, words", [
    ("file", 2, "no longer a folder"),
    ("empty", 3, "has no edges file"),
    ("bad-labels", 2, "labels"),
    ("link", 2, "symbolic link"),
])
def test_a_folder_that_no_longer_reads_is_one_error_line(prepared, damage: str, code: int, words: str) -> None:
    folder, cache, _ = prepared
    moved = folder.parent / "elsewhere"
    folder.rename(moved)
    if damage == "file":
        folder.write_text("not a folder\n")
    elif damage == "empty":
        folder.mkdir()
    elif damage == "bad-labels":
        shutil.copytree(moved, folder)
        np.save(folder / "labels.npy", np.zeros(7, dtype=np.int64))  # 7 labels for 30 nodes
    else:  # the folder's own path now leads through a link to a sound copy: refused, not followed
        folder.symlink_to(moved, target_is_directory=True)
    r = _verify(cache)
    assert r.exit_code == code
    line = one_error_line(r)
    assert str(folder) in line and words in line


def test_a_cache_without_a_recorded_folder_says_how_to_prepare_again(prepared) -> None:
    _, cache, path = prepared
    with h5py.File(path, "r+") as f:  # as a file from before folders were recorded
        del f.attrs[SOURCE_ATTR]
    r = _verify(cache)
    assert r.exit_code == 4 and "Traceback" not in r.stderr
    (problem,) = _problems(r)
    assert "records no dataset folder" in problem and "'mygraph'" in problem
    assert f"xmask prepare <folder> --force --cache-dir {cache}" in problem


@pytest.mark.parametrize("value", ["mygraph", "./mygraph", "{tmp}/x/../mygraph", "{tmp}/mygraph/", 7,
                                   ["{tmp}/mygraph"], b"\xff/x"])
def test_a_recorded_folder_that_is_no_clean_absolute_path_is_never_read(prepared, value) -> None:
    """A relative or unnormalized path, a number, an array, undecodable bytes: a problem of the file,
    though the paths name the sound folder (from the current directory) were they followed."""
    folder, cache, path = prepared
    if isinstance(value, str):
        value = value.format(tmp=folder.parent)
    elif isinstance(value, list):
        value = np.asarray([v.format(tmp=folder.parent) for v in value], dtype=h5py.string_dtype())
    elif isinstance(value, bytes):
        value = np.bytes_(value)
    with h5py.File(path, "r+") as f:
        f.attrs[SOURCE_ATTR] = np.int64(value) if isinstance(value, int) else value
    r = _verify(cache)
    assert r.exit_code == 4
    (problem,) = _problems(r)
    assert "records" in problem and "dataset folder" in problem and "xmask prepare" in problem


def test_a_folder_named_like_a_registry_dataset_is_read_from_the_folder(tmp_path: Path) -> None:
    """A folder called mutag: its cache is checked against the folder, not the registry's MUTAG."""
    write_folder(tmp_path / "mutag")
    _prepare("./mutag", tmp_path / "cache")
    r = _verify(tmp_path / "cache")
    assert r.exit_code == 0, r.stdout + r.stderr


def test_a_tu_format_folder_is_read_again(tmp_path: Path) -> None:
    folder = write_tu_set(tmp_path / "sets")
    path = _prepare("./sets/RINGS", tmp_path / "cache")
    with h5py.File(path, "r") as f:
        assert f.attrs[SOURCE_ATTR] == os.path.realpath(folder)
    assert _verify(tmp_path / "cache").exit_code == 0
    a = folder / "raw" / "RINGS_A.txt"
    a.write_text("".join(a.read_text().splitlines(keepends=True)[:-2]))  # graph 12 loses one edge
    r = _verify(tmp_path / "cache")
    assert r.exit_code == 4 and any("other input graphs" in p for p in _problems(r))


def test_training_records_the_folder_too(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "g")
    r = run("-f", "json", "train", "--dataset", "./g", "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
            "--set", "train.epochs=1", "--set", "model.hidden=8", "--set", "model.layers=1",
            "--set", "structure.partition.parts=0")
    assert r.exit_code == 0, r.stderr
    (path,) = (tmp_path / "cache" / "g").glob("*.h5")
    with h5py.File(path, "r") as f:
        assert f.attrs[SOURCE_ATTR] == os.path.realpath(folder)
    assert _verify(tmp_path / "cache").exit_code == 0


def test_registry_caches_record_no_folder_and_still_check_their_input(tmp_path: Path) -> None:
    path = _prepare("mutag", tmp_path / "cache")
    with h5py.File(path, "r") as f:
        assert SOURCE_ATTR not in f.attrs
    assert _verify(tmp_path / "cache").exit_code == 0


def test_generated_and_training_edge_caches_pass(tmp_path: Path) -> None:
    """``graphqa:<task>`` is found from its cache folder name; a link task's training-edge graph (a
    seeded split, no dataset to read again) is checked without its input."""
    from xmask_cli.config import StructureSection
    from xmask_cli.engine.batching.pair_structure import prepare_pair_structure

    cache = tmp_path / "cache"
    path = _prepare("graphqa:node_count", cache)
    prepare_pair_structure("cora", np.asarray([[0, 1, 2], [1, 2, 3]]), 5, StructureSection(), cache_dir=cache)
    r = _verify(cache)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert len(json.loads(r.stdout)) == 2
    with h5py.File(path, "r+") as f:  # the generated graphs are really compared
        f.attrs["fingerprint"] = "0" * 64
    r = _verify(cache, "graphqa-node_count")
    assert r.exit_code == 4 and any("other input graphs" in p for p in _problems(r))


# ------------------------------------------------- ls, verify, clear
def test_cache_ls_verify_clear(tmp_path):
    c = str(tmp_path / "c")
    path = json.loads(run("-f", "json", "prepare", "mutag", "--cache-dir", c).stdout)["path"]
    rows = json.loads(run("-f", "json", "cache", "ls", "--cache-dir", c).stdout)
    assert len(rows) == 1 and rows[0]["dataset"] == "mutag" and rows[0]["num_graphs"] == 188
    ok = run("-f", "json", "cache", "verify", "--cache-dir", c)
    assert ok.exit_code == 0 and json.loads(ok.stdout)[0]["ok"]
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 0
    bad = run("-f", "json", "cache", "verify", "--cache-dir", c)
    assert bad.exit_code == 4
    report = json.loads(bad.stdout)
    assert not report[0]["ok"] and "format version" in report[0]["problems"][0]
    # prepare never crashes on the stale file: it rebuilds it.
    again = run("-f", "json", "prepare", "mutag", "--cache-dir", c)
    assert again.exit_code == 0 and not json.loads(again.stdout)["cached"]
    assert run("cache", "verify", "--cache-dir", c).exit_code == 0
    cleared = json.loads(run("-f", "json", "cache", "clear", "mutag", "--cache-dir", c).stdout)
    assert len(cleared["removed"]) == 1
    assert json.loads(run("-f", "json", "cache", "ls", "--cache-dir", c).stdout) == []


def test_verify_check_inputs_recomputes_the_fingerprint(tmp_path, shared_data):
    c = str(tmp_path / "c")
    out = json.loads(run("-f", "json", "prepare", "mutag", "--cache-dir", c).stdout)
    r = run("-f", "json", "cache", "verify", "--cache-dir", c, "--check-inputs", "--data-root", str(shared_data))
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["ok"]
    with h5py.File(out["path"], "r+") as f:  # pretend the file came from other graphs
        f.attrs["fingerprint"] = "0" * 64
    r = run("-f", "json", "cache", "verify", "--cache-dir", c, "--check-inputs")
    assert r.exit_code == 4
    problems = json.loads(r.stdout)[0]["problems"]
    assert any("other input graphs" in p for p in problems)


def test_cache_clear_on_user_folders_deletes_nothing_and_refuses_paths(tmp_path):
    """`cache clear /some/folder` and `cache clear .. --cache-dir X/sub`."""
    some = tmp_path / "some" / "folder"
    some.mkdir(parents=True)
    x = tmp_path / "X"
    (x / "sub").mkdir(parents=True)
    files = [some / "a.h5", some / "b.h5", x / "userdata.h5"]
    for p in files:
        with h5py.File(p, "w") as f:
            f["data"] = np.arange(4)
    r = run("cache", "clear", str(some), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 2 and "not a dataset folder" in one_error_line(r)
    r = run("cache", "clear", "..", "--cache-dir", str(x / "sub"))
    assert r.exit_code == 2 and "not a dataset folder" in one_error_line(r)
    # Pointed at a folder that is no cache at all: runs, removes nothing.
    r = run("-f", "json", "cache", "clear", "--cache-dir", str(tmp_path / "some"))
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"] == []
    assert all(p.is_file() for p in files)


def test_cache_clear_removes_the_staging_folder_only_with_its_marker(tmp_path):
    c = tmp_path / "c"
    assert run("prepare", "mutag", "--cache-dir", str(c)).exit_code == 0
    assert (c / "_pyg" / ".xmask-staging").is_file()
    user = tmp_path / "u"
    (user / "_pyg").mkdir(parents=True)
    (user / "_pyg" / "keep.txt").write_text("x")
    r = run("-f", "json", "cache", "clear", "--cache-dir", str(user))
    assert r.exit_code == 0 and (user / "_pyg" / "keep.txt").is_file()
    r = run("-f", "json", "cache", "clear", "--cache-dir", str(c))
    assert r.exit_code == 0 and str(c / "_pyg") in json.loads(r.stdout)["removed"]
    assert not (c / "_pyg").exists() and not (c / "mutag").exists()
    # The raw files the staging folder linked to are untouched.
    from xmask_cli.data.load import EMBEDDED_ROOT
    assert (EMBEDDED_ROOT / "MUTAG" / "raw" / "MUTAG_A.txt").is_file()


def test_cache_clear_on_a_read_only_mount_is_exit_5(tmp_path, monkeypatch):
    import errno

    c = str(tmp_path / "c")
    assert run("prepare", "mutag", "--cache-dir", c).exit_code == 0

    def read_only(self, missing_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    r = run("cache", "clear", "mutag", "--cache-dir", c)
    assert r.exit_code == 5 and "read-only" in one_error_line(r)
