"""cache.writer and the key: a key is built once, workers write the same file, a killed write leaves no file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np

from tests.cache.graphs import prepare_toy, random_graphs
from tests.cli_helpers import full_disk_line
from xmask_cli import cache as K
from xmask_cli.config_resolve import resolve


def test_same_key_does_no_work_and_force_recomputes(tmp_path):
    edges, nodes = random_graphs(2, 4)
    first = prepare_toy(tmp_path, edges, nodes)
    mtime = os.stat(first.path).st_mtime_ns
    second = prepare_toy(tmp_path, edges, nodes)
    assert second.cached and second.path == first.path and os.stat(first.path).st_mtime_ns == mtime
    third = prepare_toy(tmp_path, edges, nodes, force=True)
    assert not third.cached and third.path == first.path
    other = prepare_toy(tmp_path, edges, nodes, cfg=resolve("graph-level", ["structure.powers.k=2"]).structure)
    assert other.path != first.path
    # eps is read by the model, not by prepare: it must not change the key.
    same = prepare_toy(tmp_path, edges, nodes, cfg=resolve("graph-level", ["structure.powers.eps=1e-10"]).structure)
    assert same.cached and same.path == first.path


def test_workers_give_identical_files(tmp_path):
    edges, nodes = random_graphs(3, 40)
    one = prepare_toy(tmp_path / "a", edges, nodes, workers=1)
    two = prepare_toy(tmp_path / "b", edges, nodes, workers=2)
    with h5py.File(one.path) as f, h5py.File(two.path) as h:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            np.testing.assert_array_equal(f[n][()], h[n][()], err_msg=n)


def test_kill_during_write_leaves_nothing_under_the_real_name(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.cache.graphs import random_graphs, prepare_toy
        from pathlib import Path
        edges, nodes = random_graphs(4, 2000)
        def tick(done, total):
            print("writing", flush=True)
            time.sleep(60)
        prepare_toy(Path({str(tmp_path)!r}), edges, nodes, progress=tick)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    folder = tmp_path / "cache" / "toy"
    assert not list(folder.glob("*.h5")), "a half-written file is visible under the real name"
    assert list(folder.glob(".*.h5.tmp-*")), "the temporary file should be the only leftover"
    assert K.cache_files(tmp_path / "cache") == []
    removed = K.clear(tmp_path / "cache")
    assert any(".tmp-" in p.name for p in removed)


# ------------------------------------------------------------------ a full disk
def _assert_full_disk_report(rc: int, stderr: str, cache: Path) -> None:
    """Exit 5, one `error:` line naming the cache file, no traceback, no temp file left."""
    line = full_disk_line(rc, stderr)
    assert line.startswith(f"error: no space left on device writing {cache / 'mutag'}/")
    assert line.split(" writing ")[1].split(" (file system at ")[0].endswith(".h5")
    assert list((cache / "mutag").glob("*.h5*")) == list((cache / "mutag").glob(".*")) == []


def test_prepare_on_a_full_disk_is_one_line_and_exit_5_simulated(tmp_path, monkeypatch):
    """The disk fills after 64 KB of the cache file (os.pwrite raising ENOSPC, as the kernel does): always runs."""
    import errno

    from tests.cli_helpers import run
    from xmask_cli.cache import writer

    real = os.pwrite
    written = [0]

    def pwrite(fd, data, offset):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if ".h5.tmp-" in path:
            if written[0] > 64 << 10:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written[0] += len(data)
        return real(fd, data, offset)

    monkeypatch.setattr(writer.os, "pwrite", pwrite)
    cache = tmp_path / "cache"
    r = run("prepare", "mutag", "--cache-dir", str(cache))
    _assert_full_disk_report(r.exit_code, r.stderr, cache)
    monkeypatch.setattr(writer.os, "pwrite", real)
    # With room again, the same command writes the file.
    r = run("--format", "json", "prepare", "mutag", "--cache-dir", str(cache))
    assert r.exit_code == 0, r.stderr
    assert len(list((cache / "mutag").glob("*.h5"))) == 1


def test_prepare_on_a_full_tmpfs_is_one_line_and_exit_5(small_tmpfs):
    """The case of a real 600 KB tmpfs."""
    full = small_tmpfs("600k", "the simulated full disk test covers the writer")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "XMASK_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "xmask_cli", "prepare", "mutag", "--cache-dir", str(full / "cache")],
                       env=env, capture_output=True, text=True, timeout=600)
    _assert_full_disk_report(r.returncode, r.stderr, full / "cache")
