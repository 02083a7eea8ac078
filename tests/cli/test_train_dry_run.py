"""``xmask train --dry-run``: the plan of a sweep printed, nothing written; its parameter count is the built
model's, its cache entry and pairs those ``train`` reads."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.config_resolve import resolve

TINY = ["model.hidden=16", "model.layers=1", "train.epochs=2"]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time (what a write would change)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(Path(dirpath) / name)
            out[str(Path(dirpath, name).relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _dry(tmp_path: Path, *extra: str):
    sets = [a for kv in TINY for a in ("--set", kv)]
    return run("--format", "json", "train", "--preset", "graph-level", *sets, "--seeds", "0-1", "--device", "cpu",
               "--dry-run", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), *extra)


def test_a_dry_run_writes_nothing_and_plans_what_train_makes(tmp_path):
    r = _dry(tmp_path)
    assert r.exit_code == 0, r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()
    plan = json.loads(r.stdout)
    assert plan["dry_run"] is True and (plan["dataset"], plan["level"], plan["metric"]) == ("MUTAG", "graph", "accuracy")
    assert plan["config"] == resolve("graph-level", TINY).to_dict() | {"data": plan["config"]["data"]}
    assert [(x["seed"], x["fold"], x["path"], x["action"]) for x in plan["runs"]] == [
        (s, None, str(tmp_path / "runs" / "mutag-graph" / str(s)), "new") for s in (0, 1)]
    assert plan["cache"]["present"] is False and plan["cache"]["sections"] == ["powers"]
    assert plan["estimate"]["pairs_from"] == "graphs"


def test_the_dry_run_matches_the_model_and_cache_train_builds_and_leaves_them_untouched(tmp_path):
    from xmask_cli.engine.runs.experiment import Experiment
    from xmask_cli.model.network import XMaskNet

    cfg = resolve("graph-level", TINY)
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache")  # prepares the cache train reads
    task = exp.task(0, "cpu")
    built = sum(p.numel() for p in XMaskNet(exp.model_config(task)).parameters())
    before = _dry(tmp_path)
    assert before.exit_code == 0, before.stderr
    cached, counted = json.loads(before.stdout), None
    # A run folder holding a run: refused without a flag, resumed with --resume.
    (tmp_path / "runs" / "mutag-graph" / "1").mkdir(parents=True)
    (tmp_path / "runs" / "mutag-graph" / "1" / "config.json").write_text("{}")
    snapshot = {d: _tree(tmp_path / d) for d in ("cache", "runs")}
    refused, resumed = _dry(tmp_path), _dry(tmp_path, "--resume")
    assert refused.exit_code == 0 and resumed.exit_code == 0, refused.stderr + resumed.stderr
    assert {d: _tree(tmp_path / d) for d in ("cache", "runs")} == snapshot
    assert [x["action"] for x in json.loads(refused.stdout)["runs"]] == ["new", "refused"]
    assert [x["action"] for x in json.loads(resumed.stdout)["runs"]] == ["new", "resume"]
    assert cached["estimate"]["parameters"] == built
    assert cached["cache"] == {"path": str(exp.cache_path), "present": True, "sections": ["powers"]}
    assert cached["estimate"]["pairs_from"] == "cache"
    # The pairs read from the cache are those counted from the graphs without it.
    counted = json.loads(run("--format", "json", "train", "--preset", "graph-level",
                             *[a for kv in TINY for a in ("--set", kv)], "--dry-run", "--device", "cpu",
                             "--cache-dir", str(tmp_path / "empty")).stdout)["estimate"]
    assert counted["pairs_per_power"] == cached["estimate"]["pairs_per_power"]
    assert counted["parameters"] == built


def test_the_human_dry_run_names_config_runs_cache_and_estimate(tmp_path):
    r = run("train", "--preset", "graph-level", "--dry-run", "--runs-dir", "runs", "--cache-dir", "cache")  # in tmp_path
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    for needle in ("dry run: MUTAG (graph, accuracy)", "resolved config:", "hidden: 64", "runs/mutag-graph/0", "new",
                   "(to prepare; powers)", "parameters", "peak memory per step"):
        assert needle in text, needle
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("args, code, needle", [
    (["--preset", "no-such-preset"], 2, "unknown preset"),
    (["--preset", "graph-level", "--set", "model.hiden=8"], 2, "model.hidden"),
    (["--preset", "proteins", "--data-root", "nowhere"], 3, "PROTEINS"),
])
def test_a_dry_run_refuses_what_train_refuses(args, code, needle, tmp_path):
    r = run("train", *args, "--dry-run", "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert needle in one_error_line(r)
    assert not (tmp_path / "cache").exists()


def test_the_python_api_dry_run_is_the_cli_json(tmp_path):
    import xmask_cli

    r = _dry(tmp_path)
    assert r.exit_code == 0, r.stderr
    plan = xmask_cli.dry_run("graph-level", TINY, seeds="0-1", device="cpu", runs_dir=tmp_path / "runs",
                             cache_dir=tmp_path / "cache")
    assert json.loads(json.dumps(plan.to_json())) == json.loads(r.stdout)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_a_mode_outside_the_memory_model_still_gets_pairs_and_parameters(tmp_path):
    r = run("--format", "json", "train", "--preset", "cora", "--set", "node.mode=query", "--dry-run",
            "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    est = plan["estimate"]
    assert est["largest_step"] is None and est["step_bytes"] is None and est["peak_bytes"] is None
    assert plan["notes"] == ["no memory estimate for node.mode=query"]
    # Cora's Â^1 support: 2,708 self pairs and 10,556 directed edges.
    assert est["pairs_per_power"][0] == 2708 + 10556 and est["parameters"] > 0


def test_auto_mode_is_the_node_tasks_choice(tmp_path):
    """node.mode auto resolves as the node task resolves it: the full-graph step against node.memory_gb."""
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import Experiment

    for budget, expected in (("4", "full"), ("0.0001", "query")):
        r = run("--format", "json", "train", "--preset", "node-level", "--set", f"node.memory_gb={budget}", "--dry-run",
                "--cache-dir", str(tmp_path / "cache"))
        assert r.exit_code == 0, r.stderr
        notes = json.loads(r.stdout)["notes"]
        assert notes == ([] if expected == "full" else [f"no memory estimate for node.mode={expected}"])
        exp = Experiment.load(resolve("node-level", [f"node.memory_gb={budget}"]), cache_dir=tmp_path / "built",
                              offline=True)
        assert exp.task(0, "cpu").mode == expected  # what train takes


def test_an_ogb_dry_run_reads_its_official_split(tmp_path, shared_data):
    """OGB's datasets read their split files lazily from the staged folder: the plan is made while it lives."""
    r = run("--format", "json", "train", "--preset", "ogbg-molhiv", "--dry-run", "--data-root", str(shared_data),
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()
    plan = json.loads(r.stdout)
    # Â^1's stored pairs: every node's self pair and both directions of every bond, from OGB's raw counts.
    raw = shared_data / "ogbg_molhiv" / "raw"
    nodes, bonds = (np.loadtxt(raw / f"num-{k}-list.csv.gz", dtype=np.int64).sum() for k in ("node", "edge"))
    assert plan["estimate"]["pairs_per_power"][0] == nodes + 2 * bonds
