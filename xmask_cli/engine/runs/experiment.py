"""An experiment: a resolved :class:`~xmask_cli.config.Config` with its data loaded and its cache ready.

:meth:`Experiment.load` takes a :class:`~xmask_cli.engine.runs.plan.RunPlan` (the task level and metric
resolved, the config checked: made from a Config when given one), loads the dataset, makes
sure the structure cache exists (preparing it when it does not, and saying so); :meth:`Experiment.task`
builds the level's :class:`~xmask_cli.engine.tasks.base.Task` for one seed (through the level registry,
:data:`~xmask_cli.engine.tasks.LEVELS`) and :meth:`Experiment.model_config` its model's config. The
sweep over seeds is :func:`~xmask_cli.engine.runs.sweep.train_seeds`.

Example::

    exp = Experiment.load(cfg, cache_dir=Path("cache"))
    task = exp.task(seed=0, device="cpu")
    model_cfg = exp.model_config(task)
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmask_cli.cache import StructureCache
from xmask_cli.config import Config
from xmask_cli.config_rules import resolve_encoder
from xmask_cli.data.edgefile import EdgeData
from xmask_cli.data.graphset import GraphSet
from xmask_cli.data.images import ImageSet
from xmask_cli.engine.batching.features import struct_info
from xmask_cli.engine.runs.data import DatasetMemo, LoadOptions, load_data
from xmask_cli.engine.runs.plan import RunPlan, make_plan, run_name
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.training.train_config import TrainConfig
from xmask_cli.errors import ConfigError
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.model.attention.path import PathRefused
from xmask_cli.model.model_config import ModelConfig, sparse_refusal
from xmask_cli.prepare.needs import model_needs

__all__ = ["Experiment", "check_config"]


def check_config(cfg: Config) -> tuple[str, str]:
    """The checks a config passes before any file is touched; returns ``(level, metric)``.

    The level and metric the dataset's spec allows, then the rules between sections a run needs
    (:func:`~xmask_cli.config_rules.check_rules` with the level and the dataset's split): what
    :func:`~xmask_cli.engine.runs.plan.make_plan` checks.

    Raises:
        UsageError: no such level for the dataset, a metric that does not apply.
        ConfigError: a run-stage rule broken (structure the model reads but the cache would not hold, ...).
    """
    plan = make_plan(cfg)
    return plan.level, plan.metric


def _train_config(cfg: Config, seed: int, device: str) -> TrainConfig:
    return TrainConfig.from_section(cfg.train, seed=seed, device=device)


def _model_config(cfg: Config, level: str, in_dim: int, out_dim: int, dataset: str, readout_scale: float = 1.0,
                  **extra: int | str | tuple[int, ...]) -> ModelConfig:
    # `extra`: image_size and patch_size (image level), edge_encoding and edge_dims (an edge bias)
    encoder = resolve_encoder(cfg.model.encoder, level, dataset)
    return ModelConfig.from_section(cfg.model, in_dim=in_dim, out_dim=out_dim, task=level, encoder=encoder,
                                    eps=cfg.structure.powers.eps, rrwp_dim=cfg.structure.rrwp.steps + 1,
                                    readout_scale=readout_scale, **extra)


@dataclass
class Experiment:
    """Everything seeds share: the config, level, metric, loaded data and structure cache.

    Build with :meth:`load`; then :meth:`task` and :meth:`model_config` per seed.
    """

    cfg: Config
    level: str
    metric: str
    dataset: str
    graphs: GraphSet | ImageSet | None = None
    cache_path: Path | None = None
    edge_data: EdgeData | None = None
    cache_dir: Path = Path("cache")
    log: Callable[[str], None] = lambda m: None
    plan: RunPlan | None = None

    @classmethod
    def load(
        cls,
        cfg: Config | RunPlan,
        *,
        cache_dir: Path,
        data_root: str | os.PathLike[str] | None = None,
        offline: bool | None = None,
        workers: int = 1,
        log: Callable[[str], None] = lambda m: None,
        datasets: DatasetMemo | None = None,
    ) -> Experiment:
        """Load the data of ``cfg``'s plan (made here from a Config) and make sure the structure cache exists;
        ``datasets``: datasets an earlier run of this process read, reused."""
        plan = cfg if isinstance(cfg, RunPlan) else make_plan(cfg)
        if not Path(cache_dir).is_dir():
            ensure_writable_dir(cache_dir)
        # No write check of an existing cache dir: a complete cache on a read-only mount serves training;
        # writers check their own folder.
        data = load_data(plan, LoadOptions(cache_dir=cache_dir, data_root=data_root, offline=offline,
                                           workers=workers, log=log, datasets=datasets))
        return cls(plan.cfg, plan.level, plan.metric, data.dataset, graphs=data.graphs, cache_path=data.cache_path,
                   edge_data=data.edge_data, cache_dir=cache_dir, log=log, plan=plan)

    def task(self, seed: int, device: str) -> Task[Any]:
        """The level's :class:`~xmask_cli.engine.tasks.base.Task` for ``seed`` (which also draws random splits).

        Raises:
            ConfigError: the model needs a dense path (``model.outside_support:
                eps``, or a learned bias on a plain head) where only a sparse
                one fits or one is requested.
        """
        try:
            return self._task(seed, device)
        except PathRefused as exc:
            raise ConfigError(str(exc)) from None

    def _task(self, seed: int, device: str) -> Task[Any]:
        return LEVELS[self.level].build(self, seed, device, sparse_refusal(self.cfg.model))

    def model_config(self, task: Task[Any]) -> ModelConfig:
        """The :class:`ModelConfig` this experiment's model takes on ``task`` (dimensions from the level's task)."""
        fields = LEVELS[self.level].model_fields(self, task)
        return _model_config(self.cfg, self.level, dataset=self.dataset, **fields, **self.edge_fields())

    def edge_fields(self) -> dict[str, str | tuple[int, ...]]:
        """``edge_encoding`` and ``edge_dims`` of the cache's edge section, for a model with an ``edge`` bias
        (nothing otherwise)."""
        if "edge" not in model_needs(self.cfg) or self.cache_path is None:
            return {}
        with StructureCache(self.cache_path) as cache:
            encoding, dims = cache.edge_coding()
        return {"edge_encoding": encoding, "edge_dims": dims}

    def features(self) -> dict[str, Any] | None:
        """The node features the model reads (``GraphSet.feature_info``); None for image sets and edge files."""
        if not isinstance(self.graphs, GraphSet):
            return None
        out = self.graphs.feature_info().to_dict()
        if self.cfg.model.node_struct != "none":
            out["node_struct"] = struct_info(self.graphs, self.cfg.model.node_struct, self.cfg.structure.rrwp.steps)
        return out

    def run_name(self) -> str:
        """``run.name``, or ``<dataset>-<level>`` (the plan's, when loaded from one)."""
        return self.plan.name if self.plan is not None else run_name(self.cfg, self.level)
