"""Data-parallel training on CPU with gloo: dealing, gradient equivalence, torchrun end to end.

The equivalence test spawns two ranks (``torch.multiprocessing.spawn``, a ``file://``
rendezvous); the end-to-end tests run ``torchrun --standalone --nproc_per_node 2``
as a user does. Each subprocess uses one torch thread.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.cli_helpers import run
from tests.engine.ranks import spawn_ranks
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.training.distributed import deal, epoch_seed

REPO = Path(__file__).resolve().parents[3]
TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "train.warmup_epochs=1",
        "--set", "train.lr=1e-2"]


# ------------------------------------------------------------------ dealing

@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("total", [0, 1, 2, 3, 5, 8, 9])
def test_deal_covers_every_batch_once_with_equal_steps(total, size):
    plans = [deal(total, r, size) for r in range(size)]
    steps = -(-total // size)
    assert all(len(p) == steps for p in plans)  # every rank takes the same number of steps
    real = sorted(i for p in plans for i, ok in p if ok)
    assert real == list(range(total))  # each batch exactly once
    # Step s of the job is batches s*size .. s*size+size-1 of the epoch, rank r holding s*size+r.
    for r, p in enumerate(plans):
        for s, (i, ok) in enumerate(p):
            assert ok == (s * size + r < total)
            if ok:
                assert i == s * size + r


def test_epoch_seeds_differ_by_rank_and_epoch():
    seeds = {epoch_seed(0, e, r) for e in range(3) for r in range(3)}
    assert len(seeds) == 9 and epoch_seed(0, 1, 1) == epoch_seed(0, 1, 1)


# ------------------------------------------------------------ shared MUTAG

@pytest.fixture(scope="module")
def mutag(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from xmask_cli.config_resolve import resolve
    from xmask_cli.prepare import prepare_dataset

    cache = tmp_path_factory.mktemp("cache")
    summary = prepare_dataset(resolve("graph-level", []), cache_dir=cache, offline=True)
    return {"cache_dir": cache, "cache_path": str(summary.path)}


def _graph_task(mutag: dict, batch_size: int = 8):
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.engine.scoring.splits import graph_split
    from xmask_cli.engine.tasks.graph import GraphTask

    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=mutag["cache_dir"], offline=True)
    split = graph_split(graphs.spec.split, graphs.dataset, seed=0)
    return GraphTask(mutag["cache_path"], graphs, split, "accuracy", batch_size, seed=0, device="cpu")


@pytest.mark.parametrize("size", [2, 3])
def test_graph_shards_are_the_epoch_buckets_dealt_by_rank(mutag, size):
    task = _graph_task(mutag)
    for epoch in (0, 1):
        buckets = [b.tolist() for b in task.train_stream.batches(epoch)]
        shards = [[(b.index.tolist(), real) for b, real in task.train_shard(epoch, r, size)] for r in range(size)]
        steps = -(-len(buckets) // size)
        assert all(len(s) == steps for s in shards)
        # Read step by step, rank by rank, the real batches are the epoch's buckets in order.
        order = [ids for s in range(steps) for r in range(size) for ids, real in [shards[r][s]] if real]
        assert order == buckets
        # A padding batch (weight 0) repeats a bucket of the same rank.
        for r in range(size):
            for ids, real in shards[r]:
                if not real:
                    assert ids == shards[r][0][0]


# ---------------------------------------- 2 ranks x B == 1 process x 2B

class FixedGraphBatches(Task):
    """MUTAG graphs in fixed batches (``groups`` of graph ids), the graph task's cross-entropy loss."""

    metric = "accuracy"

    def __init__(self, mutag: dict, groups: list[list[int]]):
        self.inner, self.groups = _graph_task(mutag), groups

    def describe(self):
        return {"dataset": "MUTAG", "groups": self.groups}

    def split_sizes(self):
        return {"train": sum(map(len, self.groups)), "val": 0, "test": 0}

    def train_batches(self, epoch):
        return [self.inner.train_stream.collate(np.asarray(g)) for g in self.groups]

    def loss(self, model, batch):
        return self.inner.loss(model, batch)

    def score(self, model, part):
        return 0.0


#: (groups the 2 ranks are dealt, the groups one process trains on): one step each, except the last case.
CASES = {
    "2x4": ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 1, 2, 3, 4, 5, 6, 7]]),
    "5+3": ([[0, 1, 2, 3, 4], [5, 6, 7]], [[0, 1, 2, 3, 4, 5, 6, 7]]),  # unequal rank batches
    # 3 batches on 2 ranks: step 1 = batches 0 and 1, step 2 = batch 2 and rank 1's zero-weight padding.
    "pad": ([[0, 1, 2, 3], [10, 11, 12, 13], [20, 21]], [list(range(4)) + list(range(10, 14)), [20, 21]]),
}


def _model():
    from xmask_cli.model.network import ModelConfig, XMaskNet

    return XMaskNet(ModelConfig(in_dim=7, out_dim=2, hidden=16, layers=2, dropout=0.0, task="graph"))


