"""What resuming a run needs beyond its weights: the global RNG states, the config check, the folder opened.

:func:`~xmask_cli.engine.training.loop.fit` saves :func:`rng_state` in every
checkpoint and restores it with :func:`set_rng_state`, so a resumed run draws
the same numbers as an uninterrupted one; :func:`check_resumable` refuses a
resume whose resolved config differs from the run's saved one in anything but
:data:`RESUME_MAY_DIFFER` (or a setting added since, left at its default);
:func:`open_run` gives the checkpoint to resume from, or a fresh folder. :func:`check_record` refuses
a checkpoint whose recorded config is not its run folder's ``config.json`` (copied from another run).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import torch

from xmask_cli.config import Config
from xmask_cli.config_arch import resolve_arch
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training.checkpoint import LastCheckpoint, RngState
from xmask_cli.engine.training.threads import launch_numba_pool
from xmask_cli.engine.training.train_config import TrainConfig
from xmask_cli.errors import RunNotFoundError, UsageError
from xmask_cli.jsonfile import parse_checked
from xmask_cli.versions import environment


def rng_state() -> RngState:
    """Torch and numpy global RNG states as tensors and plain values (``weights_only``-safe)."""
    # legacy=True (the default): the MT19937 tuple, never the dict form its type also allows.
    name, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float],
                                              np.random.get_state(legacy=True))
    state: RngState = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
                       "numpy_pos": int(pos), "numpy_has_gauss": int(has_gauss), "numpy_cached": float(cached)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: RngState) -> None:
    """Restore what :func:`rng_state` saved (a resumed run draws what an uninterrupted one would)."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy_pos"], state["numpy_has_gauss"], state["numpy_cached"]))


_MISSING = object()
#: The key of config.json that records the software, device and threads (:func:`xmask_cli.versions.environment`)
#: of the session that last wrote it: the first, or the last ``--resume``.
ENVIRONMENT = "environment"
#: Keys of a run's config that may change on ``--resume``: the epoch budget, and where it runs.
# loggers watch a run and the full-step estimate explains node.mode auto's choice: neither changes its numbers
RESUME_MAY_DIFFER = frozenset({"train.epochs", "config.train.epochs", "train.device", "data_root",
                               "config.train.loggers", "node.full_step_mb"})


