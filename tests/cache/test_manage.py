"""cache.manage: verify finds every kind of damage, ls lists, clear removes only what is provably xmask's."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.cache.graphs import prepare_toy, random_graphs
from xmask_cli import cache as K
from xmask_cli.errors import CacheError


@pytest.fixture
def good_file(tmp_path) -> Path:
    edges, nodes = random_graphs(5, 20)
    return Path(prepare_toy(tmp_path, edges, nodes).path)


def test_verify_passes_a_sound_file(good_file):
    assert K.verify(good_file) == []


def test_truncated_file_is_reported_and_prepare_rebuilds(good_file, tmp_path):
    size = good_file.stat().st_size
    with open(good_file, "r+b") as fh:
        fh.truncate(size // 2)
    problems = K.verify(good_file)
    assert problems and "cannot open" in problems[0]
    with pytest.raises(CacheError):
        _ = K.StructureCache(good_file).file
    edges, nodes = random_graphs(5, 20)
    logs: list[str] = []
    again = prepare_toy(tmp_path, edges, nodes, log=logs.append)
    assert not again.cached and Path(again.path) == good_file
    assert logs and "unusable" in logs[0]
    assert K.verify(good_file) == []


def test_corrupted_chunk_is_reported(good_file):
    with h5py.File(good_file, "r") as f:
        info = f["spd/dist"].id.get_chunk_info(0)
    with open(good_file, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(b"\xff\x00\xff\x00")
    problems = K.verify(good_file)
    assert any("spd/dist" in p for p in problems)


def test_older_format_is_reported_and_rebuilt(good_file, tmp_path):
    with h5py.File(good_file, "r+") as f:
        f.attrs["format_version"] = K.FORMAT_VERSION - 1
    assert any("format version" in p for p in K.verify(good_file))
    with pytest.raises(CacheError, match="format version"):
        _ = K.StructureCache(good_file).file
    edges, nodes = random_graphs(5, 20)
    assert not prepare_toy(tmp_path, edges, nodes).cached
    assert K.verify(good_file) == []


def test_renamed_file_fails_the_key_check(good_file):
    other = good_file.with_name("0" * 20 + ".h5")
    shutil.copy(good_file, other)
    assert any("does not match" in p for p in K.verify(other))


def test_ls_and_clear(tmp_path):
    edges, nodes = random_graphs(6, 3)
    s = prepare_toy(tmp_path, edges, nodes)
    rows = [K.info(p) for p in K.cache_files(tmp_path / "cache")]
    assert [r.key for r in rows] == [s.key] and rows[0].num_graphs == 3 and rows[0].size_bytes > 0
    assert rows[0].params["powers"]["k"] == 4
    assert K.cache_files(tmp_path / "cache", "other") == []
    removed = K.clear(tmp_path / "cache", "toy")
    assert [p.name for p in removed] == [Path(s.path).name]
    assert K.cache_files(tmp_path / "cache") == []


# ------------------------------------------------------------ clear safety


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_clear_deletes_only_files_it_can_prove_are_its_own(tmp_path):
    edges, nodes = random_graphs(6, 3)
    own = Path(prepare_toy(tmp_path, edges, nodes).path)
    folder = own.parent
    user_h5 = folder / "userdata.h5"
    with h5py.File(user_h5, "w") as f:
        f["x"] = np.arange(3)
    key_named = folder / "0123456789abcdef0123.h5"  # named like a key, but records no key / format
    with h5py.File(key_named, "w") as f:
        f.attrs["key"] = "something else"
    foreign_key = folder / "aaaaaaaaaaaaaaaaaaaa.h5"  # an xmask file of another folder, renamed
    shutil.copy(own, foreign_key)
    notes = folder / "notes.txt"
    notes.write_text("mine")
    stale = folder / f".{own.name}.tmp-{_dead_pid()}"
    stale.write_bytes(b"half")
    live = folder / f".{own.name}.tmp-{os.getpid()}"  # a writer still running: keep
    live.write_bytes(b"busy")
    kept: list[Path] = []
    removed = K.clear(tmp_path / "cache", kept=kept)
    assert sorted(removed) == sorted([own, stale])
    for p in (user_h5, key_named, foreign_key, notes, live):
        assert p.exists() and p in kept, p
    assert not own.exists() and not stale.exists()


def test_clear_never_touches_a_folder_that_is_not_a_cache(tmp_path):
    user = tmp_path / "home"
    (user / "project").mkdir(parents=True)
    (user / "empty").mkdir()
    with h5py.File(user / "project" / "results.h5", "w") as f:
        f["y"] = np.ones(2)
    assert K.clear(user) == []
    assert (user / "project" / "results.h5").is_file() and (user / "empty").is_dir()


@pytest.mark.parametrize("arg", ["..", "../other", "/abs/path", "toy/../..", "_pyg"])
def test_clear_refuses_a_path_outside_the_cache_dir(tmp_path, arg):
    from xmask_cli.errors import UsageError

    edges, nodes = random_graphs(6, 3)
    own = Path(prepare_toy(tmp_path, edges, nodes).path)
    with pytest.raises(UsageError):
        K.clear(tmp_path / "cache", arg)
    assert own.is_file()
    # A path that is one of the cache's dataset folders is fine.
    assert K.clear(tmp_path / "cache", str(tmp_path / "cache" / "toy")) == [own]


@pytest.mark.parametrize("sub", ["", "inner"])
@pytest.mark.parametrize("command", [["prepare", "mutag"], ["cache", "ls"], ["cache", "verify"], ["cache", "clear"]])
def test_a_cache_dir_that_is_a_file_is_exit_5_for_every_command(tmp_path, command, sub):
    """`cache ls|verify|clear` say what `prepare` says of a --cache-dir that is a regular file (or lies under one)."""
    from tests.cli_helpers import one_error_line, run

    regular = tmp_path / "afile"
    regular.write_text("not a folder\n")
    target = regular / sub if sub else regular
    r = run(*command, "--cache-dir", str(target))
    assert r.exit_code == 5, r.stdout + r.stderr
    assert f"cache dir {target}" in one_error_line(r) and "is a file, not a folder" in one_error_line(r)
    assert regular.read_text() == "not a folder\n"
