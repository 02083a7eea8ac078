"""``xmask tune``: an Optuna study over a preset's ``tune:`` space, then the best configuration on fresh seeds.

Example::

    cfg = resolve("mutag", ["train.epochs=20"])
    result = run_study(cfg, TuneOptions(trials=20, seeds=[0, 1, 2], final_seeds=list(range(10))))
    print(result.best.value, result.final.parts["test"].mean)

The study lives in ``<runs>/<study>/``: ``study.db`` (SQLite, unless
``storage`` names another Optuna storage URL), one folder per trial under
``trials/``, the final runs under ``final/``, and the outputs of
:mod:`xmask_cli.tune.outputs`.

Trials: ``trials`` is how many this process runs, so N processes on one
study run the sum. With ``resume`` the study is continued up to ``trials``
finished trials in all, and trials a killed process left running are recorded
as failed (``fail_reason``). Reproducible: the TPE sampler of trial ``n`` is
seeded with ``(sampler_seed, n)``, so one process replays the same study.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xmask_cli.config import Config
from xmask_cli.engine.experiment import check_config
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import HIGHER_IS_BETTER
from xmask_cli.engine.plan import run_name
from xmask_cli.engine.resume import config_diff, new_setting_at_default
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.engine.train_config import TrainConfig
from xmask_cli.errors import UsageError, XMaskError, first_line
from xmask_cli.fs import open_nofollow, refuse_links
from xmask_cli.tune import outputs
from xmask_cli.tune.objective import STEP_STRIDE, TrialFailed, TrialSetup, best_trial, run_trial
from xmask_cli.tune.space import Param, check_space, decode, start_point, with_values

__all__ = ["TuneOptions", "run_study", "optimize", "make_pruner", "parse_duration", "study_dir", "PRUNERS"]

PRUNERS = ("median", "none")
#: Median pruner: no pruning before this many finished trials, nor in each seed's first epochs: at least
#: this many, and the preset's ``train.patience`` when longer (a run slow to start is not a bad run).
PRUNE_STARTUP_TRIALS = 5
PRUNE_WARMUP_EPOCHS = 10


@dataclass(frozen=True)
class TuneOptions:
    """How to search (see ``xmask tune --help``)."""

    trials: int
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    final_seeds: list[int] = field(default_factory=lambda: list(range(10)))
    timeout_s: float | None = None
    study: str | None = None
    storage: str | None = None
    runs_dir: Path | None = None
    resume: bool = False
    sampler_seed: int = 0
    pruner: str = "median"
    device: str = "cpu"
    cache_dir: Path = Path("cache")
    data_root: str | os.PathLike | None = None
    offline: bool | None = None
    plots: bool = True  # False: no PNGs (a worker whose plots another process draws; tests)
    folds: int = 0  # > 0: a trial trains the first F outer folds of data.folds and scores their inner holdouts


def parse_duration(text: str | None) -> float | None:
    """``"90"`` / ``"90s"`` / ``"30m"`` / ``"2h"`` / ``"1h30m"`` -> seconds; None stays None.

    Raises:
        UsageError: anything else, or zero.
    """
    if text is None:
        return None
    t = text.strip().lower()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not m or not any(m.groups()):
        raise UsageError(f"--timeout '{text}': expected a duration such as 90s, 30m, 2h or 1h30m")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if total <= 0:
        raise UsageError(f"--timeout '{text}': must be longer than zero")
    return total


def _check_name(name: str) -> str:
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise UsageError(f"--study '{name}': one folder name, no '/', '..' or absolute path (use --runs-dir for the location)")
    return name


def study_dir(cfg: Config, opts: TuneOptions) -> tuple[str, Path]:
    """``(study name, folder)``: ``--study`` or ``<dataset>-<level>-tune``, under ``--runs-dir`` or ``run.root``."""
    name = _check_name(opts.study or f"{run_name(cfg)}-tune")
    return name, Path(opts.runs_dir or cfg.run.root) / name


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


def _identity(cfg: Config, params: list[Param], opts: TuneOptions, metric: str) -> dict[str, Any]:
    """What makes two processes' studies the same search: the preset (space apart), space, seeds, metric."""
    identity = {"config": _search_config(cfg), "space": {p.key: p.to_dict() for p in params},
                "seeds": list(opts.seeds), "metric": metric}
    if opts.folds:  # only when set: studies made without folds keep their identity
        identity["folds"] = opts.folds
    return json.loads(json.dumps(identity))  # as the storage gives it back (tuples become lists)