def config_diff(a: object, b: object, prefix: str = "") -> list[str]:
    """Dotted keys at which two JSON-like configs differ (a key missing on one side differs)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            out += config_diff(a.get(k, _MISSING), b.get(k, _MISSING), key)
        return out
    return [] if a == b else [prefix]


def _norm(c: dict[str, object]) -> dict[str, object]:
    # The cache file's key names its content (the dataset's fingerprint and the structure); the folder it sits
    # in may move.
    path = c.get("cache_path")
    if isinstance(path, str):
        c = {**c, "cache_path": Path(path).name}
    # A run written before model.arch was recorded built the architecture its other keys name: the same run.
    model = c.get("model")
    if isinstance(model, dict) and "arch" not in model and "experts" in model:
        c = {**c, "model": {**model, "arch": resolve_arch(model, str(model.get("task")), note=lambda line: None)}}
    return c


def _differing(saved: dict[str, object], now: dict[str, object]) -> list[str]:
    """Dotted keys (as saved: preset keys under ``config.``) at which two run configs differ in what a run trains:
    not in :data:`RESUME_MAY_DIFFER`, the ``tune:`` section (a search space), the software record
    (:data:`ENVIRONMENT`: the session that wrote config.json, not the run's settings) or a setting added since
    at its default."""
    return [k for k in config_diff(_norm(saved), _norm(now))
            if k not in RESUME_MAY_DIFFER and not k.startswith(("config.tune", ENVIRONMENT))
            and not new_setting_at_default(k, saved, now)]


def check_resumable(run: RunDir, saved: dict[str, object], now: dict[str, object]) -> None:
    """Refuse (UsageError) to resume ``run`` when its saved config differs from ``now`` beyond what may change."""
    # A preset key is saved twice (under config. and, for train keys, as the resolved train.): name each once,
    # as the user writes it in --set.
    diff = list(dict.fromkeys(k.removeprefix("config.") for k in _differing(saved, now)))
    if diff:
        shown = ", ".join(diff[:8]) + (f" and {len(diff) - 8} more" if len(diff) > 8 else "")
        raise UsageError(f"cannot resume {run.path}: the resolved config differs from the run's in {shown}; "
                         f"resume with the same settings (only train.epochs may change), or start over with --overwrite")


def _shown(value: object) -> str:
    return "(absent)" if value is _MISSING else json.dumps(value, sort_keys=True)[:80]


def check_record(run: RunDir, name: str, record: str | None, config: dict[str, object],
                 warn: Callable[[str], None] = lambda m: None, against: str = RunDir.CONFIG) -> None:
    """Refuse a checkpoint of ``run`` whose recorded config (``record``: its ``"config"``) is not the run's
    ``config.json`` (``config``; ``against`` names where it was read), beyond what ``--resume`` may change: a
    checkpoint copied in from another run (other seed, head powers, mask scale, data) is never used as this one's.

    A checkpoint written before checkpoints recorded their config (``record`` None) is taken as the run's,
    with one ``warning:`` line through ``warn``.

    Raises:
        RunNotFoundError: the record disagrees (exit 6), naming the first setting and both values, or is damaged.
    """
    path = run.path / name
    if record is None:
        warn(f"warning: {path} records no config (written by an older xmask); it is taken to be the run's in "
             f"{run.path / against}")
        return
    saved = parse_checked(record, f"the config saved in {path}")
    # What the checkpoint recorded is compared; a top-level field only config.json holds (written beside the
    # run's settings, not one of them) is not.
    diff = [k for k in _differing(saved, config) if k.split(".")[0] in saved]
    if diff:
        key = diff[0]
        more = f" (and {len(diff) - 1} more settings)" if len(diff) > 1 else ""
        raise RunNotFoundError(f"{path} is not this run's checkpoint: it was trained with {key.removeprefix('config.')}"
                               f" = {_shown(_lookup(_norm(saved), key))}, {run.path / against} says "
                               f"{_shown(_lookup(_norm(config), key))}{more}; restore the run's own {name}, or train "
                               f"again with --overwrite")


def _lookup(tree: object, key: str) -> object:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def new_setting_at_default(key: str, saved: dict[str, object], now: dict[str, object]) -> bool:
    """A setting added to xmask after the run was written (absent from its config) that this run
    leaves at its default: no difference, so older runs still resume."""
    if _lookup(saved, key) is not _MISSING:
        return False
    defaults = {"train": TrainConfig().to_dict(), "config": Config().to_dict()}
    default = _lookup(json.loads(json.dumps(defaults)), key)
    return default is not _MISSING and default == _lookup(now, key)


def _check_records(run: RunDir, last_record: str | None) -> None:
    """``last.pt``'s record against ``config.json``, and ``best.pt``'s against ``config.json`` (or, where that
    file is damaged and is to be written anew from ``last.pt``, against ``last.pt``'s record)."""
    try:
        config = run.load_config() if (run.path / RunDir.CONFIG).is_file() else None
    except RunNotFoundError:  # damaged: last.pt's record decides, and config.json is written anew
        config = None
    if config is not None:
        check_record(run, RunDir.LAST, last_record, config)
    if run.has_checkpoint(RunDir.BEST):
        if config is not None:
            check_record(run, RunDir.BEST, run.load_best().get("config"), config)
        elif last_record is not None:
            check_record(run, RunDir.BEST, run.load_best().get("config"),
                         parse_checked(last_record, f"the config saved in {run.path / RunDir.LAST}"),
                         against=RunDir.LAST)


def open_run(run: RunDir, config: dict[str, object], resume: bool, overwrite: bool) -> LastCheckpoint | None:
    """Prepare the run folder (main process only): ``last.pt`` to resume from, or a fresh folder holding
    ``config.json``.

    Raises:
        UsageError: the folder holds a run and neither ``resume`` nor ``overwrite`` is given, or ``resume``
            finds another config.
    """
    now = json.loads(json.dumps(config))  # JSON round trip so tuples compare equal to the lists read back
    if resume and run.has_checkpoint(RunDir.LAST):
        ckpt = run.load_last()
        # The config the checkpoint was trained with (older checkpoints: config.json).
        saved = (parse_checked(ckpt["config"], f"the config saved in {run.path / RunDir.LAST}")
                 if "config" in ckpt else run.load_config())
        _check_records(run, ckpt.get("config"))
        check_resumable(run, saved, now)
        run.truncate_metrics(ckpt["epoch"] + 1)
        run.save_config(_recorded(config))  # the same run; only the epoch budget may have changed
        return ckpt
    if run.has_run_files():
        if resume and (run.path / RunDir.CONFIG).is_file():
            # Killed before its first checkpoint: start over, but only as the same run.
            check_resumable(run, run.load_config(), now)
        elif not (resume or overwrite):
            raise UsageError(f"run folder {run.path} exists; use --resume to continue it or --overwrite to replace it")
        run.remove_run_files()
    run.save_config(_recorded(config))
    return None


def _recorded(config: dict[str, object]) -> dict[str, object]:
    """``config`` as config.json holds it: with the software, device and threads it runs on (ENVIRONMENT)."""
    train = config.get("train")
    device = train.get("device") if isinstance(train, dict) else None
    launch_numba_pool()  # the recorded torch thread count then holds for the rest of the run
    return {**config, ENVIRONMENT: environment(device if isinstance(device, str) else "cpu")}
