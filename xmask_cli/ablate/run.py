"""The ablation's runs: every variant over the seeds (and outer folds), trained through ``xmask train``'s sweep,
then the table.

Each variant is the base config plus a few overrides (:mod:`xmask_cli.ablate.variants`); every (variant,
seed) runs as ``xmask train`` runs it (same splits, validation-only selection) into
``<out>/runs/<name>-<variant>/<seed>/``. With ``folds`` = K (graph level) it runs as ``xmask train --folds
K``: the same sweep, one run per seed and outer fold in ``<seed>/fold-<i>/``, the folds fixed by the labels,
K and the seed, so every variant sees the same folds. A seed whose runs all hold their ``summary.json`` is
read back, not retrained; any other goes through the sweep with ``resume``: a finished fold trains no
further epoch, a killed one goes on from its ``last.pt``, the rest train. A variant that fails is reported
in its own row and the others still run, except ``full`` refused for a setting (a ConfigError, exit 2: more
folds than a class holds, ...): every delta needs it. (``full`` locked by another ablation's process is
reported in its row: the other process trains it.)
"""
from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xmask_cli.ablate.table import csv_text, mean_std, with_deltas
from xmask_cli.ablate.variants import VARIANTS, parse_variants, variant_overrides
from xmask_cli.config import Config
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs import sweep
from xmask_cli.engine.runs.data import DatasetMemo
from xmask_cli.engine.runs.folder import RunDir, write_json, write_text
from xmask_cli.engine.runs.plan import make_plan
from xmask_cli.engine.training.selection import RULE
from xmask_cli.errors import ConfigError, UsageError
from xmask_cli.fs import check_writable, refuse_links
from xmask_cli.results_ablation import AblationResult, AblationRow

__all__ = ["run_ablation"]


@dataclass(frozen=True)
class _Ablation:
    """What every variant of one ablation is trained with (:func:`run_ablation`'s arguments, checked)."""

    preset: str | None
    overrides: list[str]
    base: Config
    name: str
    seeds: list[int]
    out_dir: Path
    cache_dir: Path
    data_root: str | os.PathLike | None
    offline: bool | None
    device: str
    log: Callable[[str], None]
    debug: bool
    datasets: DatasetMemo


def _folds_override(folds: int | None) -> list[str]:
    """``--folds K`` as the override it stands for (``data.folds=K``, checked by the config as train's is)."""
    if folds is None:
        return []
    if isinstance(folds, bool) or not isinstance(folds, int):
        raise UsageError(f"folds: expected an int >= 2 or None, got {folds!r}")
    return [f"data.folds={folds}"]


def run_ablation(
    preset: str | None,
    overrides: list[str],
    *,
    seeds: list[int],
    out_dir: Path,
    cache_dir: Path,
    variants: list[str] | None = None,
    folds: int | None = None,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    device: str = "cpu",
    log: Callable[[str], None] = lambda m: None,
    debug: bool = False,
) -> AblationResult:
    """Train every variant over ``seeds`` (with ``folds`` = K, over each seed's K outer folds, as ``xmask
    train --folds K``; ``--set data.folds=K`` in ``overrides`` is the same); write ``ablation.csv`` /
    ``ablation.json`` in ``out_dir``.

    Returns:
        an :class:`~xmask_cli.results_ablation.AblationResult` (its ``to_json()`` is ``ablation.json``):
        one :class:`~xmask_cli.results_ablation.AblationRow` per variant with ``status`` (``ok`` or
        ``failed``), ``error``, ``runs`` (per run: seed, or seed and fold), ``val_mean/std`` and
        ``test_mean/std`` over the runs, ``delta_test`` (test mean minus that of ``full``), ``paired`` (the
        difference from ``full`` run by run) and ``reused`` (seeds read back instead of trained).

    Raises:
        ConfigError: what ``xmask train`` refuses before any work: ``folds`` below 2, folds on a level other
            than graph or on a dataset with an official split; and (from ``full``, before any run folder
            is made) more folds than the dataset's graphs or its smallest class holds.
    """
    base = resolve(preset, [*overrides, *_folds_override(folds)])
    # train's own checks, once, before any folder: the level and metric, the run-stage rules (data.folds
    # on a level other than graph, or on a dataset with an official split), the seeds.
    plan = make_plan(base, seeds)
    names = parse_variants(",".join(variants) if variants else None, base)
    # Before the first variant trains: the folder and the two tables it ends with (each variant's sweep checks
    # its own run folders).
    check_writable(out_dir, "output folder", "pass another --out")
    if out_dir.is_dir():
        refuse_links(out_dir, ("ablation.json", "ablation.csv"), "output folder")
    ctx = _Ablation(preset, [*overrides, *_folds_override(folds)], base, plan.name, list(plan.seeds), out_dir,
                    cache_dir, data_root, offline, device, log, debug, DatasetMemo())
    rows = with_deltas([_variant_row(variant, ctx) for variant in names])
    result = AblationResult(dataset=base.data.dataset if plan.level != "edge" else "edges", level=plan.level,
                            metric=plan.metric, seeds=tuple(plan.seeds), name=plan.name, selection=RULE,
                            preset=preset, overrides=tuple(overrides), out_dir=str(out_dir), rows=rows,
                            folds=base.data.folds)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "ablation.json", result.to_json())
    write_text(out_dir / "ablation.csv", csv_text(result))
    return result


