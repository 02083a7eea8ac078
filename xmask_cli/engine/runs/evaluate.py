"""Reading a finished run back: its folder, its experiment and best model, its metrics again.

What ``xmask eval`` and ``xmask explain`` call; a run is rebuilt from the
resolved config it saved, so it sees the same data, split and structure as
when it was trained.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, cast

import torch

from xmask_cli.config import Config
from xmask_cli.config_resolve import build
from xmask_cli.engine.runs.experiment import Experiment
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.training.loop import score
from xmask_cli.engine.training.resume import check_record
from xmask_cli.errors import RunNotFoundError, first_line
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.results import EvalResult

__all__ = ["read_run", "rebuild_run", "evaluate_run", "evaluate_loaded", "run_precision", "SavedRun", "SavedTrain"]


class _SavedTrainRequired(TypedDict):
    seed: int


class SavedTrain(_SavedTrainRequired, total=False):
    """A run's saved ``train`` settings (:meth:`~xmask_cli.engine.training.train_config.TrainConfig.to_dict`): the
    fields read back are typed; runs written before ``train.precision`` existed lack it (fp32)."""

    precision: str


class _SavedRunRequired(TypedDict):
    config: dict[str, object]
    model: dict[str, object]
    train: SavedTrain


class SavedRun(_SavedRunRequired, total=False):
    """A run's ``config.json`` as :func:`read_run` checked it: the resolved preset (``config``), the model's
    hyper-parameters, the train settings, the task level and where the data was read. The file holds more
    (the task's ``describe()``, ``metric``, ...), unchecked."""

    level: str
    data_root: str | None


def _check_saved(saved: dict[str, object], path: Path) -> SavedRun:
    """``config.json`` as :class:`SavedRun` (RunNotFoundError, naming it, where a field is not of its type)."""
    train, model = saved.get("train"), saved.get("model")
    if not (isinstance(saved["config"], dict) and isinstance(model, dict) and isinstance(train, dict)
            and isinstance(train.get("seed"), int)):
        raise RunNotFoundError(f"{path} is damaged (no config/model/train.seed as `xmask train` "
                               f"writes them); restore it, or train again with --overwrite")
    precision, level, data_root = train.get("precision", "fp32"), saved.get("level", ""), saved.get("data_root")
    for key, value, ok in (("train.precision", precision, isinstance(precision, str)),
                           ("level", level, isinstance(level, str)),
                           ("data_root", data_root, data_root is None or isinstance(data_root, str))):
        if not ok:
            raise RunNotFoundError(f"{path} is damaged ({key!r} is {value!r}, not what `xmask train` writes there); "
                                   f"restore it, or train again with --overwrite")
    return cast(SavedRun, saved)  # the fields it names are the ones checked above


def read_run(run_dir: str | os.PathLike[str]) -> tuple[RunDir, SavedRun]:
    """A run folder and its saved ``config.json``, checked to hold what ``eval``/``explain`` read.

    Raises:
        RunNotFoundError: no folder, no ``config.json`` / ``best.pt``, a config without the resolved preset,
            or one whose fields are not of the types a run writes.
    """
    run = RunDir(run_dir) if Path(run_dir).is_dir() else None
    if run is None or not (run.path / RunDir.CONFIG).is_file() or not run.has_checkpoint(RunDir.BEST):
        raise RunNotFoundError(f"{run_dir}: not a run directory (needs config.json and best.pt; "
                               f"runs live in runs/<name>/<seed>/)")
    saved = run.load_config()
    if "config" not in saved:
        raise RunNotFoundError(f"{run_dir}: config.json has no resolved preset; was it written by `xmask train`?")
    return run, _check_saved(saved, run.path / RunDir.CONFIG)


def rebuild_run(
    run: RunDir,
    saved: SavedRun,
    *,
    cache_dir: Path,
    data_root: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    device: str = "cpu",
    log: Callable[[str], None] = lambda m: None,
) -> tuple[Experiment, Task[Any], XMaskNet]:
    """Rebuild a run's experiment, task (same seed, same split) and best model, in eval mode.

    ``best.pt`` is read first and its recorded config checked against ``config.json``
    (:func:`~xmask_cli.engine.training.resume.check_record`) before any data is loaded.
    """
    best = run.load_best()
    warnings: list[str] = []  # said once the weights are known to fit: a refusal stays one line
    check_record(run, RunDir.BEST, best.get("config"), cast("dict[str, object]", saved), warnings.append)
    cfg: Config = build(Config, saved["config"])
    exp = Experiment.load(cfg, cache_dir=cache_dir, offline=offline, log=log,
                          data_root=data_root if data_root is not None else saved.get("data_root"))
    task: Task[Any] = exp.task(int(saved["train"]["seed"]), device)
    try:
        # ModelConfig takes its own keywords' types; a config.json that does not fit fails here, as a best.pt does.
        model = XMaskNet(ModelConfig(**cast("dict[str, Any]", saved["model"]))).to(device)
        model.load_state_dict(best["model"])
    except (TypeError, KeyError, RuntimeError) as exc:  # a config.json and best.pt that do not belong together
        first = first_line(exc)
        raise RunNotFoundError(f"{run.path / RunDir.BEST} does not fit the model in {run.path / RunDir.CONFIG} "
                               f"({first[:200]}); train again with --overwrite") from None
    for line in warnings:
        log(line)
    return exp, task, model.eval()


def run_precision(saved: SavedRun) -> str:
    """The precision a run was scored under: a bf16 run's recorded metrics were scored under bf16 autocast."""
    return saved["train"].get("precision", "fp32")


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    parts: tuple[str, ...] = ("val", "test"),
    device: str = "cpu",
    cache_dir: Path,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> EvalResult:
    """Reload a run's config and best checkpoint and recompute its metrics on ``parts``.

    Returns the recomputed metrics next to the ones ``summary.json`` recorded.

    Raises:
        RunNotFoundError: the folder has no ``config.json`` or ``best.pt``.
    """
    run, saved = read_run(run_dir)
    exp, task, model = rebuild_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                device=device, log=log)
    return evaluate_loaded(run, saved, exp, task, model, parts=parts, device=device)


def evaluate_loaded(run: RunDir, saved: SavedRun, exp: Experiment, task: Task[Any], model: torch.nn.Module, *,
                    parts: tuple[str, ...], device: str) -> EvalResult:
    """:func:`evaluate_run` of a run already rebuilt by :func:`rebuild_run` (``xmask_cli.load_run`` reuses it)."""
    seed = int(saved["train"]["seed"])
    metrics = {part: score(task, model, part, run_precision(saved), device) for part in parts}
    recorded = run.read_summary().metrics if (run.path / RunDir.SUMMARY).is_file() else {}
    return EvalResult(run_dir=str(run.path), dataset=exp.dataset, level=exp.level, metric=exp.metric, seed=seed,
                      metrics=metrics, recorded={p: recorded.get(p) for p in parts},
                      config_sha256=_config_digest(saved))


def _config_digest(saved: SavedRun) -> str:
    """The first 16 hex digits of the SHA-256 of the saved config, less the record of the software it ran on
    (``environment``: two runs of one config on two machines share the digest)."""
    config = {k: v for k, v in saved.items() if k != "environment"}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
