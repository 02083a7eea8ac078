"""What a study leaves in its folder: ``best.yaml``, ``trials.csv``, ``summary.json`` and PNG plots.

Every file (the PNGs included) goes through the shared atomic writer
(:func:`xmask_cli.fs.atomic_write`): written to a temporary name beside it and moved
into place, with the mode a plain ``open`` gives (0644 under the usual umask), so a
reader (or a killed process) never sees half a file.
"""
from __future__ import annotations

import csv
import io
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xmask_cli.config import Config
from xmask_cli.engine.runs.folder import write_bytes, write_json, write_text
from xmask_cli.engine.training.selection import TRIAL_RULE
from xmask_cli.errors import first_line
from xmask_cli.results import JsonItems, MetricStats
from xmask_cli.tune.objective import best_trial, trial_value
from xmask_cli.tune.search import fail_reason
from xmask_cli.tune.space import Param, decode

if TYPE_CHECKING:  # optuna loads when a study runs
    import optuna

__all__ = ["write_all", "best_yaml", "trials_csv", "write_plots", "PLOTS", "BestTrial", "FinalScores", "StudySummary",
           "TrialCounts"]

#: Plot file -> Optuna matplotlib function name.
PLOTS = {"optimization_history.png": "plot_optimization_history",
         "param_importances.png": "plot_param_importances",
         "parallel_coordinate.png": "plot_parallel_coordinate"}


@dataclass(frozen=True)
class TrialCounts(JsonItems):
    """The study's trials by state, and how many this call ran."""

    total: int
    ran_now: int
    complete: int
    pruned: int
    fail: int
    running: int

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "ran_now": self.ran_now, "complete": self.complete, "pruned": self.pruned,
                "fail": self.fail, "running": self.running}


@dataclass(frozen=True)
class BestTrial(JsonItems):
    """The best complete trial (:func:`~xmask_cli.tune.objective.best_trial`): its value (mean validation
    metric), the rule that chose it, its per-seed record and its searched values."""

    number: int
    value: float
    rule: str
    val_loss_mean: float | None
    val_std: float | None
    val_values: list[float] | None
    best_epochs: list[int] | None
    params: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "value": self.value, "rule": self.rule, "val_loss_mean": self.val_loss_mean,
                "val_std": self.val_std, "val_values": self.val_values, "best_epochs": self.best_epochs,
                "params": dict(self.params)}


@dataclass(frozen=True)
class FinalScores(JsonItems):
    """The best configuration trained on the final seeds: mean ± std of each part (test reported once)."""

    trial: int
    seeds: tuple[int, ...]
    run_root: str
    parts: Mapping[str, MetricStats]

    def to_json(self) -> dict[str, Any]:
        return {"trial": self.trial, "seeds": list(self.seeds), "run_root": self.run_root,
                **{p: stats.to_json() for p, stats in self.parts.items()}}


@dataclass(frozen=True)
class StudySummary(JsonItems):
    """What a study leaves in ``summary.json`` and ``xmask --format json tune`` prints (its :meth:`to_json`)."""

    study: str
    storage: str
    folder: str
    dataset: str
    level: str
    metric: str
    direction: str
    space: Mapping[str, Any]
    seeds: tuple[int, ...]
    sampler: Mapping[str, Any]
    pruner: str
    trials: TrialCounts
    best: BestTrial | None
    final: FinalScores | None
    files: Mapping[str, bool | str]

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "storage": self.storage, "folder": self.folder, "dataset": self.dataset,
                "level": self.level, "metric": self.metric, "direction": self.direction, "space": dict(self.space),
                "seeds": list(self.seeds), "sampler": dict(self.sampler), "pruner": self.pruner,
                "trials": self.trials.to_json(), "best": None if self.best is None else self.best.to_json(),
                "final": None if self.final is None else self.final.to_json(), "files": dict(self.files)}


def best_yaml(best_cfg: Config, *, study: str, trial: int, value: float, metric: str, seeds: list[int]) -> str:
    """A preset holding the best configuration, fully resolved: ``xmask train --preset best.yaml`` runs it."""
    data = best_cfg.to_dict()
    data.pop("tune")
    data["description"] = (f"Best of study '{study}': trial {trial}, mean val {metric} {value:.4f} over seeds "
                           f"{','.join(map(str, seeds))}")
    head = (f"# Written by `xmask tune` (study '{study}', trial {trial}). Reproduce the trial's validation score:\n"
            f"#   xmask train --preset best.yaml --seeds {','.join(map(str, seeds))}\n")
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _cell(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict)) else ("" if v is None else v)