def _fit_case(mutag: dict, groups: list[list[int]], run_dir: Path) -> dict:
    """Parameters after one epoch on ``groups`` and the gradient of its last step (as the optimiser saw it)."""
    from xmask_cli.engine.training.loop import TrainConfig, fit, seed_everything

    seed_everything(0)
    model = _model()
    cfg = TrainConfig(epochs=1, lr=1e-3, warmup_epochs=0, clip_norm=1.0, seed=0)  # the default lr
    fit(FixedGraphBatches(mutag, groups), model, cfg, run_dir, model_config={"case": str(groups)})
    return {"params": {k: v.detach().clone() for k, v in model.named_parameters()},
            "grads": {k: v.grad.detach().clone() for k, v in model.named_parameters()}}


def _rank_main(rank: int, size: int, init_file: str, mutag: dict, out: str) -> None:
    import datetime

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        for name, (groups, _) in CASES.items():
            got = _fit_case(mutag, groups, Path(out) / name)
            if rank == 0:
                torch.save(got, Path(out) / name / "after.pt")
    finally:
        dist.destroy_process_group()


def test_two_ranks_one_step_equals_one_process_with_both_batches(mutag, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # read by the spawned ranks' interpreters
    ddp_dir = spawn_ranks(_rank_main, mutag, tmp_path)
    torch.manual_seed(0)
    init = {k: v.detach() for k, v in _model().named_parameters()}
    for name, (_, merged) in CASES.items():
        ddp = torch.load(ddp_dir / name / "after.pt", weights_only=True)
        one = _fit_case(mutag, merged, tmp_path / "one" / name)
        # What the model saved is the state after the step (rank 0 wrote it, no other rank did).
        saved = torch.load(ddp_dir / name / "last.pt", weights_only=True)["model"]
        exempt = total = 0
        for k, p in one["params"].items():
            g = one["grads"][k]
            # The averaged, weighted gradient equals the one-process gradient of the merged batch.
            assert torch.allclose(ddp["grads"][k], g, atol=1e-7, rtol=1e-4), (name, k)
            assert torch.equal(saved[k], ddp["params"][k])
            # Parameters within 1e-6, but for the attention key bias: its exact gradient is 0 (softmax ignores
            # a shift of a whole logit row), so it carries rounding noise only, which AdamW's first step
            # (lr * g / (|g| + eps)) turns into a step of up to lr. Its gradient is checked to be noise.
            if k.endswith("attn.k.bias"):
                assert float(g.abs().max()) <= 1e-8 and float(ddp["grads"][k].abs().max()) <= 1e-8, (name, k)
                exempt += 1
                continue
            worst = float((ddp["params"][k] - p).abs().max())
            assert worst <= 1e-6, (name, k, worst)
            total += 1
        assert exempt == 2 and total > 30, (name, exempt, total)
        # The step did move the parameters (a test that cannot fail would not).
        assert max(float((one["params"][k] - init[k]).abs().max()) for k in init) > 5e-4, name


# ------------------------------------------------------------- torchrun e2e

def _torchrun(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "XMASK_OFFLINE": "1",
           "XMASK_DIST_TIMEOUT": "120"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "xmask_cli", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_torchrun_two_processes_write_one_run_that_eval_reproduces(mutag, tmp_path):
    p = _torchrun(["--format", "json", "train", "--preset", "graph-level", *TINY, "--set", "train.epochs=2",
                   "--device", "cpu", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(mutag["cache_dir"])],
                  cwd=tmp_path)
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode == 0, stderr
    result = json.loads(stdout)  # one result document: only rank 0 prints
    assert "error" not in stderr
    runs = [d for d in (tmp_path / "runs").rglob("summary.json")]
    assert [r.parent.name for r in runs] == ["0"] and len(result["runs"]) == 1
    folder = runs[0].parent
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]  # one row per epoch, written once
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["metrics"] == result["runs"][0]["metrics"]
    r = run("--format", "json", "eval", str(folder), "--split", "all", "--device", "cpu",
            "--cache-dir", str(mutag["cache_dir"]))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    for part in ("train", "val", "test"):
        assert out["metrics"][part] == summary["metrics"][part]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


@pytest.mark.slow
def test_killing_one_rank_ends_the_job_with_an_error_and_a_resumable_run(mutag, tmp_path):
    args = ["train", "--preset", "graph-level", *TINY, "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(mutag["cache_dir"])]
    p = _torchrun([*args, "--set", "train.epochs=400", "--set", "train.patience=400"], cwd=tmp_path)
    metrics = tmp_path / "runs" / "mutag-graph" / "0" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()[1]
    ranks = {_rank_of(c): c for c in _children(p.pid)}
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], signal.SIGKILL)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode != 0
    # torchrun names the dead rank; rank 0, if it reached a collective first, says what to do.
    assert "exitcode  : -9" in stderr or "Signal 9" in stderr or "SIGKILL" in stderr, stderr[-3000:]
    done = len(metrics.read_text().splitlines())
    assert done >= 2
    # One process resumes the run from its last checkpoint and finishes it.
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--set", f"train.epochs={done + 2}",
            "--set", "train.patience=400", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(mutag["cache_dir"]), "--resume")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["epoch"] for row in rows] == list(range(done + 2))
    assert json.loads(r.stdout)["runs"][0]["epochs_run"] == done + 2
