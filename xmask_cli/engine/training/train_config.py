"""The training loop's view of the ``train`` section (:class:`TrainConfig`).

A module of its own, below both :mod:`~xmask_cli.engine.training.loop` (which runs with it) and
:mod:`~xmask_cli.engine.training.resume` (which reads its defaults on ``--resume``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from xmask_cli.config import TrainSection, section_fields

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig(TrainSection):
    """Optimisation settings of one run: the preset's ``train`` section plus what a run adds.

    Every hyper-parameter and its default is :class:`~xmask_cli.config.TrainSection`'s
    (one schema, documented there); this view adds the run's seed and device.
    Build it from a config with :meth:`from_section`.

    Attributes:
        seed: seeds torch, numpy and the batch order.
        device: ``'cpu'``, ``'cuda'``, ``'cuda:1'`` ...
    """

    seed: int = 0
    device: str = "cpu"

    #: Section keys only the tasks read (they do not change a run's numbers): not saved in ``config.json``'s ``train``.
    NOT_SAVED: ClassVar[frozenset[str]] = frozenset({"loader_workers", "log_cache_mb", "loggers"})

    @classmethod
    def from_section(cls, section: TrainSection, *, seed: int, device: str) -> TrainConfig:
        """The preset's ``train`` section with the run's seed and device."""
        return cls(**section_fields(section), seed=seed, device=device)

    def to_dict(self) -> dict[str, object]:
        """JSON-able settings as saved with a run (and compared on resume)."""
        return {k: v for k, v in asdict(self).items() if k not in self.NOT_SAVED}