def trials_csv(study: optuna.Study, params: list[Param]) -> str:
    """One row per trial: number, state, value, duration, median epoch seconds, each searched key (blank where
    the trial's architecture does not read it), per-seed validation, failure reason."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = [p.key for p in params]
    w.writerow(["number", "state", "value", "val_std", "duration_s", "epoch_s", *keys, "val_values", "best_epochs", "fail_reason"])
    for t in study.trials:
        values = decode(params, t.params, unread=False)  # a key the trial's architecture did not read: blank
        dur = t.duration.total_seconds() if t.duration is not None else None
        w.writerow([t.number, t.state.name, _cell(t.value), _cell(t.user_attrs.get("val_std")),
                    "" if dur is None else f"{dur:.2f}", _cell(t.user_attrs.get("epoch_s")), *(_cell(values.get(k)) for k in keys),
                    _cell(t.user_attrs.get("val_values")), _cell(t.user_attrs.get("best_epochs")),
                    _cell(fail_reason(t))])
    return buf.getvalue()


def _save_figure(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, bbox_inches="tight", format="png")
    write_bytes(path, buf.getvalue())


def write_plots(study: optuna.Study, folder: Path, log: Callable[[str], None] = lambda m: None) -> dict[str, str]:
    """The three Optuna matplotlib plots as PNGs; a plot that cannot be drawn is skipped with its reason.

    Returns ``{file: "written" | "skipped: <reason>"}``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as ovm

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    status: dict[str, str] = {}
    for fname, fn in PLOTS.items():
        path = folder / fname
        need = 1 if fname == "optimization_history.png" else 2
        if len(done) < need:
            status[fname] = f"skipped: needs {need} completed trial(s), the study has {len(done)}"
        else:
            kwargs: dict[str, Any] = {}
            if fn == "plot_param_importances":  # fANOVA's random forest, seeded: the same study, the same plot
                kwargs["evaluator"] = optuna.importance.FanovaImportanceEvaluator(seed=0)
            try:
                with warnings.catch_warnings():  # matplotlib's notes on flat axes (one value tried) are not ours
                    warnings.simplefilter("ignore", UserWarning)
                    ax = getattr(ovm, fn)(study, **kwargs)
                fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
                if fn == "plot_parallel_coordinate":  # one axis per searched key: widen so the labels stay apart
                    fig.set_size_inches(max(6.4, 1.4 * (len(done[0].params) + 1)), 5.5)
                _save_figure(fig, path)
                plt.close(fig)
                status[fname] = "written"
            except Exception as exc:  # e.g. importances when no parameter varied among completed trials
                plt.close("all")
                status[fname] = f"skipped: {first_line(exc)}"
        if status[fname] != "written":
            path.unlink(missing_ok=True)  # a stale plot from an earlier call would mislead
            log(f"plot {fname} {status[fname]}")
    return status


def write_all(study: optuna.Study, folder: Path, *, name: str, url: str, dataset: str, level: str, metric: str, params: list[Param],
              opts: Any, ran: int, best_cfg: Config | None, final: FinalScores | None,
              log: Callable[[str], None] = lambda m: None, plots: bool = True) -> StudySummary:
    """Write every output of the study into ``folder``; returns the summary (``summary.json``)."""
    from optuna.trial import TrialState

    folder.mkdir(parents=True, exist_ok=True)
    counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
              for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)}
    best = None
    b = best_trial(study) if counts["complete"] and best_cfg is not None else None
    if b is not None and best_cfg is not None:
        best = BestTrial(number=b.number, value=trial_value(b), rule=TRIAL_RULE, val_loss_mean=b.user_attrs.get("val_loss_mean"),
                         val_std=b.user_attrs.get("val_std"), val_values=b.user_attrs.get("val_values"),
                         best_epochs=b.user_attrs.get("best_epochs"), params=decode(params, b.params))
        write_text(folder / "best.yaml", best_yaml(best_cfg, study=name, trial=b.number, value=trial_value(b),
                                                   metric=metric, seeds=list(opts.seeds)))
    write_text(folder / "trials.csv", trials_csv(study, params))
    plotted = write_plots(study, folder, log) if plots else {f: "skipped: not asked for" for f in PLOTS}
    files: dict[str, bool | str] = {"best.yaml": best is not None, "trials.csv": True, "summary.json": True, **plotted}
    summary = StudySummary(
        study=name, storage=url, folder=str(folder), dataset=dataset, level=level, metric=metric,
        direction=study.direction.name.lower(), space={p.key: p.to_dict() for p in params}, seeds=tuple(opts.seeds),
        sampler={"name": "TPESampler", "seed": opts.sampler_seed}, pruner=opts.pruner,
        trials=TrialCounts(total=len(study.trials), ran_now=ran, **counts), best=best, final=final, files=files)
    write_json(folder / "summary.json", summary.to_json())
    return summary


def human_report(con: Any, summary: StudySummary) -> None:
    """The study's result as tables on a rich console (stdout)."""
    from rich.table import Table

    t, m = summary.trials, summary.metric
    head = Table(title=f"study {summary.study} ({summary.dataset}, {summary.level}, {m}) -> "
                       f"{summary.folder}", title_justify="left", show_header=False)
    head.add_column(style="bold")
    head.add_column()
    head.add_row("trials", f"{t.total} ({t.complete} complete, {t.pruned} pruned, {t.fail} failed; "
                           f"{t.ran_now} run now)")
    best = summary.best
    if best:
        head.add_row("best trial", f"#{best.number}: val {m} {best.value:.4f} ± {best.val_std:.4f} "
                                   f"over seeds {','.join(map(str, summary.seeds))}")
        for k, v in best.params.items():
            head.add_row(f"  {k}", json.dumps(v) if isinstance(v, (list, dict)) else str(v))
    con.print(head)
    final = summary.final
    if final:
        ft = Table(title=f"best configuration on final seeds {','.join(map(str, final.seeds))} "
                         f"({len(final.seeds)} seeds, mean ± population std)", title_justify="left")
        for col in ("train", "val", "test"):
            ft.add_column(col, justify="right")
        ft.add_row(*(f"{final.parts[p].mean:.4f} ± {final.parts[p].std:.4f}" for p in ("train", "val", "test")))
        con.print(ft)
    files = ", ".join(f for f, ok in summary.files.items() if ok is True or ok == "written")
    con.print(f"files: {files}", markup=False)
