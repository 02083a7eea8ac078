"""What a run's checkpoints hold, as types, and the check that a file read back holds it.

:func:`~xmask_cli.engine.training.loop.fit` writes two checkpoints per run (:class:`~xmask_cli.engine.runs.folder.RunDir`):
``best.pt`` (:class:`BestCheckpoint`, the state selection restores) and ``last.pt``
(:class:`LastCheckpoint`, everything ``--resume`` needs). Both are plain dicts of tensors and plain values
(``torch.load(..., weights_only=True)``); the optimizer's, scheduler's and gradient scaler's states are
torch's own dicts, kept as torch gives them. A file read back is untrusted: :func:`check_best` and
:func:`check_last` refuse one whose fields are not of these types (a damaged run, exit 6), so readers index
it without further checks.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict, cast

import torch

from xmask_cli.engine.training.selection import Selection
from xmask_cli.errors import RunNotFoundError

__all__ = ["Checkpoint", "BestCheckpoint", "LastCheckpoint", "OptimisationState", "ScalerState", "RngState",
           "check_best", "check_last"]

#: torch's own state dicts (``Optimizer.state_dict()``, ``LambdaLR.state_dict()``, ``GradScaler.state_dict()``).
TorchState = dict[str, object]


class _NumpyTorchRng(TypedDict):
    torch: torch.Tensor
    numpy_keys: torch.Tensor
    numpy_pos: int
    numpy_has_gauss: int
    numpy_cached: float


class RngState(_NumpyTorchRng, total=False):
    """A checkpoint's ``"rng"``: torch's CPU state, numpy's MT19937 state in plain values, and (with CUDA)
    every GPU's state."""

    cuda: list[torch.Tensor]


class ScalerState(TypedDict, total=False):
    """What a checkpoint keeps of the precision: the fp16 gradient scaler's state (nothing without one)."""

    scaler: TorchState


class OptimisationState(ScalerState):
    """What a checkpoint keeps of a run's optimisation: optimizer, warm-up schedule and (fp16) scaler."""

    optimizer: TorchState
    scheduler: TorchState


class Checkpoint(TypedDict):
    """What both checkpoints hold: the model's weights (on CPU) and the epoch they are from."""

    model: dict[str, torch.Tensor]
    epoch: int


class BestCheckpoint(Checkpoint, total=False):
    """``best.pt``: the best epoch's weights, the two validation values selection read there and the run's
    config as JSON text (as ``last.pt``'s; checked against ``config.json`` before the weights are used).
    Checkpoints written before ``config`` was kept lack it."""

    val: float
    val_loss: float | None
    config: str


class _LastRequired(Checkpoint, OptimisationState):
    rng: RngState
    best: float | None
    best_epoch: int
    bad_epochs: int


class LastCheckpoint(_LastRequired, total=False):
    """``last.pt``, written after every epoch: the weights, the optimisation's state, the RNG states after the
    epoch, where selection stood (:class:`~xmask_cli.engine.training.selection.SelectionState`) and the run's config
    as JSON text (what ``--resume`` compares). Checkpoints written before ``best_loss`` and ``config`` were
    kept lack them."""

    best_loss: float | None
    config: str


def _damaged(path: Path, what: str) -> RunNotFoundError:
    return RunNotFoundError(f"checkpoint {path} is damaged ({what}); train again with --overwrite")


def _is_number(x: object, *, none: bool = False) -> bool:
    return (x is None and none) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _check_common(state: Mapping[str, object], path: Path) -> None:
    model = state.get("model")
    if not (isinstance(model, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                            for k, v in model.items())):
        raise _damaged(path, "'model' is not a mapping of parameter names to tensors")
    if not isinstance(state.get("epoch"), int) or isinstance(state.get("epoch"), bool):
        raise _damaged(path, "'epoch' is not an integer")


def check_best(state: dict[str, object], path: Path) -> BestCheckpoint:
    """``state`` (``best.pt`` as loaded) as a :class:`BestCheckpoint`.

    Raises:
        RunNotFoundError: a field is missing or not of the type :func:`~xmask_cli.engine.training.loop.fit` writes.
    """
    _check_common(state, path)
    for key in ("val", "val_loss"):
        if key in state and not _is_number(state[key], none=True):
            raise _damaged(path, f"{key!r} is not a number")
    if "config" in state and not isinstance(state["config"], str):
        raise _damaged(path, "'config' is not JSON text")
    return cast(BestCheckpoint, state)  # its fields are the ones checked above


def _rng_ok(rng: object) -> bool:
    if not isinstance(rng, dict):
        return False
    cuda = rng.get("cuda", [])
    return (isinstance(rng.get("torch"), torch.Tensor) and isinstance(rng.get("numpy_keys"), torch.Tensor)
            and isinstance(rng.get("numpy_pos"), int) and isinstance(rng.get("numpy_has_gauss"), int)
            and _is_number(rng.get("numpy_cached"))
            and isinstance(cuda, list) and all(isinstance(t, torch.Tensor) for t in cuda))


def check_last(state: dict[str, object], path: Path) -> LastCheckpoint:
    """``state`` (``last.pt`` as loaded) as a :class:`LastCheckpoint`.

    Raises:
        RunNotFoundError: a field is missing or not of the type :func:`~xmask_cli.engine.training.loop.fit` writes.
    """
    _check_common(state, path)
    for key in ("optimizer", "scheduler"):
        if not isinstance(state.get(key), dict):
            raise _damaged(path, f"{key!r} is not a state mapping")
    if "scaler" in state and not isinstance(state["scaler"], dict):
        raise _damaged(path, "'scaler' is not a state mapping")
    if not _rng_ok(state.get("rng")):
        raise _damaged(path, "'rng' is not the random generators' state")
    if "config" in state and not isinstance(state["config"], str):
        raise _damaged(path, "'config' is not JSON text")
    try:
        Selection.from_checkpoint(state)
    except (RunNotFoundError, KeyError):
        raise _damaged(path, "its selection state (best, best_loss, best_epoch, bad_epochs) is not what a run "
                             "writes") from None
    return cast(LastCheckpoint, state)  # its fields are the ones checked above