def _variant_row(variant: str, ctx: _Ablation) -> AblationRow:
    """One variant over the seeds (finished runs read back); a failure is kept in the row, not raised, but
    for ``full`` refused for a setting."""
    runs: dict[str, dict[str, float]] = {}
    reused: list[int] = []
    error = None
    try:
        cfg = resolve(ctx.preset, [*ctx.overrides, *variant_overrides(variant, ctx.base),
                                   f"run.name={ctx.name}-{variant}"])
        for seed in ctx.seeds:
            seed_runs, read_back = _seed_runs(variant, cfg, seed, ctx)
            runs.update(seed_runs)
            if read_back:
                reused.append(seed)
    except Exception as exc:  # one variant's failure must not hide the others' results
        if variant == "full" and isinstance(exc, ConfigError):
            raise  # the base config cannot run (more folds than a class holds, ...): every delta needs it
        if ctx.debug:
            traceback.print_exc()
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ctx.log(f"ablation {variant} failed: {error}")
    (val_mean, val_std), (test_mean, test_std) = (mean_std([m[part] for m in runs.values()])
                                                  for part in ("val", "test"))
    return AblationRow(variant=variant, description=VARIANTS[variant], status="ok" if error is None else "failed",
                       error=error, runs=runs, reused=tuple(reused), val_mean=val_mean, val_std=val_std,
                       test_mean=test_mean, test_std=test_std)


def _run_keys(seed: int, folds: int) -> list[str]:
    """A seed's runs, as folders under the variant's: ``"0"``, or ``"0/fold-0"`` .. ``"0/fold-<K-1>"``."""
    return [str(seed)] if not folds else [f"{seed}/fold-{i}" for i in range(folds)]


def _seed_runs(variant: str, cfg: Config, seed: int, ctx: _Ablation) -> tuple[dict[str, dict[str, float]], bool]:
    """One seed's runs of a variant (``{run key: metrics}``) and whether they were all read back.

    Every run finished: each ``summary.json`` read back (no dataset read). Otherwise the seed goes through
    ``xmask train``'s sweep with ``resume`` (its finished folds train no epoch, a killed one goes on).
    """
    folder = ctx.out_dir / "runs" / f"{ctx.name}-{variant}"  # cfg's run.name
    keys = _run_keys(seed, cfg.data.folds)
    if all((folder / key / RunDir.SUMMARY).is_file() for key in keys):
        return {key: dict(RunDir(folder / key, create=False).read_summary().metrics) for key in keys}, True
    ctx.log(f"ablation {variant}: seed {seed}" + (f", {cfg.data.folds} folds" if cfg.data.folds else ""))
    # Through the module, read per call: a substitute for train_seeds (tests) is seen.
    result = sweep.train_seeds(cfg, [seed], device=ctx.device, cache_dir=ctx.cache_dir, data_root=ctx.data_root,
                               offline=ctx.offline, run_root=ctx.out_dir / "runs", resume=True, log=ctx.log,
                               datasets=ctx.datasets)
    return {_run_keys(seed, 0)[0] if s.fold is None else f"{seed}/fold-{s.fold}": dict(s.metrics)
            for s in result.runs}, False
