"""Task levels: one registry from a level name to its task, data, structure, metrics and explain targets.

Each level is one module of this package holding its
:class:`~xmask_cli.engine.loop.Task` class and a ``from_experiment(exp,
seed, device, dense_only)`` function that builds it for one seed of an
:class:`~xmask_cli.engine.experiment.Experiment` (and, when its model needs
more than the task's ``in_dim`` / ``out_dim``, a ``model_fields(exp, task)``). :data:`LEVELS` is read in
one place per concern (:mod:`~xmask_cli.engine.experiment` for data, metric
and dispatch; ``xmask explain`` for its targets). A new level is one module
plus one line here.

Example::

    level = get_level("link")
    level.default_metric          # "mrr"
    task = level.build(exp, seed=0, device="cpu", dense_only=None)
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

__all__ = ["TaskLevel", "LEVELS", "get_level"]


@dataclass(frozen=True)
class TaskLevel:
    """What the rest of xmask needs to know about one task level.

    Attributes:
        name: the level (``task.level``).
        module: module of this package holding the task class and ``from_experiment``.
        task: the task class's name in ``module``.
        data: what :meth:`Experiment.load` reads: ``graphs`` (a PyG/OGB dataset),
            ``images`` or ``edge-file`` (``edge.file``).
        structure: ``dataset``: one structure cache of the whole dataset, prepared
            when the experiment loads; ``train-edges``: prepared per split by the
            task, from its training edges only.
        default_metric: the metric when neither the preset nor the dataset names one.
        metrics: the metrics the level computes (the first is not special).
        metric_from_dataset: ``task.metric=auto`` reads the dataset's own metric.
        explain_target: what ``xmask explain`` takes: ``graph`` (graph ids),
            ``node`` (node ids and node pairs of one graph) or ``image`` (image ids).
        experts_module: the module that builds the level's task when the model has attention
            experts (``model.experts``); None: ``module`` builds it either way.
    """

    name: str
    module: str
    task: str
    data: str
    structure: str
    default_metric: str
    metrics: tuple[str, ...]
    metric_from_dataset: bool
    explain_target: str
    experts_module: str | None = None

    def _module(self, exp: Any = None) -> Any:
        """The level's module, or its experts module when ``exp``'s model has attention experts."""
        name = self.module
        if self.experts_module and exp is not None and exp.cfg.model.experts:
            name = self.experts_module
        return import_module(f"{__name__}.{name}")  # lazy: a level's imports load only when it runs

    def task_class(self) -> type:
        """The level's task class (imported on first use)."""
        return getattr(self._module(), self.task)

    def build(self, exp: Any, seed: int, device: str, dense_only: str | None) -> Any:
        """The level's task for one seed of ``exp`` (which also draws a random split)."""
        return self._module(exp).from_experiment(exp, seed, device, dense_only)

    def model_fields(self, exp: Any, task: Any) -> dict[str, Any]:
        """What the level's model config takes from the data: ``in_dim``, ``out_dim`` and any level extras.

        The module's ``model_fields(exp, task)`` when it has one, else the task's ``in_dim`` / ``out_dim``.
        """
        own = getattr(self._module(exp), "model_fields", None)
        if own is not None:
            return own(exp, task)
        return {"in_dim": int(task.in_dim), "out_dim": int(task.out_dim),
                "struct_dim": int(getattr(task, "struct_dim", 0))}


#: Every task level, by name.
LEVELS: dict[str, TaskLevel] = {
    "graph": TaskLevel("graph", "graph", "GraphTask", "graphs", "dataset", "accuracy", ("accuracy", "rocauc"),
                       True, "graph"),
    "node": TaskLevel("node", "node", "NodeTask", "graphs", "dataset", "accuracy", ("accuracy",), True, "node",
                      experts_module="node_experts"),
    "link": TaskLevel("link", "link", "LinkTask", "graphs", "train-edges", "mrr", ("mrr",), False, "node"),
    "edge": TaskLevel("edge", "edge", "EdgeTask", "edge-file", "train-edges", "mae", ("mae", "rmse"), False, "node"),
    "image": TaskLevel("image", "image", "ImageTask", "images", "dataset", "accuracy", ("accuracy",), True, "image"),
}


def get_level(name: str) -> TaskLevel:
    """The registered level ``name``.

    Raises:
        ValueError: no such level.
    """
    try:
        return LEVELS[name]
    except KeyError:
        raise ValueError(f"unknown task level {name!r}; expected one of {', '.join(LEVELS)}") from None
