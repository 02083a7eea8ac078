"""Cache file names and keys: what the key depends on, the path layout, which temp files are stale, the JSON
attributes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xmask_cli.cache import files
from xmask_cli.cache.files import KEY_NAME, TMP_NAME, cache_json, cache_key, cache_path, is_stale_temp, pid_alive
from xmask_cli.errors import CacheError

PARAMS = {"powers": {"k": 3, "normalization": "sym"}, "spd": {"enabled": True, "max_distance": 5}}


def test_the_key_depends_on_the_content_of_fingerprint_params_and_format_only(monkeypatch):
    key = cache_key("fp", PARAMS)
    assert KEY_NAME.match(f"{key}.h5")
    reordered = {"spd": {"max_distance": 5, "enabled": True}, "powers": {"normalization": "sym", "k": 3}}
    assert cache_key("fp", reordered) == key  # dict order is no parameter
    assert cache_key("fp2", PARAMS) != key
    assert cache_key("fp", {**PARAMS, "spd": {"enabled": True, "max_distance": 6}}) != key
    assert cache_key("fp", {**PARAMS, "extra": {}}) != key
    monkeypatch.setattr(files, "FORMAT_VERSION", files.FORMAT_VERSION + 1)
    assert cache_key("fp", PARAMS) != key  # a new format rebuilds instead of misreading


def test_a_file_sits_under_its_dataset_named_by_its_key(tmp_path):
    assert cache_path(tmp_path, "MUTAG", "0123456789abcdef0123") == tmp_path / "MUTAG" / "0123456789abcdef0123.h5"
    assert KEY_NAME.match("0123456789abcdef0123.h5") and not KEY_NAME.match("0123456789abcdef012.h5")
    assert not KEY_NAME.match("0123456789ABCDEF0123.h5") and not KEY_NAME.match("0123456789abcdef0123.h5.tmp-1")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_pid_alive_tells_a_running_process_from_a_finished_one():
    assert pid_alive(os.getpid())
    assert not pid_alive(_dead_pid())


def test_only_a_plain_temp_file_of_a_gone_writer_is_stale(tmp_path):
    key = "0123456789abcdef0123"
    dead, alive = _dead_pid(), os.getpid()
    gone = tmp_path / f".{key}.h5.tmp-{dead}"
    gone.write_bytes(b"x")
    running = tmp_path / f".{key}.h5.tmp-{alive}"
    running.write_bytes(b"x")
    link = tmp_path / f".{'f' * 20}.h5.tmp-{dead}"
    link.symlink_to(gone)
    folder = tmp_path / f".{'e' * 20}.h5.tmp-{dead}"
    folder.mkdir()
    other = tmp_path / f"{key}.h5.tmp-{dead}"  # no leading dot: not a writer's name
    other.write_bytes(b"x")
    assert TMP_NAME.match(gone.name).group(1) == str(dead)
    assert is_stale_temp(gone)
    assert not is_stale_temp(running) and not is_stale_temp(link) and not is_stale_temp(folder)
    assert not is_stale_temp(other) and not is_stale_temp(tmp_path / f".{key}.h5.tmp-{dead}x")


def test_json_attributes_are_objects_or_a_cache_error():
    assert cache_json('{"mean": [0.0, 0.5], "rows": 3}', "f.h5", "dropped_mass") == {"mean": [0.0, 0.5], "rows": 3}
    assert cache_json(b'{"k": 2}', "f.h5", "params") == {"k": 2}
    for bad in ("[1, 2]", "{not json", 7, None):
        with pytest.raises(CacheError) as err:
            cache_json(bad, Path("/c/f.h5"), "params")
        assert "/c/f.h5 (attribute params) is damaged" in str(err.value) and "xmask cache verify" in str(err.value)
