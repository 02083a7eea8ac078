"""The shared training loop on a toy task: non-finite losses and gradients."""
from __future__ import annotations

import json

import pytest
import torch

from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.errors import DivergedError, UsageError


class ToyTask(Task):
    """Fit ``w·x + b`` to 1; ``poison`` maps ``(epoch, batch)`` to a non-finite ``"loss"`` or ``"grad"``."""

    metric = "mae"

    def __init__(self, poison: dict | None = None, drop: tuple = ()):
        self.poison, self.drop = dict(poison or {}), set(drop)
        self.device = torch.device("cpu")

    def describe(self):
        return {"dataset": "toy"}

    def split_sizes(self):
        return {"train": 8, "val": 4, "test": 4}

    def train_batches(self, epoch):
        return [(epoch, i) for i in range(3) if (epoch, i) not in self.drop]

    def loss(self, model, batch):
        x = torch.full((4, 2), 0.5 + batch[1])
        loss = ((model(x) - 1.0) ** 2).mean()
        kind = self.poison.get(batch)
        if kind == "loss":
            loss = loss * float("nan")
        elif kind == "grad":  # finite value, NaN gradient: d sqrt(u)/du at u = 0
            loss = loss + torch.sqrt((model.weight - model.weight.detach()).abs().sum())
        return loss, 4

    def score(self, model, part):
        return float((model(torch.ones(1, 2)) - 1.0).abs().item())


def _fit(task, path, **kw):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cfg = TrainConfig(epochs=3, lr=0.05, warmup_epochs=0, patience=10, **kw)
    summary = fit(task, model, cfg, path, model_config={"toy": 1})
    return summary, model


@pytest.mark.parametrize("kind, what", [("loss", "non-finite loss"), ("grad", "non-finite gradient norm")])
def test_non_finite_stops_the_run_and_keeps_the_best_checkpoint(tmp_path, kind, what):
    with pytest.raises(DivergedError, match=f"{what} at epoch 1, batch 1 .*train.skip_nonfinite") as err:
        _fit(ToyTask({(1, 1): kind}), tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert str(run.path / RunDir.BEST) in str(err.value)
    assert run.load_checkpoint(RunDir.BEST)["epoch"] == 0  # the best state before the failure is kept
    assert [r["epoch"] for r in run.read_metrics()] == [0]
    assert not (run.path / RunDir.SUMMARY).exists()


@pytest.mark.parametrize("kind", ["loss", "grad"])
def test_skip_nonfinite_equals_training_without_those_batches(tmp_path, kind):
    poisoned = {(1, 1): kind, (2, 0): kind}
    summary, model = _fit(ToyTask(poisoned), tmp_path / "a", skip_nonfinite=True)
    ref_summary, ref = _fit(ToyTask(drop=poisoned), tmp_path / "b")
    assert torch.equal(model.weight, ref.weight) and torch.equal(model.bias, ref.bias)
    assert summary["metrics"] == ref_summary["metrics"]
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("skipped_batches", 0) for r in rows] == [0, 1, 1]


def test_runs_written_before_a_new_setting_still_resume(tmp_path):
    """A run whose recorded config predates `train.skip_nonfinite` resumes while the setting is at its
    default, and is refused when it is not."""
    from dataclasses import replace

    task = ToyTask()
    _fit(task, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    ckpt = run.load_checkpoint(RunDir.LAST)
    old = json.loads(ckpt["config"])
    del old["train"]["skip_nonfinite"]
    ckpt["config"] = json.dumps(old)
    run.save_checkpoint(ckpt, RunDir.LAST)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cfg = TrainConfig(epochs=4, lr=0.05, warmup_epochs=0, patience=10)
    assert fit(task, model, cfg, run, model_config={"toy": 1}, resume=True)["epochs_run"] == 4
    with pytest.raises(UsageError, match="train.skip_nonfinite"):
        run.save_checkpoint({**run.load_checkpoint(RunDir.LAST), "config": json.dumps(old)}, RunDir.LAST)
        fit(task, torch.nn.Linear(2, 1), replace(cfg, skip_nonfinite=True), run, model_config={"toy": 1}, resume=True)