def _config_digest(cfg: Config, drop: frozenset[str]) -> str:
    """``config_sha256`` as xmask wrote it before 2026-12-02 (a digest, not the config): the resolved config
    less ``tune``, ``run`` and the ``train`` keys in ``drop``."""
    base = cfg.to_dict()
    base.pop("tune")
    base.pop("run")
    base["train"] = {k: v for k, v in base["train"].items() if k not in drop}
    return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:16]


def _earlier_digests(cfg: Config) -> set[str]:
    """This config's ``config_sha256`` in each form earlier versions wrote: every ``train`` key, without
    ``log_cache_mb`` (added 2026-12-02), and without the ``NOT_SAVED`` keys (2026-12-02, for a few hours)."""
    # train.loggers is younger than every digest form: none of them held it.
    forms = (frozenset({"loggers"}), frozenset({"log_cache_mb", "loggers"}),
             frozenset({"loader_workers", "log_cache_mb", "loggers"}))
    return {_config_digest(cfg, drop) for drop in forms}


def _identity_diff(saved: dict[str, Any], identity: dict[str, Any], earlier: set[str] | frozenset[str]) -> list[str]:
    """Where a study's saved identity differs from this process's (``[]``: the same search). Config keys are
    compared as a run's resume compares them: a setting added to xmask since, left at its default, is no
    difference. An identity from before 2026-12-02 holds a digest, which must be one of ``earlier``."""
    diff = [k for k in ("space", "seeds", "metric") if saved.get(k) != identity[k]]
    if "config" not in saved:
        return (["config_sha256"] if saved.get("config_sha256") not in earlier else []) + diff
    was, now = {"config": saved["config"]}, {"config": identity["config"]}
    return [k.removeprefix("config.") for k in config_diff(was, now) if not new_setting_at_default(k, was, now)] + diff


