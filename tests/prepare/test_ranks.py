"""``torchrun --nproc_per_node 2 -m xmask_cli prepare``: one cache file, equal in every stored value to one process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
# A large graph in 256-row blocks (dealt over the ranks), its own unit (components, spectra, METIS parts),
# every section prepare can write.
SETS = ["--preset", "node-level", "--set", "prepare.compute=all", "--set", "prepare.memory_gb=0.0001",
        "--set", "structure.large.min_nodes=1000", "--set", "structure.large.topk=16",
        "--set", "structure.partition.parts=4", "--set", "structure.spectrum.num_eigs=4",
        "--set", "structure.rrwp.enabled=true", "--set", "structure.rrwp.steps=3",
        "--set", "structure.magnetic.enabled=true", "--set", "structure.magnetic.num_eigs=3"]


def _folder(path: Path, n: int = 3000) -> Path:
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 4, size=n)
    src = rng.integers(0, n, size=4 * n)
    dst = np.where(rng.random(4 * n) < 0.8, rng.permutation(n)[rng.integers(0, n, size=4 * n)], rng.integers(0, n, 4 * n))
    keep = src != dst
    pairs = np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)], 1)[keep], axis=0)
    path.mkdir()
    (path / "edges.csv").write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in pairs) + "\n")
    np.save(path / "features.npy", rng.standard_normal((n, 8)).astype(np.float32))
    np.save(path / "labels.npy", blocks.astype(np.int64))
    return path


def _contents(path: str) -> tuple[dict, dict]:
    arrays, attrs = {}, {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                arrays[name] = obj[()]
            attrs[name] = dict(obj.attrs)
        f.visititems(visit)
        attrs["/"] = {k: v for k, v in f.attrs.items() if k not in ("created", "versions")}
    return arrays, attrs


@pytest.mark.slow
def test_two_ranks_write_the_file_one_process_writes(tmp_path):
    graph = _folder(tmp_path / "g")
    one = run("-f", "json", "prepare", str(graph), *SETS, "--cache-dir", str(tmp_path / "one"))
    assert one.exit_code == 0, one.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "XMASK_OFFLINE": "1",
           "XMASK_DIST_TIMEOUT": "120"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "xmask_cli", "-f", "json", "prepare", str(graph), *SETS, "--cache-dir", str(tmp_path / "two")]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    two = json.loads(p.stdout)  # one result document: only rank 0 prints
    first = json.loads(one.stdout)
    assert two["key"] == first["key"] and not two["cached"]
    a, a_attrs = _contents(first["path"])
    b, b_attrs = _contents(two["path"])
    assert sorted(a) == sorted(b) and {"powers/values", "spd/dist", "rrwp/values", "spectrum/eigvecs",
                                       "magnetic/eigvecs", "nodes/part"} <= set(a)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert a_attrs == b_attrs
    assert first["truncation"]["large_graphs"] == 1 and two["truncation"] == first["truncation"]
    assert list((tmp_path / "two").rglob(".*.h5.tmp-*")) == []  # rank 0 wrote one file, no leftovers


def test_a_failed_collective_is_one_peer_failed_line():
    """gloo reports a dead rank as a RuntimeError: prepare turns it into PeerFailedError (one line, exit 1),
    never a traceback."""
    import pytest

    from xmask_cli.errors import PeerFailedError
    from xmask_cli.prepare.ranks import RankWorld

    def dead_peer():
        raise RuntimeError("Connection closed by peer [127.0.0.1]:29500\nstack frames ...")

    with pytest.raises(PeerFailedError, match=r"^prepare rank 1 of 2: .*\(Connection closed by peer \[127\.0\.0\.1\]"
                                              r":29500\); rerun the same command$") as err:
        RankWorld(1, 2).collective(dead_peer)
    assert err.value.exit_code == 1 and "\n" not in str(err.value)
    assert RankWorld(1, 2).collective(lambda: 7) == 7
