"""The task contract: every level's task is a Task, and the defaults readers rely on are what they say."""
from __future__ import annotations

import math

import pytest
import torch

from xmask_cli.engine.tasks import LEVELS, TaskLevel
from xmask_cli.engine.tasks.base import Task, network
from xmask_cli.engine.training.distributed import deal
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.network import XMaskNet


class Counted(Task[int]):
    """Five batches ``0..4``; the score is the model's single weight."""

    metric = "mae"

    def describe(self) -> dict[str, str]:
        return {"dataset": "counted"}

    def split_sizes(self) -> dict[str, int]:
        return {"train": 5, "val": 1, "test": 1}

    def train_batches(self, epoch: int) -> list[int]:
        return [10 * epoch + i for i in range(5)]

    def loss(self, model: torch.nn.Module, batch: int) -> tuple[torch.Tensor, int]:
        return model.weight.sum() * batch, 1

    def score(self, model: torch.nn.Module, part: str) -> float:
        return float(model.weight.sum())


def test_every_level_builds_a_task_subclass():
    for level in LEVELS.values():
        assert issubclass(level.task_class(), Task), level.name


def test_a_task_without_the_five_members_cannot_be_made():
    class Partial(Task[int]):
        def describe(self) -> dict[str, str]:
            return {}

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]


def test_the_defaults():
    task, model = Counted(), torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.25)
    assert task.model_task is None and task.struct_dim == 0
    metric, loss = task.evaluate(model, "val")
    assert metric == 0.25 and math.isnan(loss)  # the metric alone; no loss computed
    assert task.outputs(model, "test") is None


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_the_default_shard_is_the_epochs_batches_dealt_by_rank(size):
    task = Counted()
    batches = task.train_batches(3)
    for rank in range(size):
        want = [(batches[i], real) for i, real in deal(len(batches), rank, size)]
        assert list(task.train_shard(3, rank, size)) == want
    # Every real batch once over the ranks, whatever the world size.
    real = sorted(b for r in range(size) for b, is_real in task.train_shard(3, r, size) if is_real)
    assert real == batches


def test_levels_are_built_by_keywords():
    with pytest.raises(TypeError):
        TaskLevel("x", "graph", "GraphTask", "graphs", "dataset", "accuracy", ("accuracy",), True, "graph")  # type: ignore[misc]
    row = LEVELS["node"]
    assert (row.data, row.structure, row.experts_module) == ("graphs", "dataset", "node_experts")


def test_only_link_prediction_has_no_per_item_outputs():
    """``LoadedRun.predict`` refuses a run whose task keeps the default ``outputs`` (None)."""
    default = [name for name, level in LEVELS.items() if level.task_class().outputs is Task.outputs]
    assert default == ["link"]


def test_network_gives_the_model_itself_and_refuses_another_module():
    net = XMaskNet(ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=1, task="node"))
    assert network(net) is net
    with pytest.raises(TypeError, match="XMaskNet, got Linear"):
        network(torch.nn.Linear(2, 2))
