"""The search loop of ``xmask tune``: Optuna's ``Study.optimize`` with a sampler seeded per trial number,
each trial's end (value, pruned, failed with its reason) logged, and the trial counts ``--resume`` reads.

Every trial xmask fails itself carries a ``fail_reason``; a trial failed without one was failed by
Optuna's heartbeat check (its process stopped, :mod:`xmask_cli.tune.storage`), and is *interrupted*
like a trial stopped with Ctrl-C: it says nothing of its configuration.
"""
from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator

import optuna
from optuna.samplers import TPESampler
from optuna.trial import FrozenTrial, TrialState

from xmask_cli.errors import first_line
from xmask_cli.tune.objective import TrialFailed, best_trial

__all__ = ["sampler", "optimize", "fail_reason", "interrupted", "finished", "STALE_REASON"]

#: The reason shown for a trial Optuna's heartbeat check failed (its process was killed).
STALE_REASON = "interrupted: its process stopped before the trial finished (its heartbeat stopped)"


def sampler(seed: int, number: int) -> TPESampler:
    """The TPE sampler of trial ``number``: a single process replays the study, parallel workers draw
    different values."""
    # Hashed: MT19937 seeded with neighbouring integers gives correlated early draws (0.715, 0.720 ...).
    mixed = int.from_bytes(hashlib.sha256(f"xmask-tune:{seed}:{number}".encode()).digest()[:4], "little")
    return optuna.samplers.TPESampler(seed=mixed)


def fail_reason(trial: FrozenTrial) -> str | None:
    """Why a failed trial failed (None for a trial that did not fail)."""
    if trial.state != TrialState.FAIL:
        return trial.user_attrs.get("fail_reason")
    return trial.user_attrs.get("fail_reason") or STALE_REASON


def interrupted(trial: FrozenTrial) -> bool:
    """A trial its process stopped (Ctrl-C, or killed: failed by the heartbeat check), not its configuration."""
    return trial.state == TrialState.FAIL and str(fail_reason(trial)).startswith("interrupted")


def finished(study: optuna.Study) -> int:
    """Trials that count towards ``--trials`` under ``--resume``: complete, pruned and failed ones, except those
    a stopped process interrupted (they say nothing of their configuration; the budget is trials searched)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    return sum(not interrupted(t) for t in done)


@contextlib.contextmanager
def _optuna_silent() -> Iterator[None]:
    """Optuna logs each failed trial with its traceback: xmask logs one line of its own instead."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def _recording(objective: Callable[[optuna.Trial], float], study: optuna.Study, sampler_seed: int,
               notes: dict[int, str]) -> Callable[[optuna.Trial], float]:
    """``objective`` with the trial's sampler seeded by its number and the reason of its end recorded."""

    def run(trial: optuna.Trial) -> float:
        study.sampler = sampler(sampler_seed, trial.number)  # drawn lazily, in suggest_*: seeded by number
        try:
            return objective(trial)
        except optuna.TrialPruned as exc:
            notes[trial.number] = str(exc)
            raise
        except TrialFailed as exc:
            trial.set_user_attr("fail_reason", str(exc))
            raise
        except BaseException as exc:  # Ctrl-C or a study-wide error: Optuna records the trial failed, then stops
            trial.set_user_attr("fail_reason", f"interrupted: {first_line(exc)}" if isinstance(exc, KeyboardInterrupt)
                                else f"study stopped: {first_line(exc)}")
            raise

    return run


def optimize(study: optuna.Study, objective: Callable[[optuna.Trial], float], *, trials: int, sampler_seed: int = 0,
             timeout_s: float | None = None, metric: str = "value",
             log: Callable[[str], None] = lambda m: None) -> int:
    """The search loop of ``xmask tune`` (also what ``benchmarks/tune_study.py`` runs for the PyG peers).

    Runs up to ``trials`` trials through ``study.optimize`` (none started after ``timeout_s``; Optuna's
    heartbeat, when the storage has one, runs beside each trial), each drawn by a TPE sampler seeded with
    ``(sampler_seed, trial number)``. A trial ends with its value, pruned (``optuna.TrialPruned``), or failed
    with ``fail_reason`` (:class:`TrialFailed`); Ctrl-C or any other exception records the running trial as
    failed and stops the loop. Returns how many trials ran.
    """
    notes: dict[int, str] = {}
    ran = [0]
    start = time.monotonic()

    def logged(study: optuna.Study, trial: FrozenTrial) -> None:
        ran[0] += 1
        took = f"[{trial.duration.total_seconds():.1f}s]" if trial.duration is not None else ""
        if trial.state == TrialState.PRUNED:
            log(f"trial {trial.number}: {notes.pop(trial.number, 'pruned')} {took}")
        elif trial.state == TrialState.FAIL:
            log(f"trial {trial.number}: failed: {fail_reason(trial)}")
        else:
            # The drawn keys only: "values" also holds the keys the drawn architecture does not read, at defaults.
            values = trial.user_attrs.get("values", trial.params)
            shown = ", ".join(f"{k}={v}" for k, v in values.items() if k in trial.params)
            spread = trial.user_attrs.get("val_std")
            best = best_trial(study)  # reads every trial from storage: once a trial
            best_note = "" if best is None else f"; best so far #{best.number} {best.value:.4f}"
            log(f"trial {trial.number}: val {metric} {trial.value:.4f}"
                + (f" ± {spread:.4f}" if spread is not None else "")
                + f" ({shown}) {took}{best_note}")

    with _optuna_silent():
        study.optimize(_recording(objective, study, sampler_seed, notes), n_trials=trials, timeout=timeout_s,
                       catch=(TrialFailed,), callbacks=[logged])
    if timeout_s is not None and ran[0] < trials and time.monotonic() - start >= timeout_s:
        log(f"timeout ({timeout_s:.0f}s) reached after {ran[0]} trial(s): no new trial started")
    return ran[0]
