"""The task-level registry: every level resolves to a task and builder, and drives metric resolution."""
from __future__ import annotations

import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.plan import resolve_metric
from xmask_cli.engine.tasks import LEVELS, get_level


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_every_level_names_a_task_and_a_builder(name: str) -> None:
    level = get_level(name)
    cls = level.task_class()
    for method in ("train_batches", "loss", "score", "describe", "split_sizes"):
        assert callable(getattr(cls, method)), f"{cls.__name__} lacks {method}"
    assert callable(level._module().from_experiment)
    assert level.default_metric in level.metrics
    assert level.data in ("graphs", "images", "edge-file")
    assert level.structure in ("dataset", "train-edges")
    assert level.explain_target in ("graph", "node", "image")


def test_metric_defaults_come_from_the_registry() -> None:
    # Pair levels ignore the dataset's metric; the dataset's own levels read it.
    assert resolve_metric(resolve("cora", ["task.level=link"]), "link") == "mrr"
    assert resolve_metric(resolve("cora"), "node") == "accuracy"
    with pytest.raises(ValueError, match="unknown task level 'pixels'"):
        get_level("pixels")
