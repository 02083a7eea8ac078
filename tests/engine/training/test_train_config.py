"""The loop's view of the ``train`` section: the section's values plus the run's seed and device."""
from __future__ import annotations

import dataclasses
import json

import pytest

from xmask_cli.config import TrainSection
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.training.train_config import TrainConfig


def test_from_section_carries_every_train_value_and_adds_seed_and_device():
    cfg = resolve("graph-level", ["train.lr=0.003", "train.epochs=7", "train.optimizer=adam", "train.patience=4"])
    tc = TrainConfig.from_section(cfg.train, seed=11, device="cuda:1")
    assert (tc.lr, tc.epochs, tc.optimizer, tc.patience) == (0.003, 7, "adam", 4)  # the overrides given
    assert (tc.seed, tc.device) == (11, "cuda:1")
    for f in dataclasses.fields(TrainSection):
        assert getattr(tc, f.name) == getattr(cfg.train, f.name), f.name


def test_defaults_are_the_sections():
    default, section = TrainConfig(), TrainSection()
    for f in dataclasses.fields(TrainSection):
        assert getattr(default, f.name) == getattr(section, f.name), f.name
    assert (default.seed, default.device) == (0, "cpu")


def test_to_dict_saves_what_changes_a_runs_numbers():
    cfg = resolve("graph-level", ["train.loader_workers=2", "train.log_cache_mb=5"])
    tc = TrainConfig.from_section(cfg.train, seed=3, device="cpu")
    saved = tc.to_dict()
    # The keys only the tasks read (workers, the log-mask cache, loggers) are left out.
    expected = {f.name for f in dataclasses.fields(TrainSection)} - {"loader_workers", "log_cache_mb", "loggers"}
    assert set(saved) == expected | {"seed", "device"}
    assert saved["seed"] == 3 and saved["lr"] == cfg.train.lr and saved["epochs"] == cfg.train.epochs
    assert json.loads(json.dumps(saved)) == saved  # JSON-able as saved with a run


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().lr = 1.0  # type: ignore[misc]