#: The files a study folder holds (SQLite's side files included): never written through a planted link.
STUDY_FILES = (".tune.lock", "study.db", "study.db-journal", "study.db-wal", "study.db-shm", "best.yaml",
               "trials.csv", "summary.json", "optimization_history.png", "param_importances.png",
               "parallel_coordinate.png")


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Serialise study creation: two processes creating one SQLite file at once race on its tables."""
    folder.mkdir(parents=True, exist_ok=True)
    refuse_links(folder, STUDY_FILES, "study folder")
    fd = open_nofollow(folder / ".tune.lock", os.O_RDWR | os.O_CREAT, "study folder")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _storage(url: str, db: Path | None = None) -> Any:
    """Optuna's storage at ``url``; ``db``: the study folder's own ``study.db`` when no ``--storage`` was given."""
    import optuna

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Parallel writers wait for SQLite's lock instead of failing after the default 5 s.
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    try:
        return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as exc:  # a malformed URL, an unreachable server, a missing driver, a file that is no database
        if db is not None:  # the user named no storage: name the file, not an option they did not pass
            raise UsageError(f"{db} is not an SQLite study ({first_line(exc)}); move it away, or pick another "
                             f"--study or --runs-dir") from None
        raise UsageError(f"--storage '{url}': {first_line(exc)}") from None


def _sampler(seed: int, number: int) -> Any:
    import optuna

    # One seed per trial number: a single process replays the study, parallel workers draw different values.
    # Hashed: MT19937 seeded with neighbouring integers gives correlated early draws (0.715, 0.720 ...).
    mixed = int.from_bytes(hashlib.sha256(f"xmask-tune:{seed}:{number}".encode()).digest()[:4], "little")
    return optuna.samplers.TPESampler(seed=mixed)


def make_pruner(name: str, warmup_epochs: int = PRUNE_WARMUP_EPOCHS) -> Any:
    """``median`` (the default of ``xmask tune``) or ``none``.

    The median pruner compares a trial with the others at the same seed and epoch, never within a seed's
    first ``warmup_epochs`` epochs: Optuna's own warm-up counts steps from the first seed only (later seeds
    report from ``i * STEP_STRIDE``), which would let a slow-starting second seed be cut at its epoch 0.
    """
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    return _seed_warmup_pruner()(max(0, int(warmup_epochs)))


@functools.cache
def _seed_warmup_pruner() -> type:
    """:class:`optuna.pruners.MedianPruner` with a warm-up of ``warmup_epochs`` in every seed (made on first
    use: optuna loads lazily)."""
    import optuna

    class SeedWarmupPruner(optuna.pruners.MedianPruner):
        def __init__(self, warmup_epochs: int):
            super().__init__(n_startup_trials=PRUNE_STARTUP_TRIALS, n_warmup_steps=0)
            self.warmup_epochs = warmup_epochs

        def prune(self, study: Any, trial: Any) -> bool:
            step = trial.last_step
            if step is None or step % STEP_STRIDE < self.warmup_epochs:
                return False
            return bool(super().prune(study, trial))

    return SeedWarmupPruner


def _open_study(name: str, url: str, direction: str, identity: dict[str, Any], opts: TuneOptions,
                folder: Path, earlier: set[str] | frozenset[str] = frozenset(),
                warmup: int = PRUNE_WARMUP_EPOCHS) -> tuple[Any, Any]:
    import optuna

    with _folder_lock(folder):
        storage = _storage(url, None if opts.storage else folder / "study.db")
        study = optuna.create_study(study_name=name, storage=storage, direction=direction,
                                    sampler=_sampler(opts.sampler_seed, 0),
                                    pruner=make_pruner(opts.pruner, warmup),
                                    load_if_exists=True)
        saved = study.user_attrs.get("xmask")
        diff = [] if saved is None else _identity_diff(saved, identity, earlier)
        if diff:
            shown = ", ".join(diff[:8]) + (f" and {len(diff) - 8} more" if len(diff) > 8 else "")
            raise UsageError(f"study '{name}' in {url} was made with another {shown} (preset, tune space, "
                             f"--seeds or metric); use the same settings, or another --study")
        if saved != identity:  # new, or the same search in an earlier version's form: written in today's
            study.set_user_attr("xmask", identity)
        if study.direction.name.lower() != direction:
            raise UsageError(f"study '{name}' in {url} {study.direction.name.lower()}s; this metric needs {direction}")
    return study, storage


#: A running trial's process writes ``alive = {host, pid, at}`` into the trial every this many seconds.
HEARTBEAT_S = 30.0
#: ``--resume`` takes a running trial for abandoned when its last heartbeat is older than this.
STALE_AFTER_S = 4 * HEARTBEAT_S


def _alive_record() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}


@contextlib.contextmanager
def _heartbeat(trial: Any) -> Iterator[None]:
    """Keep ``trial``'s ``alive`` record fresh while the block runs (a thread: the trial itself trains)."""
    stop = threading.Event()
    trial.set_user_attr("alive", _alive_record())

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                trial.set_user_attr("alive", _alive_record())
            except Exception:  # a storage hiccup must not kill the trial; the next beat retries
                pass

    thread = threading.Thread(target=beat, name=f"xmask-tune-heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _abandoned(trial: Any, now: float) -> str | None:
    """Why a RUNNING trial has no live process (None: it is still being worked on, here or elsewhere)."""
    alive = trial.user_attrs.get("alive")
    if not isinstance(alive, dict) or not isinstance(alive.get("at"), (int, float)):
        return "no heartbeat recorded"
    if alive.get("host") == socket.gethostname() and isinstance(alive.get("pid"), int) \
            and alive["pid"] != os.getpid() and not _pid_alive(alive["pid"]):
        return f"its process {alive['pid']} is gone"
    if now - float(alive["at"]) > STALE_AFTER_S:
        return f"no heartbeat for {now - float(alive['at']):.0f} s"
    return None


def _fail_stale(study: Any, storage: Any, log: Callable[[str], None]) -> int:
    """Record trials left RUNNING by a stopped process as failed (``--resume``); trials that another live
    process is running (on this host: its pid exists; elsewhere: a heartbeat within :data:`STALE_AFTER_S`)
    are left to it."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    now, failed = time.time(), 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = _abandoned(t, now)
        if why is None:
            alive = t.user_attrs["alive"]
            log(f"trial {t.number}: running in process {alive.get('pid')} on {alive.get('host')}; left to it")
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        storage.set_trial_user_attr(trial_id, "fail_reason", "interrupted: its process stopped before the trial "
                                                             f"finished (found running at --resume: {why})")
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        log(f"trial {t.number}: was left running by a stopped process ({why}); recorded as failed")
        failed += 1
    return failed


def _interrupted(trial: Any) -> bool:
    """A trial its process stopped (Ctrl-C, or found running at ``--resume``): failed, but not by its configuration."""
    return str(trial.user_attrs.get("fail_reason", "")).startswith("interrupted")


def _finished(study: Any) -> int:
    """Trials that count towards ``--trials`` under ``--resume``: complete, pruned and failed ones, except those
    a stopped process interrupted (they say nothing of their configuration; the budget is trials searched)."""
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    return sum(not _interrupted(t) for t in done)


def optimize(study: Any, objective: Callable[[Any], float], *, trials: int, sampler_seed: int = 0,
             timeout_s: float | None = None, metric: str = "value",
             log: Callable[[str], None] = lambda m: None) -> int:
    """The search loop of ``xmask tune`` (also what ``benchmarks/tune_study.py`` runs for the PyG peers).

    Asks up to ``trials`` trials (none started after ``timeout_s``), each drawn by a
    TPE sampler seeded with ``(sampler_seed, trial number)``, and tells Optuna
    how each ended: its value, pruned (``optuna.TrialPruned``), or failed with
    ``fail_reason`` (:class:`TrialFailed`). Ctrl-C or any other exception records
    the running trial as failed and stops the loop. Returns how many trials ran.
    """
    import optuna
    from optuna.trial import TrialState

    start, ran = time.monotonic(), 0
    while ran < trials:
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            log(f"timeout ({timeout_s:.0f}s) reached after {ran} trial(s): no new trial started")
            break
        trial = study.ask()
        study.sampler = _sampler(sampler_seed, trial.number)  # drawn lazily, in suggest_*: seeded by number
        t0 = time.monotonic()
        try:
            with _heartbeat(trial):
                value = objective(trial)
        except optuna.TrialPruned as exc:
            study.tell(trial, state=TrialState.PRUNED)
            log(f"trial {trial.number}: {exc} [{time.monotonic() - t0:.1f}s]")
        except TrialFailed as exc:
            trial.set_user_attr("fail_reason", str(exc))
            study.tell(trial, state=TrialState.FAIL)
            log(f"trial {trial.number}: failed: {exc}")
        except BaseException as exc:  # Ctrl-C or a study-wide error: record this trial, then stop
            trial.set_user_attr("fail_reason", f"interrupted: {first_line(exc)}" if isinstance(exc, KeyboardInterrupt)
                                else f"study stopped: {first_line(exc)}")
            study.tell(trial, state=TrialState.FAIL)
            raise
        else:
            study.tell(trial, value)
            shown = ", ".join(f"{k}={v}" for k, v in trial.user_attrs.get("values", trial.params).items())
            spread = trial.user_attrs.get("val_std")
            best = best_trial(study)  # reads every trial from storage: once a trial
            log(f"trial {trial.number}: val {metric} {value:.4f}" + (f" ± {spread:.4f}" if spread is not None else "")
                + f" ({shown}) [{time.monotonic() - t0:.1f}s]; best so far #{best.number} {best.value:.4f}")
        ran += 1
    return ran


def best_config(cfg: Config, params: list[Param], best: Any, **run: Any) -> Config:
    """The preset with the best trial's values (its ``tune:`` section dropped)."""
    return with_values(cfg, decode(params, best.params), run=run)


def run_study(cfg: Config, opts: TuneOptions, *, log: Callable[[str], None] = lambda m: None) -> outputs.StudySummary:
    """Search ``cfg.tune`` on validation, write the study's outputs, train the best on ``final_seeds``.

    Returns the summary (:class:`~xmask_cli.tune.outputs.StudySummary`; its ``to_json()`` is ``summary.json``).

    Raises:
        UsageError: no ``tune:`` section, a bad option, or a study made with other settings.
        XMaskError: no trial completed (the outputs are written first).
    """
    from optuna.trial import TrialState

    if opts.trials < 0:
        raise UsageError(f"--trials must be >= 0, got {opts.trials}")
    if opts.pruner not in PRUNERS:
        raise UsageError(f"--pruner must be one of {', '.join(PRUNERS)}, got '{opts.pruner}'")
    params = check_space(cfg, full=True)
    if not params:
        raise UsageError("the preset has no tune: section (the search space); add one, e.g. "
                         "tune: {train.lr: {float: [1.0e-4, 1.0e-2], log: true}} (see docs/tune.md)")
    level, metric = check_config(cfg)
    if opts.folds:
        cfg = _with_folds(cfg, opts.folds, level)
    name, folder = study_dir(cfg, opts)
    url = opts.storage or f"sqlite:///{folder.resolve() / 'study.db'}"
    direction = "maximize" if HIGHER_IS_BETTER[metric] else "minimize"
    _quiet_optuna()
    warmup = max(PRUNE_WARMUP_EPOCHS, int(cfg.train.patience))
    study, storage = _open_study(name, url, direction, _identity(cfg, params, opts, metric), opts, folder,
                                 _earlier_digests(cfg), warmup)
    if opts.resume:
        _fail_stale(study, storage, log)
        done = _finished(study)
        todo = max(0, opts.trials - done)
        cut = sum(_interrupted(t) for t in study.trials)
        log(f"study '{name}': {done} finished trial(s){f' and {cut} interrupted (not counted)' if cut else ''}; "
            f"running {todo} more to reach {opts.trials}")
    else:
        todo = opts.trials
        log(f"study '{name}' ({url}): {len(study.trials)} trial(s) so far; running {todo}")
        start = start_point(cfg, params)
        if not study.trials and start and todo:
            study.enqueue_trial(start)  # trial 0 is the preset itself; keys outside the space are drawn
            log(f"trial 0 runs the preset's own values of {len(start)} of the {len(params)} searched keys")
    setup = TrialSetup(cfg=cfg, params=params, seeds=list(opts.seeds), metric=metric, study_dir=folder,
                       device=opts.device, cache_dir=opts.cache_dir, data_root=opts.data_root, offline=opts.offline,
                       folds=opts.folds)
    ran = optimize(study, lambda trial: run_trial(trial, setup, prune=opts.pruner != "none"), trials=todo,
                   sampler_seed=opts.sampler_seed, timeout_s=opts.timeout_s, metric=metric, log=log)

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    final: outputs.FinalScores | None = None
    best_cfg: Config | None = None
    if complete:
        best = best_trial(study)
        best_cfg = best_config(cfg, params, best, root=cfg.run.root, name=f"{name}-best")
        if opts.final_seeds:
            log(f"best trial #{best.number} (val {metric} {best.value:.4f}): training it on seeds "
                f"{opts.final_seeds} and reporting test once")
            final_cfg = best_config(cfg, params, best, root=str(folder), name="final")
            res = train_seeds(final_cfg, list(opts.final_seeds), device=opts.device, cache_dir=opts.cache_dir,
                              data_root=opts.data_root, offline=opts.offline, overwrite=True, parts=PARTS, log=log)
            agg = res.aggregate or {}  # None only on a distributed run's other ranks
            final = outputs.FinalScores(trial=best.number, seeds=tuple(opts.final_seeds), run_root=res.run_root,
                                        parts={p: agg[p] for p in PARTS})
    summary = outputs.write_all(study, folder, name=name, url=url, dataset=cfg.data.dataset, level=level, metric=metric, params=params,
                                opts=opts, ran=ran, best_cfg=best_cfg, final=final, log=log,
                                plots=opts.plots)
    if not complete:
        reasons = [t.user_attrs.get("fail_reason") for t in study.trials if t.user_attrs.get("fail_reason")]
        raise XMaskError(f"study '{name}': no trial completed ({len(study.trials)} trial(s)"
                         + (f"; first failure: {reasons[0]}" if reasons else "") + f"); see {folder / 'trials.csv'}")
    return summary


#: Outer folds ``tune --folds F`` uses when the preset sets no ``data.folds`` (Errica et al.'s K).
DEFAULT_FOLDS = 10


def _with_folds(cfg: Config, used: int, level: str) -> Config:
    """``cfg`` under the fold protocol (``data.folds``, :data:`DEFAULT_FOLDS` if unset); F must not exceed K.

    Raises:
        UsageError: F larger than ``data.folds``; ConfigError: folds where they do not apply (not graph level, OGB).
    """
    import dataclasses

    k = cfg.data.folds or DEFAULT_FOLDS
    if used > k:
        raise UsageError(f"--folds {used}: the preset's protocol has data.folds={k} outer folds; give at most {k}")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, folds=k))
    check_config(cfg)  # OGB's official split and non-graph levels refuse folds here, before any trial
    return cfg


def _quiet_optuna() -> None:
    # Optuna's own INFO lines per trial would duplicate ours on stderr.
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
