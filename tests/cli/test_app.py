"""The command line through typer's test runner: help, exit codes, one-line errors, the checks of existing caches
and of full or read-only disks (each command's own tests: test_<command>.py beside this file)."""
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


@pytest.mark.parametrize("cmd", [[], ["cache"], ["runs"], ["presets"]])
def test_a_missing_command_prints_the_help_once_and_exits_2(cmd):
    """`xmask` or `xmask cache` alone: its help on stdout, once, and exit 2 (a command is missing)."""
    r = run(*cmd, terminal_width=100)
    assert r.exit_code == 2 and r.stderr == ""
    assert r.stdout.count("Usage:") == 1 and "Commands" in r.stdout
    assert ("Exit codes" in r.stdout) == (cmd == [])  # the root's help, or the group's
