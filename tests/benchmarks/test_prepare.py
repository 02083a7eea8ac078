"""benchmarks/prepare.py: the sides alternate, share thread settings, and no speed-up is reported over a baseline
whose outputs differ from the cache."""
from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.benchmarks import BENCHMARKS, load_script

REPO = BENCHMARKS.parent


@pytest.fixture(scope="module")
def prep():
    return load_script("prepare", "bench_prepare")


def test_children_compute_equal_outputs_under_the_same_thread_settings(tmp_path: Path) -> None:
    """The real child processes on a few small graphs: ours writes a cache, the baseline (round 1) checks
    against it and finds it equal; both saw one thread everywhere."""
    rng = np.random.default_rng(1)
    edges, nn = [], []
    for n in (9, 30, 80, 120):
        a = np.triu(rng.random((n, n)) < 4.0 / n, 1)
        r, c = np.nonzero(a)
        edges.append(np.stack([r, c]))
        nn.append(n)
    inp = tmp_path / "in.npz"
    meta = {"fingerprint": "f", "key": "tiny", "level": "graph", "preset": "graph-level"}
    np.savez(inp, edge_index=np.concatenate(edges, axis=1), edge_counts=np.array([e.shape[1] for e in edges]),
             num_nodes=np.array(nn), meta=np.asarray(json.dumps(meta)))
    script = str(BENCHMARKS / "prepare.py")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}

    def child(kind: str, *extra: str) -> dict:
        work = tmp_path / kind
        work.mkdir()
        res = work / "r.json"
        subprocess.run([sys.executable, script, "--_child", kind, "--_input", str(inp), "--_result", str(res),
                        "--_work", str(work), "--workers", "1", "--threads", "1", *extra], check=True, env=env,
                       timeout=300)
        return json.loads(res.read_text())

    ours = child("ours")
    base = child("baseline", "--_check", ours["cache_path"])
    assert base["check"]["problems"] == [] and base["check"]["graphs"] == 4
    for r in (ours, base):
        assert r["seconds"] > 0
        assert r["threads_seen"]["numba"] == 1
        assert r["threads_seen"]["threadpools"] and all(t.endswith("=1") for t in r["threads_seen"]["threadpools"])


