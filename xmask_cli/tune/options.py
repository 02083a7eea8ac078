"""How ``xmask tune`` searches (:class:`TuneOptions`) and where its study lives (:func:`study_dir`)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from xmask_cli.config import Config
from xmask_cli.engine.runs.plan import run_name
from xmask_cli.errors import UsageError

__all__ = ["TuneOptions", "parse_duration", "study_dir"]


@dataclass(frozen=True)
class TuneOptions:
    """How to search (see ``xmask tune --help``).

    ``fixed``: dotted keys the user set outside the preset (``--set model.hidden=16``); a searched key among
    them is taken out of the space (:func:`~xmask_cli.tune.narrow.narrow_space`), so every trial keeps that value.
    """

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
    data_root: str | os.PathLike[str] | None = None
    offline: bool | None = None
    plots: bool = True  # False: no PNGs (a worker whose plots another process draws; tests)
    folds: int = 0  # > 0: a trial trains the first F outer folds of data.folds and scores their inner holdouts
    fixed: tuple[str, ...] = ()


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
