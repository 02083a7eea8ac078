"""``xmask tune``: an Optuna study over a preset's ``tune:`` space, then the best configuration on fresh seeds.

Example::

    cfg = resolve("mutag", ["train.epochs=20"])
    result = run_study(cfg, TuneOptions(trials=20, seeds=[0, 1, 2], final_seeds=list(range(10))))
    print(result.best.value, result.final.parts["test"].mean)

The study lives in ``<runs>/<study>/``: ``study.db`` (SQLite, unless
``storage`` names another Optuna storage URL), one folder per trial under
``trials/``, the final runs under ``final/``, and the outputs of
:mod:`xmask_cli.tune.outputs`. The parts: :mod:`~xmask_cli.tune.options`
(how to search), :mod:`~xmask_cli.tune.narrow` (``--set`` on a searched key),
:mod:`~xmask_cli.tune.folder` (the folder, checked before any trial),
:mod:`~xmask_cli.tune.storage` (the storage and its heartbeat),
:mod:`~xmask_cli.tune.identity` (a study refuses other settings),
:mod:`~xmask_cli.tune.pruning`, :mod:`~xmask_cli.tune.search` (the loop) and
:mod:`~xmask_cli.tune.objective` (one trial).

Trials: ``trials`` is how many this process runs, so N processes on one
study run the sum. With ``resume`` the study is continued up to ``trials``
finished trials in all. A study without trials starts with the preset's own
values (trial 0), with or without ``resume``. Reproducible: the TPE sampler of
trial ``n`` is seeded with ``(sampler_seed, n)``, so one process replays the same study.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.trial import FrozenTrial, TrialState

from xmask_cli.config import Config
from xmask_cli.engine.data import DatasetMemo
from xmask_cli.engine.experiment import check_config
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import HIGHER_IS_BETTER
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.errors import UsageError, XMaskError
from xmask_cli.tune import outputs
from xmask_cli.tune.folder import check_study_folder, folder_lock
from xmask_cli.tune.identity import earlier_digests, identity, identity_diff
from xmask_cli.tune.narrow import fixed_note, narrow_space
from xmask_cli.tune.objective import TrialSetup, best_trial, epoch_stride, run_trial
from xmask_cli.tune.options import TuneOptions, parse_duration, study_dir
from xmask_cli.tune.pruning import PRUNE_WARMUP_EPOCHS, PRUNERS, make_pruner
from xmask_cli.tune.search import fail_reason, finished, interrupted, optimize, sampler
from xmask_cli.tune.space import Param, check_space, decode, start_point, with_values
from xmask_cli.tune.storage import fail_stale, open_storage

__all__ = ["TuneOptions", "run_study", "optimize", "make_pruner", "parse_duration", "study_dir", "PRUNERS",
           "best_config", "open_study", "DEFAULT_FOLDS"]

#: Outer folds ``tune --folds F`` uses when the preset sets no ``data.folds`` (Errica et al.'s K).
DEFAULT_FOLDS = 10


@dataclasses.dataclass(frozen=True)
class _Search:
    """What opening a study needs beside its name and folder (one study's settings)."""

    url: str
    direction: Literal["minimize", "maximize"]
    identity: dict[str, Any]
    earlier: set[str] | frozenset[str]
    start: dict[str, Any]  # trial 0: the preset's values of the searched keys (Optuna's raw parameters)
    stride: int
    warmup: int


def open_study(name: str, folder: Path, opts: TuneOptions, search: _Search,
               log: Callable[[str], None] = lambda m: None) -> optuna.Study:
    """Create or load the study (under the folder's lock), refuse one made with other settings, and queue the
    preset's own values as trial 0 when the study has no trials (with or without ``--resume``).

    Raises:
        UsageError: the storage is no Optuna study, or the study was made with other settings.
    """
    with folder_lock(folder):
        storage = open_storage(search.url, None if opts.storage else folder / "study.db", log)
        study = optuna.create_study(study_name=name, storage=storage, direction=search.direction,
                                    sampler=sampler(opts.sampler_seed, 0),
                                    pruner=make_pruner(opts.pruner, stride=search.stride, warmup_epochs=search.warmup),
                                    load_if_exists=True)
        saved = study.user_attrs.get("xmask")
        diff = [] if saved is None else identity_diff(saved, search.identity, search.earlier)
        if diff:
            shown = ", ".join(diff[:8]) + (f" and {len(diff) - 8} more" if len(diff) > 8 else "")
            raise UsageError(f"study '{name}' in {search.url} was made with another {shown} (preset, tune space, "
                             f"--seeds or metric); use the same settings, or another --study")
        if saved != search.identity:  # new, or the same search in an earlier version's form: written in today's
            study.set_user_attr("xmask", search.identity)
        if study.direction.name.lower() != search.direction:
            raise UsageError(f"study '{name}' in {search.url} {study.direction.name.lower()}s; this metric needs "
                             f"{search.direction}")
        if not study.trials and search.start and opts.trials:
            # Inside the lock: of two processes opening a new study, one queues trial 0.
            study.enqueue_trial(search.start, skip_if_exists=True)
            log(f"trial 0 runs the preset's own values of {len(search.start)} of the "
                f"{len(search.identity['space'])} searched keys")
    return study


def best_config(cfg: Config, params: list[Param], best: FrozenTrial, **run: Any) -> Config:
    """The preset with the best trial's values (its ``tune:`` section dropped)."""
    return with_values(cfg, decode(params, best.params), run=run)


def _checked(cfg: Config, opts: TuneOptions) -> tuple[Config, list[Param], str, str, list[str]]:
    """The options and space checked, ``--set`` keys taken out of it: ``(cfg, params, level, metric, those keys)``."""
    if opts.trials < 0:
        raise UsageError(f"--trials must be >= 0, got {opts.trials}")
    if opts.pruner not in PRUNERS:
        raise UsageError(f"--pruner must be one of {', '.join(PRUNERS)}, got '{opts.pruner}'")
    cfg, pinned = narrow_space(cfg, opts.fixed)
    params = check_space(cfg, full=True)
    if not params and pinned:
        raise UsageError(f"--set fixes every searched key ({', '.join(pinned)}): nothing is left to search; "
                         f"leave one out of --set, or use xmask train")
    if not params:
        raise UsageError("the preset has no tune: section (the search space); add one, e.g. "
                         "tune: {train.lr: {float: [1.0e-4, 1.0e-2], log: true}} (see docs/tune.md)")
    level, metric = check_config(cfg)
    if opts.folds:
        cfg = _with_folds(cfg, opts.folds, level)
    return cfg, params, level, metric, pinned


def run_study(cfg: Config, opts: TuneOptions, *, log: Callable[[str], None] = lambda m: None) -> outputs.StudySummary:
    """Search ``cfg.tune`` on validation, write the study's outputs, train the best on ``final_seeds``.

    Returns the summary (:class:`~xmask_cli.tune.outputs.StudySummary`; its ``to_json()`` is ``summary.json``).

    Raises:
        UsageError: no ``tune:`` section, a bad option, a study made with other settings, or something other
            than xmask's own files and folders in the study folder (checked before any trial).
        NotWritableError: the study folder cannot be written.
        XMaskError: no trial completed (the outputs are written first).
    """
    cfg, params, level, metric, pinned = _checked(cfg, opts)
    name, folder = study_dir(cfg, opts)
    check_study_folder(folder)
    url = opts.storage or f"sqlite:///{folder.resolve() / 'study.db'}"
    _quiet_optuna()
    stride = epoch_stride(cfg, params)
    search = _Search(url=url, direction="maximize" if HIGHER_IS_BETTER[metric] else "minimize",
                     identity=identity(cfg, params, opts.seeds, metric, opts.folds), earlier=earlier_digests(cfg),
                     start=start_point(cfg, params), stride=stride,
                     warmup=max(PRUNE_WARMUP_EPOCHS, int(cfg.train.patience)))
    study = open_study(name, folder, opts, search, log)
    for key in pinned:  # said once the study is accepted: a refused setup prints its one error line only
        log(fixed_note(cfg, key))
    fail_stale(study)
    if opts.resume:
        done = finished(study)
        todo = max(0, opts.trials - done)
        cut = sum(interrupted(t) for t in study.trials)
        log(f"study '{name}': {done} finished trial(s){f' and {cut} interrupted (not counted)' if cut else ''}; "
            f"running {todo} more to reach {opts.trials}")
    else:
        todo = opts.trials
        log(f"study '{name}' ({url}): {len(study.trials)} trial(s) so far; running {todo}")
    setup = TrialSetup(cfg=cfg, params=params, seeds=list(opts.seeds), metric=metric, study_dir=folder,
                       device=opts.device, cache_dir=opts.cache_dir, data_root=opts.data_root, offline=opts.offline,
                       folds=opts.folds, stride=stride)
    ran = optimize(study, lambda trial: run_trial(trial, setup, prune=opts.pruner != "none"), trials=todo,
                   sampler_seed=opts.sampler_seed, timeout_s=opts.timeout_s, metric=metric, log=log)
    return _finish(study, cfg, params, opts, name=name, folder=folder, url=url, level=level, metric=metric, ran=ran,
                   log=log, datasets=setup.datasets)


def _finish(study: optuna.Study, cfg: Config, params: list[Param], opts: TuneOptions, *, name: str, folder: Path, url: str,
            level: str, metric: str, ran: int, log: Callable[[str], None],
            datasets: DatasetMemo | None = None) -> outputs.StudySummary:
    """Train the best trial on the final seeds (on the dataset the trials read: ``datasets``), write the
    outputs; raise when no trial completed."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    final: outputs.FinalScores | None = None
    best_cfg: Config | None = None
    best = best_trial(study)  # None only without complete trials
    if best is not None:
        best_cfg = best_config(cfg, params, best, root=cfg.run.root, name=f"{name}-best")
        if opts.final_seeds:
            log(f"best trial #{best.number} (val {metric} {best.value:.4f}): training it on seeds "
                f"{opts.final_seeds} and reporting test once")
            final_cfg = best_config(cfg, params, best, root=str(folder), name="final")
            res = train_seeds(final_cfg, list(opts.final_seeds), device=opts.device, cache_dir=opts.cache_dir,
                              data_root=opts.data_root, offline=opts.offline, overwrite=True, parts=PARTS, log=log,
                              datasets=datasets)
            agg = res.aggregate or {}  # None only on a distributed run's other ranks
            final = outputs.FinalScores(trial=best.number, seeds=tuple(opts.final_seeds), run_root=res.run_root,
                                        parts={p: agg[p] for p in PARTS})
    summary = outputs.write_all(study, folder, name=name, url=url, dataset=cfg.data.dataset, level=level,
                                metric=metric, params=params, opts=opts, ran=ran, best_cfg=best_cfg, final=final,
                                log=log, plots=opts.plots)
    if not complete:
        reasons = [r for t in study.trials if (r := fail_reason(t))]
        raise XMaskError(f"study '{name}': no trial completed ({len(study.trials)} trial(s)"
                         + (f"; first failure: {reasons[0]}" if reasons else "") + f"); see {folder / 'trials.csv'}")
    return summary


def _with_folds(cfg: Config, used: int, level: str) -> Config:
    """``cfg`` under the fold protocol (``data.folds``, :data:`DEFAULT_FOLDS` if unset); F must not exceed K.

    Raises:
        UsageError: F larger than ``data.folds``; ConfigError: folds where they do not apply (not graph level, OGB).
    """
    k = cfg.data.folds or DEFAULT_FOLDS
    if used > k:
        raise UsageError(f"--folds {used}: the preset's protocol has data.folds={k} outer folds; give at most {k}")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, folds=k))
    check_config(cfg)  # OGB's official split and non-graph levels refuse folds here, before any trial
    return cfg


def _quiet_optuna() -> None:
    # Optuna's own INFO lines per trial would duplicate ours on stderr.
    import warnings

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
