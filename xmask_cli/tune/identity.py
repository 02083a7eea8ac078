"""What makes two processes' studies the same search: a study remembers its identity and refuses another.

The identity is the resolved preset (less what changes no trial's numbers), the search space, the seeds and
the metric. Studies made by earlier versions of xmask hold a digest of the config instead; their settings are
recognised in each form those versions wrote.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from xmask_cli.config import Config
from xmask_cli.engine.training.resume import config_diff, new_setting_at_default
from xmask_cli.engine.training.train_config import TrainConfig
from xmask_cli.tune.space import Param

__all__ = ["identity", "earlier_digests", "identity_diff"]

#: Config keys that do not change a trial's numbers: what the preset says of itself, where the data sits (as a
#: run resumes elsewhere), and the ``train`` keys only the tasks read (``TrainConfig.NOT_SAVED``).
_NOT_IDENTITY = ("description", "data.root", *(f"train.{k}" for k in sorted(TrainConfig.NOT_SAVED)))


def _search_config(cfg: Config) -> dict[str, Any]:
    """The resolved config as a study remembers it: less ``tune`` (the space is kept apart), ``run`` and
    :data:`_NOT_IDENTITY`."""
    base = {k: v for k, v in cfg.to_dict().items() if k not in ("tune", "run")}
    for key in _NOT_IDENTITY:
        section, _, leaf = key.partition(".")
        (base[section] if leaf else base).pop(leaf or section, None)
    return base


def identity(cfg: Config, params: list[Param], seeds: list[int], metric: str, folds: int = 0) -> dict[str, Any]:
    """The study's identity: the preset (space apart), space, seeds, metric (and ``folds`` when set)."""
    out: dict[str, Any] = {"config": _search_config(cfg), "space": {p.key: p.to_dict() for p in params},
           "seeds": list(seeds), "metric": metric}
    if folds:  # only when set: studies made without folds keep their identity
        out["folds"] = folds
    return json.loads(json.dumps(out))  # as the storage gives it back (tuples become lists)


def _config_digest(cfg: Config, drop: frozenset[str]) -> str:
    """``config_sha256`` as earlier versions wrote it (a digest, not the config): the resolved config less
    ``tune``, ``run`` and the ``train`` keys in ``drop``."""
    base = cfg.to_dict()
    base.pop("tune")
    base.pop("run")
    base["train"] = {k: v for k, v in base["train"].items() if k not in drop}
    return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:16]


def earlier_digests(cfg: Config) -> set[str]:
    """This config's ``config_sha256`` in each form earlier versions wrote: every ``train`` key, without
    ``log_cache_mb``, and without the ``NOT_SAVED`` keys."""
    # train.loggers is younger than every digest form: none of them held it.
    forms = (frozenset({"loggers"}), frozenset({"log_cache_mb", "loggers"}),
             frozenset({"loader_workers", "log_cache_mb", "loggers"}))
    return {_config_digest(cfg, drop) for drop in forms}


def identity_diff(saved: dict[str, Any], now: dict[str, Any], earlier: set[str] | frozenset[str]) -> list[str]:
    """Where a study's saved identity differs from this process's (``[]``: the same search). Config keys are
    compared as a run's resume compares them: a setting added to xmask since, left at its default, is no
    difference. An identity of an earlier version holds a digest, which must be one of ``earlier``."""
    diff = [k for k in ("space", "seeds", "metric") if saved.get(k) != now[k]]
    if "config" not in saved:
        return (["config_sha256"] if saved.get("config_sha256") not in earlier else []) + diff
    was, cur = {"config": saved["config"]}, {"config": now["config"]}
    return [k.removeprefix("config.") for k in config_diff(was, cur) if not new_setting_at_default(k, was, cur)] + diff
