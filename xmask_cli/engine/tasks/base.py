"""The task contract: what the training loop, the strategy, evaluation and the API read of a task level.

Every level's task subclasses :class:`Task`: it implements the five abstract members and overrides the
defaults it improves on (a one-pass :meth:`Task.evaluate`, a :meth:`Task.train_shard` that deals batch ids
before building them, per-item :meth:`Task.outputs`). Readers call the members directly; no reader asks
whether a task has one.

Example::

    class MyTask(Task[MyBatch]):
        metric = "accuracy"
        def describe(self): ...
        def split_sizes(self): ...
        def train_batches(self, epoch): ...
        def loss(self, model, batch): ...
        def score(self, model, part): ...
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypedDict, TypeVar

import torch
from torch import Tensor

from xmask_cli.config import Config
from xmask_cli.data.edgefile import EdgeData
from xmask_cli.engine.distributed import deal
from xmask_cli.model.network import XMaskNet

__all__ = ["Task", "B", "D", "ExperimentView", "ModelFields", "network"]

#: A task's batch type (what :meth:`Task.train_batches` yields and :meth:`Task.loss` takes).
B = TypeVar("B")
#: What an experiment loaded for its level (:attr:`ExperimentView.graphs`): a ``GraphSet`` (``graphs`` data
#: kind), an ``ImageSet`` (``images``), None (``edge-file``, whose rows are ``edge_data``).
D = TypeVar("D", covariant=True)


class _ModelDims(TypedDict):
    in_dim: int
    out_dim: int


class ModelFields(_ModelDims, total=False):
    """What a level's model config takes from its data (``model_fields(exp, task)``): the input width and output
    size always; the structural channels among the inputs, the sum readout's size scale, an image's size and
    patch side where the level has them."""

    struct_dim: int
    readout_scale: float
    image_size: tuple[int, int]
    patch_size: int


class Task(ABC, Generic[B]):
    """What a task level gives :func:`~xmask_cli.engine.loop.fit` and the readers of a run.

    Attributes:
        metric: name in :data:`xmask_cli.engine.metrics.METRICS` used for selection.
        device: where the task's tensors live (the model is moved there).
        in_dim / out_dim: the model's input width and output size on this task.
        model_task: the ``ModelConfig.task`` the model must be built with; None: not checked
            (:func:`~xmask_cli.engine.loop.train_task` checks ``(model_task, in_dim, out_dim)`` otherwise).
        struct_dim: width of the structural node channels (``model.node_struct``) among the inputs.
    """

    metric: str
    device: torch.device
    in_dim: int
    out_dim: int
    model_task: ClassVar[str | None] = None
    struct_dim: int = 0

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the data side (dataset, split, ...): saved, and compared on resume."""

    @abstractmethod
    def split_sizes(self) -> dict[str, int]:
        """Number of scored items (nodes, graphs, pairs) per part."""

    @abstractmethod
    def train_batches(self, epoch: int) -> Iterable[B]:
        """The training batches of ``epoch``; a function of (seed, epoch) only, so resume is exact."""

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: B) -> tuple[Tensor, int]:
        """Mean loss of ``batch`` (on the task's device) and how many items it averaged."""

    @abstractmethod
    def score(self, model: torch.nn.Module, part: str) -> float:
        """``metric`` on ``part`` (``train``/``val``/``test``); called in eval mode under ``no_grad``."""

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric, mean loss)`` on ``part`` from one pass. By default the loss is NaN (not computed):
        selection then breaks metric ties by the later epoch."""
        return float(self.score(model, part)), float("nan")

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[B, bool]]:
        """Rank ``rank``'s ``(batch, real)`` of ``epoch`` among ``size`` ranks (``real`` False: zero-weight padding).

        By default every batch of the epoch is built on every rank and each keeps its share: right for any
        task (the order is a function of seed and epoch), and cheap where batches are prebuilt or tiny (link
        and edge pairs, images). Tasks whose batches are costly to build deal the batch ids first instead.
        """
        batches = list(self.train_batches(epoch))
        for i, real in deal(len(batches), rank, size):
            yield batches[i], real

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor] | None:
        """Per-item ``(outputs, targets)`` of ``part``; None where the level has none (link prediction scores
        positive pairs against sampled negatives)."""
        return None


def network(model: torch.nn.Module) -> XMaskNet:
    """``model`` as the :class:`XMaskNet` it is: the loop hands a task the model built from its level's config
    (levels that call the network's own methods, such as ``score_pairs``, read it through this).

    Raises:
        TypeError: ``model`` is another module.
    """
    if not isinstance(model, XMaskNet):
        raise TypeError(f"this task runs an XMaskNet, got {type(model).__name__}")
    return model


class ExperimentView(Protocol[D]):
    """What a level's ``from_experiment`` / ``model_fields`` read of an
    :class:`~xmask_cli.engine.experiment.Experiment` (which has these fields). A protocol here, below both:
    the experiment imports the level registry, so the task modules do not import the experiment.

    Generic over the loaded data ``D``: a level names what its data kind loads (``ExperimentView[GraphSet]``,
    ``ExperimentView[ImageSet]``); the registry dispatches on the level, whose data kind decides ``D``.

    Attributes (read-only):
        cfg: the resolved config; level, metric: resolved (never ``auto``); dataset: the dataset's name.
        graphs: the loaded graphs (``graphs`` data kind) or images (``images``); None for an edge file.
        cache_path: the dataset's structure cache; None where the task prepares its own (pair levels).
        edge_data: an edge-attribute file's rows (``edge-file`` data kind).
        cache_dir: where caches live (pair levels prepare theirs there); log: progress lines (stderr).
    """

    @property
    def cfg(self) -> Config: ...
    @property
    def level(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def dataset(self) -> str: ...
    @property
    def graphs(self) -> D: ...
    @property
    def cache_path(self) -> Path | None: ...
    @property
    def edge_data(self) -> EdgeData | None: ...
    @property
    def cache_dir(self) -> Path: ...
    @property
    def log(self) -> Callable[[str], None]: ...