def _fake_run(prep, monkeypatch, tmp_path: Path, problems: list[str]) -> tuple[int, list[tuple[str, str | None]], dict]:
    calls: list[tuple[str, str | None]] = []
    times = {"ours": iter([2.0, 2.2, 1.8]), "baseline": iter([6.0, 7.0, 5.0])}

    def load(name, data_root, staging, preset=None, overrides=None, **kw):
        staging.mkdir(parents=True)
        return SimpleNamespace(name=name), staging / "in.npz", {"dataset": name, "graphs": 3, "nodes": 30,
                                                                "load_seconds": 0.1}

    def spawn(kind, inp, work, args, env, timeout, check_against=None):
        assert env["NUMBA_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"
        work.mkdir(parents=True, exist_ok=True)
        calls.append((kind, check_against))
        out = {"status": "ok", "seconds": next(times[kind]), "peak_mb": 100.0}
        if kind == "ours":
            out["cache_path"] = str(work / "cache" / "x.h5")
        if check_against:
            out["check"] = {"problems": problems, "graphs": 3}
        return out

    monkeypatch.setattr(prep, "load", load)
    monkeypatch.setattr(prep, "spawn", spawn)
    out = tmp_path / "o.json"
    rc = prep.main(["--datasets", "DD", "--rounds", "3", "--out", str(out), "--tmp-dir", str(tmp_path)])
    return rc, calls, json.loads(out.read_text())


def test_sides_alternate_and_the_first_baseline_checks_ours(prep, monkeypatch, tmp_path: Path) -> None:
    rc, calls, res = _fake_run(prep, monkeypatch, tmp_path, [])
    assert rc == 0
    assert [k for k, _ in calls] == ["ours", "baseline", "baseline", "ours", "ours", "baseline"]
    checks = [c for _, c in calls if c]
    assert len(checks) == 1 and checks[0].endswith("x.h5") and calls[1][1] == checks[0]
    row = res["results"][0]
    assert row["outputs"] == "equal"
    # medians 2.0 and 6.0; per-round ratios 3.0, 7/2.2, 5/1.8
    assert row["speedup"]["ratio"] == pytest.approx(3.0)
    assert row["speedup"]["round_min"] == pytest.approx(5.0 / 1.8)
    assert row["speedup"]["round_max"] == pytest.approx(7.0 / 2.2)
    assert row["target"] == "pass (>= 3x)"
    assert "3.00x" in res["table"] and "2.00 (1.80-2.20)" in res["table"]


def test_no_speedup_over_a_baseline_with_other_outputs(prep, monkeypatch, tmp_path: Path) -> None:
    rc, _, res = _fake_run(prep, monkeypatch, tmp_path, ["graph 0: distances differ"])
    row = res["results"][0]
    assert rc == 1
    assert row["outputs"] == "1 differences" and row["speedup"] is None
    assert row["target"].startswith("FAIL")


@pytest.fixture(scope="module")
def sbm_run(prep, tmp_path_factory):
    """growth.py's SBM graph of 6,000 nodes (above large.min_nodes: the top-k rule cuts rows) as a folder, loaded
    by the benchmark's own ``load``; ours (the child's call) and the baseline run on what it wrote."""
    import scipy_baseline as B  # put on sys.path by the benchmark script

    from xmask_cli.prepare import prepare_graphs

    tmp = tmp_path_factory.mktemp("sbm")
    folder = tmp / "sbm-6k"
    info = prep.make_sbm("6k", folder, seed=0)
    spec, inp, load_info = prep.load(str(folder), tmp / "root", tmp / "staging", "computers")
    edges, nn, fp, meta = prep._read_input(inp)
    s = prep._structure(meta)
    summary = prepare_graphs(dataset_key=meta["key"], level=meta["level"], edges=edges, num_nodes=nn,
                             fingerprint=fp, cfg=s, cache_dir=tmp / "cache", memory_gb=meta["memory_gb"], force=True)
    return SimpleNamespace(B=B, folder=folder, info={**info, **load_info}, meta=meta, s=s, edges=edges, nn=nn,
                           summary=summary, results=B.baseline_all(edges, nn, s))


def test_sbm_folder_is_what_xmask_prepare_computes(sbm_run) -> None:
    """The structure is the computers preset's read one (K = 2, nothing else, the large-graph rule on), and the
    cache is the very file `xmask prepare <folder> --preset computers` would write (same key: same graphs, same
    parameters), found there instead of recomputed."""
    from xmask_cli.api import choose_preset
    from xmask_cli.config_resolve import resolve
    from xmask_cli.prepare import prepare_dataset

    r = sbm_run
    assert r.info["sbm"]["nodes"] == 6000 and r.info["nodes"] == 6000 and r.info["compute"] == "read"
    assert r.s.powers.k == 2 and not r.s.spd.enabled and not r.s.spectrum.enabled and r.s.partition.parts == 0
    assert r.nn[0] > r.s.large.min_nodes and r.summary.truncation["large_graphs"] == 1
    cfg = resolve(*choose_preset("computers", str(r.folder), []))
    cli = prepare_dataset(cfg, cache_dir=Path(r.summary.path).parents[1], offline=True)
    assert cli.cached and cli.path == r.summary.path


def test_sbm_baseline_equals_ours_and_a_perturbed_one_does_not(sbm_run, monkeypatch) -> None:
    r, B = sbm_run, sbm_run.B
    row, col, vals = r.results[0]["powers"]
    assert np.bincount(row).max() == r.s.large.topk and r.results[0]["dropped"][:, 1].max() > 0  # rows were cut
    assert B.check_equal(r.results, r.summary.path) == []

    def perturbed(edit) -> list[str]:
        res = copy.deepcopy(r.results)
        edit(res[0])
        return B.check_equal(res, r.summary.path)

    def move_pair(g):  # the same number of pairs, one of them in another column of its row
        row, col, vals = g["powers"]
        k = int(np.flatnonzero((row[1:] == row[:-1]) & (col[1:] - col[:-1] > 1))[0])
        col = col.copy()
        col[k] += 1
        g["powers"] = (row, col, vals)

    def scale_value(g):
        g["powers"][2][3, 1] *= 1.0001

    def more_dropped(g):
        g["dropped"] = g["dropped"] * 1.001

    def extra_section(g):  # the baseline doing work the cache does not hold
        g["spd"] = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.uint8))

    for edit, words in ((move_pair, "powers on other pairs"), (scale_value, "power values"),
                        (more_dropped, "dropped mass"), (extra_section, "section spd")):
        probs = perturbed(edit)
        assert probs and any(words in p for p in probs), (edit.__name__, probs)
    # One more power than the cache holds.
    s3 = dataclasses.replace(r.s, powers=dataclasses.replace(r.s.powers, k=3))
    assert any("K = 2" in p for p in B.check_equal(B.baseline_all(r.edges, r.nn, s3), r.summary.path))
    # d ** -0.5 instead of 1 / sqrt(d): Â's last bits move, and entries tied at a row's top-k cut go to other columns.
    def pow_inv_sqrt(d):
        out = np.zeros_like(d, dtype=np.float64)
        out[d > 0] = d[d > 0] ** -0.5
        return out

    monkeypatch.setattr(B, "_inv_sqrt", pow_inv_sqrt)
    assert any("powers on other pairs" in p for p in B.check_equal(B.baseline_all(r.edges, r.nn, r.s), r.summary.path))
