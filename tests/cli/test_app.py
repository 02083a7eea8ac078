"""The command line through typer's test runner: help, exit codes, JSON output."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.cache import StructureCache
from xmask_cli.errors import EXIT_CODES


@pytest.mark.parametrize("cmd", [[], ["prepare"], ["presets", "ls"], ["presets", "show"], ["cache", "ls"],
                                 ["cache", "verify"], ["cache", "clear"], ["runs"], ["runs", "compare"]])
def test_every_help_has_examples(cmd):
    r = run(*cmd, "--help")
    assert r.exit_code == 0
    assert "Examples" in r.stdout
    assert "xmask" in r.stdout


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.startswith("xmask ")


@pytest.mark.parametrize("args", [["train", "--help"], ["--help"], ["presets", "ls"]])
def test_output_into_a_closed_pipe_is_no_traceback(args):
    """`xmask train --help | head` closes the pipe early; rich then exits 1 on the broken pipe, and
    that must not end in a traceback (it did: an `except` clause named click's Abort, which typer
    0.29's vendored click does not have)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", "from xmask_cli.cli import main; main()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before the first write: every write meets EPIPE
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err, err
    assert proc.returncode in (0, 1), (proc.returncode, err)


def test_help_documents_exit_codes():
    out = run("--help").stdout
    for code in EXIT_CODES:
        assert str(code) in out


def test_prepare_embedded_mutag_json_then_cached(tmp_path):
    r = run("--format", "json", "prepare", "mutag", "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["graphs"] == 188 and first["nodes"] == 3371 and not first["cached"]
    # The bundled MUTAG's own features (7 one-hot atom types), said in the result.
    assert first["features"]["kind"] == "dataset" and first["features"]["dim"] == 7
    assert Path(first["path"]).is_file() and first["size_bytes"] > 0
    # Per-command --format and a second run: no work, same path.
    r2 = run("prepare", "MUTAG", "--cache-dir", str(tmp_path / "c"), "--format", "json")
    second = json.loads(r2.stdout)
    assert second["cached"] and second["path"] == first["path"] and second["edges"] == first["edges"]
    with StructureCache(first["path"]) as c:
        assert c.params["powers"]["k"] == 4 and c.num_graphs == 188


def test_prepare_dataset_builds_the_file_train_dataset_reads(tmp_path, monkeypatch):
    """``prepare DATASET`` resolves the preset ``train --dataset DATASET`` does (the dataset's own), so the
    training run finds its structure cached under its own key: nothing prepared again, nothing copied. The
    dataset's own preset here reads Â^1 and Â^2 only, where its level's preset reads up to Â^4."""
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mutag.yaml").write_text("extends: graph-level\nmodel:\n  head_powers: [1, 1, 2, 2]\n")
    monkeypatch.setenv("XMASK_PRESETS", str(tmp_path / "presets"))
    cache = str(tmp_path / "c")
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", cache)
    assert r.exit_code == 0, r.stderr
    path = json.loads(r.stdout)["path"]
    with StructureCache(path) as c:
        assert c.params["powers"]["k"] == 2
    t = run("-f", "json", "train", "--dataset", "mutag", "--set", "train.epochs=1", "--cache-dir", cache,
            "--runs-dir", str(tmp_path / "runs"))
    assert t.exit_code == 0, t.stderr
    assert "prepared" not in t.stderr and "served from" not in t.stderr
    assert sorted(str(p) for p in (tmp_path / "c" / "mutag").glob("*.h5")) == [path]


def test_prepare_human_summary_on_stdout_logs_on_stderr(tmp_path):
    r = run("prepare", "mutag", "--cache-dir", str(tmp_path / "c"), "--set", "structure.powers.k=2")
    assert r.exit_code == 0
    assert "graphs" in r.stdout and "188" in r.stdout
    assert "loaded MUTAG" in r.stderr and "loaded" not in r.stdout
    assert "one-hot node labels (7)" in r.stdout and "node features: " in r.stderr


def test_prepare_reports_the_truncated_mass_in_json_and_human(tmp_path, shared_data):
    # CiteSeer as a "large" graph with a small row budget: the report is the cache's record.
    args = ["prepare", "citeseer", "--cache-dir", str(tmp_path / "c"), "--data-root", str(shared_data),
            "--set", "structure.large.min_nodes=1000", "--set", "structure.large.topk=8",
            "--set", "structure.powers.k=2", "--set", "structure.spd.enabled=false",
            "--set", "structure.spectrum.enabled=false", "--set", "structure.partition.parts=0"]
    r = run("-f", "json", *args)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)["truncation"]
    with StructureCache(json.loads(r.stdout)["path"]) as c:
        rec = json.loads(c.file["powers"].attrs["dropped_mass"])
    assert out["large_graphs"] == 1 and out["topk"] == 8
    assert out["powers"]["k"] == [1, 2] and out["powers"]["mean"] == rec["mean"] and out["powers"]["max"] == rec["max"]
    assert rec["rows"] == 3327 and rec["mean"][0] == 0.0 and 0 < rec["mean"][1] < rec["max"][1] <= 1
    human = run(*args)  # cached now: the report is read back from the file
    assert human.exit_code == 0 and "dropped" in human.stdout and f"{rec['max'][1]:.2%}" in human.stdout
    small = run("-f", "json", "prepare", "mutag", "--cache-dir", str(tmp_path / "c"), "--set", "structure.powers.k=2")
    assert json.loads(small.stdout)["truncation"]["large_graphs"] == 0


def test_prepare_from_data_root_env(tmp_path, shared_data):
    r = run("-f", "json", "prepare", "citeseer", "--cache-dir", str(tmp_path / "c"), "--set", "node.mode=partition",
            env={"XMASK_DATA_ROOT": str(shared_data)})
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nodes"] == 3327
    with StructureCache(out["path"]) as c:
        part = c.partition(0)
        assert part.shape == (3327,) and part.max() == 31  # partition batches read node-level's 32 METIS parts


def test_prepare_with_preset_and_dataset_from_preset(tmp_path):
    r = run("-f", "json", "prepare", "--preset", "graph-level", "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["dataset"] == "mutag"


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["prepare", "nosuchset"], 2, "unknown dataset 'nosuchset'"),
        (["prepare", "pubmed"], 3, "PubMed: raw files not found"),
        (["prepare", "wikics"], 3, "WikiCS: raw files not found"),
        (["prepare", "collab"], 3, "COLLAB: raw files not found"),
        (["prepare", "mutag", "--preset", "no-such-preset"], 2, "unknown preset 'no-such-preset'"),
        (["prepare", "mutag", "--set", "structure.spd.max_dist=3"], 2, "did you mean 'structure.spd.max_distance'"),
        (["prepare", "mutag", "--set", "structure.powers.k=four"], 2, "structure.powers.k: expected int"),
        (["prepare", "mutag", "--format", "xml"], 2, "--format must be 'human' or 'json'"),
        (["presets", "show", "nodelevel"], 2, "did you mean 'node-level'"),
        (["cache", "verify", "missing.h5"], 2, "no such cache file"),
    ],
)
def test_bad_input_one_line_and_exit_code(args, code, needle, tmp_path):
    r = run(*args, "--cache-dir", str(tmp_path / "c")) if args[0] == "prepare" else run(*args)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert needle in one_error_line(r)


