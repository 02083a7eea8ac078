"""Checkpoints read back as their types: a run's own files pass, a damaged field is refused naming the file."""
from __future__ import annotations

import json

import pytest
import torch

from tests.engine.training.test_loop import ToyTask, _fit
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training.checkpoint import check_best, check_last
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.errors import RunNotFoundError

LAST_KEYS = ["model", "optimizer", "scheduler", "rng", "epoch", "best", "best_loss", "best_epoch", "bad_epochs",
             "config"]


@pytest.fixture
def toy_run(tmp_path) -> RunDir:
    _fit(ToyTask(), tmp_path / "run")
    return RunDir(tmp_path / "run")


def test_a_run_s_checkpoints_read_back_whole_and_in_their_written_order(toy_run):
    last, best = toy_run.load_last(), toy_run.load_best()
    assert list(last) == LAST_KEYS  # the order torch.save pickled: the file's bytes follow it
    assert list(best) == ["model", "epoch", "val", "val_loss", "config"]
    assert last["epoch"] == 2 and set(last["model"]) == {"weight", "bias"} and isinstance(last["config"], str)
    # Both record the run's settings as config.json holds them (config.json adds the session's environment).
    saved = {k: v for k, v in toy_run.load_config().items() if k != "environment"}
    assert json.loads(best["config"]) == saved


def test_a_checkpoint_written_before_best_loss_and_config_still_reads(toy_run):
    state = toy_run.load_checkpoint(RunDir.LAST)
    del state["best_loss"], state["config"]
    assert "config" not in check_last(state, toy_run.path / RunDir.LAST)


@pytest.mark.parametrize("key, value, needle", [
    ("model", {"weight": [1.0]}, "'model' is not a mapping of parameter names to tensors"),
    ("epoch", "2", "'epoch' is not an integer"),
    ("optimizer", [], "'optimizer' is not a state mapping"),
    ("scaler", 1.0, "'scaler' is not a state mapping"),
    ("rng", {"torch": "x"}, "'rng' is not the random generators' state"),
    ("config", {"train": {}}, "'config' is not JSON text"),
    ("best_epoch", "1", "its selection state"),
    ("bad_epochs", None, "its selection state"),
])
def test_a_damaged_last_checkpoint_is_refused_naming_it(toy_run, key, value, needle):
    path = toy_run.path / RunDir.LAST
    toy_run.save_checkpoint({**toy_run.load_checkpoint(RunDir.LAST), key: value}, RunDir.LAST)
    with pytest.raises(RunNotFoundError) as info:
        toy_run.load_last()
    assert str(info.value).startswith(f"checkpoint {path} is damaged (") and needle in str(info.value)
    assert info.value.exit_code == 6


def test_resume_from_a_damaged_last_checkpoint_is_refused(toy_run):
    state = toy_run.load_checkpoint(RunDir.LAST)
    toy_run.save_checkpoint({**state, "rng": None}, RunDir.LAST)
    cfg = TrainConfig(epochs=4, lr=0.05, warmup_epochs=0, patience=10)
    with pytest.raises(RunNotFoundError, match="'rng' is not the random generators' state"):
        fit(ToyTask(), torch.nn.Linear(2, 1), cfg, toy_run, model_config={"toy": 1}, resume=True)


@pytest.mark.parametrize("change, needle", [
    ({"val": "0.5"}, "'val' is not a number"),
    ({"val_loss": [0.1]}, "'val_loss' is not a number"),
    ({"epoch": 1.0}, "'epoch' is not an integer"),
    ({"config": {"train": {}}}, "'config' is not JSON text"),
])
def test_a_damaged_best_checkpoint_is_refused_naming_it(toy_run, change, needle):
    state = {**toy_run.load_checkpoint(RunDir.BEST), **change}
    with pytest.raises(RunNotFoundError, match=needle):
        check_best(state, toy_run.path / RunDir.BEST)
