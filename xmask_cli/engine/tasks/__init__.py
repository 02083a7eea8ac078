"""Task levels: one registry from a level name to its task, data, structure, metrics and explain targets.

Each level is one module of this package holding its
:class:`~xmask_cli.engine.tasks.base.Task` subclass and a ``from_experiment(exp,
seed, device, dense_only)`` function that builds it for one seed of an
:class:`~xmask_cli.engine.experiment.Experiment` (and, when its model needs
more than the task's ``in_dim`` / ``out_dim``, a ``model_fields(exp, task)``). :data:`LEVELS` is read in
one place per concern (:mod:`~xmask_cli.engine.data` for the data kind, :mod:`~xmask_cli.engine.plan`
for the metric, :mod:`~xmask_cli.engine.experiment` for dispatch; ``xmask explain`` for its targets).
A new level is one module plus one entry here.

Example::

    level = get_level("link")
    level.default_metric          # "mrr"
    task = level.build(exp, seed=0, device="cpu", dense_only=None)
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # types only: base imports the data layer and torch, which the registry loads per level
    from xmask_cli.engine.tasks.base import ExperimentView, ModelFields, Task

__all__ = ["TaskLevel", "LEVELS", "get_level", "DataKind", "StructureKind"]

#: What :func:`~xmask_cli.engine.data.load_data` reads for a level (its loader in ``engine.data.LOADERS``).
DataKind = Literal["graphs", "images", "edge-file"]
#: Where a level's structure cache comes from (see :attr:`TaskLevel.structure`).
StructureKind = Literal["dataset", "train-edges"]


@dataclass(frozen=True, kw_only=True)
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
    data: DataKind
    structure: StructureKind
    default_metric: str
    metrics: tuple[str, ...]
    metric_from_dataset: bool
    explain_target: Literal["graph", "node", "image"]
    experts_module: str | None = None

    def _module(self, exp: ExperimentView[Any] | None = None) -> ModuleType:
        """The level's module, or its experts module when ``exp``'s model has attention experts."""
        name = self.module
        if self.experts_module and exp is not None and exp.cfg.model.experts:
            name = self.experts_module
        return import_module(f"{__name__}.{name}")  # lazy: a level's imports load only when it runs

    def task_class(self) -> type[Task[Any]]:
        """The level's task class (imported on first use)."""
        cls: type[Task[Any]] = getattr(self._module(), self.task)
        return cls

    def build(self, exp: ExperimentView[Any], seed: int, device: str, dense_only: str | None) -> Task[Any]:
        """The level's task for one seed of ``exp`` (which also draws a random split)."""
        task: Task[Any] = self._module(exp).from_experiment(exp, seed, device, dense_only)
        return task

    def model_fields(self, exp: ExperimentView[Any], task: Task[Any]) -> ModelFields:
        """What the level's model config takes from the data: ``in_dim``, ``out_dim`` and any level extras.

        The module's ``model_fields(exp, task)`` when it has one, else the task's ``in_dim`` / ``out_dim``
        and ``struct_dim``.
        """
        own = getattr(self._module(exp), "model_fields", None)
        if own is not None:
            fields: ModelFields = own(exp, task)
            return fields
        return {"in_dim": int(task.in_dim), "out_dim": int(task.out_dim), "struct_dim": int(task.struct_dim)}


#: Every task level, by name.
LEVELS: dict[str, TaskLevel] = {
    "graph": TaskLevel(name="graph", module="graph", task="GraphTask", data="graphs", structure="dataset",
                       default_metric="accuracy", metrics=("accuracy", "rocauc"), metric_from_dataset=True,
                       explain_target="graph"),
    "node": TaskLevel(name="node", module="node", task="NodeTask", data="graphs", structure="dataset",
                      default_metric="accuracy", metrics=("accuracy",), metric_from_dataset=True,
                      explain_target="node", experts_module="node_experts"),
    "link": TaskLevel(name="link", module="link", task="LinkTask", data="graphs", structure="train-edges",
                      default_metric="mrr", metrics=("mrr",), metric_from_dataset=False, explain_target="node"),
    "edge": TaskLevel(name="edge", module="edge", task="EdgeTask", data="edge-file", structure="train-edges",
                      default_metric="mae", metrics=("mae", "rmse"), metric_from_dataset=False,
                      explain_target="node"),
    "image": TaskLevel(name="image", module="image", task="ImageTask", data="images", structure="dataset",
                       default_metric="accuracy", metrics=("accuracy",), metric_from_dataset=True,
                       explain_target="image"),
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