def test_unwritable_cache_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run("prepare", "mutag", "--cache-dir", str(blocker / "cache"))
    assert r.exit_code == 5
    assert "cache dir" in one_error_line(r)


def test_usage_errors_exit_2():
    r = run("prepare", "--workers", "0")
    assert r.exit_code == 2


def test_presets_ls_and_show_json():
    rows = json.loads(run("presets", "ls", "--format", "json").stdout)
    names = {r["name"] for r in rows}
    assert {"base", "node-level", "graph-level"} <= names
    cfg = json.loads(run("-f", "json", "presets", "show", "node-level", "--set", "structure.powers.k=3").stdout)
    assert cfg["structure"]["powers"]["k"] == 3
    assert cfg["structure"]["partition"]["parts"] == 32  # from node-level
    assert cfg["structure"]["spd"]["max_distance"] == 8  # inherited from base
    human = run("presets", "show", "graph-level").stdout
    assert "max_distance: 8" in human


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


def test_unexpected_errors_have_no_traceback_unless_debug(tmp_path, monkeypatch):
    import xmask_cli.prepare as P

    def boom(*a, **k):
        raise RuntimeError("synthetic failure\nsecond line")

    monkeypatch.setattr(P, "prepare_dataset", boom)
    r = run("prepare", "mutag", "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 1
    line = one_error_line(r)
    assert "synthetic failure" in line and "XMASK_DEBUG" in line
    r = run("prepare", "mutag", "--cache-dir", str(tmp_path / "c"), env={"XMASK_DEBUG": "1"})
    assert r.exit_code == 1 and "Traceback" in r.stderr


def test_cached_structure_matches_numpy_on_mutag(tmp_path):
    """End to end through the CLI: the cached powers of a real molecule equal dense numpy."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    path = json.loads(run("-f", "json", "prepare", "mutag", "--cache-dir", str(tmp_path / "c")).stdout)["path"]
    g = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=tmp_path / "c", offline=True)
    with StructureCache(path) as c:
        for i in (0, 17, 187):
            n = int(g.num_nodes[i])
            a = np.zeros((n, n))
            a[g.edge_index[i][0], g.edge_index[i][1]] = 1
            a = np.maximum(a, a.T) + np.eye(n)
            d = a.sum(1)
            ahat = a / np.sqrt(np.outer(d, d))
            np.testing.assert_allclose(c.dense_powers(i)[2], np.linalg.matrix_power(ahat, 3), rtol=1e-5, atol=1e-7)


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


# ------------------------------------------------- existing caches are checked
def _prepared(tmp_path, *extra: str) -> tuple[str, Path]:
    c = str(tmp_path / "c")
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", c, *extra)
    assert r.exit_code == 0, r.stderr
    return c, Path(json.loads(r.stdout)["path"])


def test_prepare_rebuilds_a_file_with_flipped_bytes(tmp_path):
    c, path = _prepared(tmp_path)
    with h5py.File(path, "r") as f:
        info = f["powers/values"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 3)
        fh.write(bytes(64 * [0xA5]))
    assert run("cache", "verify", "--cache-dir", c).exit_code == 4  # the independent judge
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", c)
    assert r.exit_code == 0 and not json.loads(r.stdout)["cached"], r.stderr
    assert "unusable" in r.stderr and run("cache", "verify", "--cache-dir", c).exit_code == 0


def test_prepare_rebuilds_another_datasets_file_under_the_key(tmp_path):
    c, path = _prepared(tmp_path)
    other = run("-f", "json", "prepare", "mutag", "--cache-dir", c, "--set", "structure.powers.k=2")
    shutil.copy(json.loads(other.stdout)["path"], path)  # a sound file, but not this key's
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", c)
    assert r.exit_code == 0 and not json.loads(r.stdout)["cached"], r.stderr
    with StructureCache(path) as cache:
        assert cache.params["powers"]["k"] == 4


def test_damaged_hdf5_metadata_is_exit_4_corrupt_in_ls_and_rebuilt(tmp_path):
    c, path = _prepared(tmp_path)
    data = bytearray(path.read_bytes())
    # The root group's local heap: its free-list offset sits 16 bytes after the "HEAP" signature.
    data[data.find(b"HEAP") + 16] ^= 0xFF  # h5py then fails with "bad heap free list"
    path.write_bytes(bytes(data))
    with pytest.raises(Exception):  # noqa: B017  (any error h5py raises on the damaged heap will do)
        with h5py.File(path, "r") as f:
            f.visit(lambda name: None)
    r = run("-f", "json", "cache", "verify", "--cache-dir", c)
    assert r.exit_code == 4 and not json.loads(r.stdout)[0]["ok"]
    r = run("-f", "json", "cache", "ls", "--cache-dir", c)
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["status"] == "corrupt"
    r = run("-f", "json", "prepare", "mutag", "--cache-dir", c)
    assert r.exit_code == 0 and not json.loads(r.stdout)["cached"], r.stderr
    assert run("cache", "verify", "--cache-dir", c).exit_code == 0
    path.write_bytes(bytes(data))  # and train rebuilds it as well
    r = run("-f", "json", "train", "--preset", "graph-level", "--set", "train.epochs=1", "--set", "model.hidden=8",
            "--set", "model.layers=1", "--device", "cpu", "--cache-dir", c, "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 0, r.stderr
    assert run("cache", "verify", "--cache-dir", c).exit_code == 0


def test_a_folder_at_the_cache_path_is_exit_4_and_leaves_no_temp_file(tmp_path):
    c, path = _prepared(tmp_path)
    path.unlink()
    path.mkdir()
    (path / "user.txt").write_text("mine")
    for extra in ([], ["--force"]):
        r = run("-q", "prepare", "mutag", "--cache-dir", c, *extra)
        assert r.exit_code == 4 and "not a regular file" in one_error_line(r)
    r = run("-q", "train", "--preset", "graph-level", "--set", "train.epochs=1", "--cache-dir", c,
            "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 4 and "not a regular file" in one_error_line(r)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .tmp-<pid> left
    r = run("-f", "json", "cache", "clear", "--cache-dir", c)
    assert r.exit_code == 0 and (path / "user.txt").is_file()


def test_temp_files_of_dead_writers_are_listed_and_removed_by_the_next_writer(tmp_path):
    import subprocess
    import sys

    c, path = _prepared(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = path.with_name(f".{path.name}.tmp-{dead.pid}")
    stale.write_bytes(b"\x89HDF half")
    rows = json.loads(run("-f", "json", "cache", "ls", "--cache-dir", c).stdout)
    assert sorted((r["status"], r.get("writer_pid") or 0) for r in rows) == [("ok", 0), ("stale", dead.pid)]
    assert "stale" in run("cache", "ls", "--cache-dir", c).stdout
    assert run("prepare", "mutag", "--cache-dir", c, "--force").exit_code == 0
    assert not stale.exists()


def test_xmask_format_env_applies_without_a_format_option(tmp_path):
    """XMASK_FORMAT sets the format when no --format is given (a global default must not shadow it)."""
    r = run("cache", "ls", "--cache-dir", str(tmp_path / "c"), env={"XMASK_FORMAT": "json"})
    assert r.exit_code == 0 and json.loads(r.stdout) == []
    r = run("--format", "human", "cache", "ls", "--cache-dir", str(tmp_path / "c"), env={"XMASK_FORMAT": "json"})
    assert r.stdout.startswith("no cache files")


def test_cache_clear_on_a_read_only_mount_is_exit_5(tmp_path, monkeypatch):
    import errno

    c = str(tmp_path / "c")
    assert run("prepare", "mutag", "--cache-dir", c).exit_code == 0

    def read_only(self, missing_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    r = run("cache", "clear", "mutag", "--cache-dir", c)
    assert r.exit_code == 5 and "read-only" in one_error_line(r)


# ------------------------------------------------------------ message quality
@pytest.mark.parametrize("args, needle", [
    (["--bogus"], "No such option: --bogus"),
    (["prepare", "mutag", "--workers", "0"], "'--workers'"),
    (["train", "--seed", "-1"], "'--seed'"),
    (["nosuchcmd"], "No such command 'nosuchcmd'"),
    (["train", "--set", "model..heads=3"], "empty part in key 'model..heads'"),
    (["train", "--set", ".heads=3"], "empty part in key"),
    (["train", "--dataset", "nosuch"], "graphqa:<task>"),
])
def test_parser_and_name_errors_are_one_line_exit_2(args, needle, tmp_path):
    r = run(*args, "--cache-dir", str(tmp_path / "c")) if args[0] != "--bogus" and args[0] != "nosuchcmd" else run(*args)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert needle in one_error_line(r)
    assert "╭" not in r.stderr + r.stdout and "Usage:" not in r.stderr


def test_help_keeps_angle_bracket_placeholders():
    assert "runs/<name>/<seed>/" in " ".join(run("train", "--help").stdout.split())
    assert "maps/<name>-<seed>" in run("explain", "--help").stdout
    assert "ablations/<dataset>-<level>" in run("ablate", "--help").stdout


def test_a_data_root_that_is_a_file_says_so(tmp_path):
    f = tmp_path / "root.txt"
    f.write_text("x")
    r = run("prepare", "citeseer", "--data-root", str(f), "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 2 and "is a file, not a folder" in one_error_line(r)
    assert "File exists" not in r.stderr


def test_a_failed_download_leaves_no_empty_folders(tmp_path, monkeypatch):
    import socket

    def refuse(*a, **k):
        raise OSError("network unreachable (test)")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    root = tmp_path / "root"
    r = run("prepare", "citeseer", "--data-root", str(root), "--cache-dir", str(tmp_path / "c"), env={"XMASK_OFFLINE": "0"})
    assert r.exit_code == 3 and "download failed" in one_error_line(r)
    assert not (root / "CiteSeer").exists()


def test_a_complete_read_only_cache_serves_training(tmp_path, monkeypatch):
    """A read-only mount: every write under the cache dir fails with EROFS (simulated; tests run as root)."""
    import builtins
    import errno
    import os

    c = tmp_path / "c"
    assert run("prepare", "mutag", "--cache-dir", str(c)).exit_code == 0
    before = sorted((str(p), p.stat().st_mtime_ns) for p in c.rglob("*") if p.is_file())

    def inside(p) -> bool:
        try:
            return Path(os.fspath(p)).absolute().is_relative_to(c)
        except TypeError:
            return False

    def erofs(p):
        return OSError(errno.EROFS, "Read-only file system", os.fspath(p))

    real_open, real_access, real_os_open = builtins.open, os.access, os.open
    real_mkdir, real_touch, real_symlink = Path.mkdir, Path.touch, Path.symlink_to

    def ro_open(file, mode="r", *a, **k):
        if inside(file) and any(ch in mode for ch in "wax+"):
            raise erofs(file)
        return real_open(file, mode, *a, **k)

    def ro_os_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise erofs(path)
        return real_os_open(path, flags, *a, **k)

    def ro_mkdir(self, *a, **k):
        if inside(self):
            if self.is_dir() and k.get("exist_ok"):
                return None
            raise erofs(self)
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(builtins, "open", ro_open)
    monkeypatch.setattr(os, "open", ro_os_open)
    monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if inside(p) and m & os.W_OK else real_access(p, m, *a, **k))
    monkeypatch.setattr(Path, "mkdir", ro_mkdir)
    monkeypatch.setattr(Path, "touch", lambda self, *a, **k: (_ for _ in ()).throw(erofs(self)) if inside(self) else real_touch(self, *a, **k))
    monkeypatch.setattr(Path, "symlink_to", lambda self, *a, **k: (_ for _ in ()).throw(erofs(self)) if inside(self) else real_symlink(self, *a, **k))
    r = run("-f", "json", "train", "--preset", "graph-level", "--set", "train.epochs=1", "--set", "model.hidden=8",
            "--set", "model.layers=1", "--device", "cpu", "--cache-dir", str(c), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["runs"][0]["epochs_run"] == 1
    monkeypatch.undo()
    assert sorted((str(p), p.stat().st_mtime_ns) for p in c.rglob("*") if p.is_file()) == before


def test_a_full_disk_anywhere_is_exit_5_with_one_line(tmp_path, monkeypatch):
    """A write that fails for want of room outside xmask's own writers (a loader's processed file, say)."""
    import errno

    from tests.cli_helpers import one_error_line, run
    from xmask_cli.data import load

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "cache" / "_pyg" / "x" / "data.pt"))

    monkeypatch.setattr(load, "_construct_safely", full)
    r = run("prepare", "mutag", "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 5
    line = one_error_line(r)
    assert line.startswith(f"error: no space left on device writing {tmp_path / 'cache' / '_pyg' / 'x' / 'data.pt'}")
