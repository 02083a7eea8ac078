"""Training and trained runs from Python: what ``xmask train`` and ``xmask eval`` do, as functions.

:func:`train` is the function ``xmask train`` calls, so its result's ``to_json()`` is
the json that command prints (``xmask --format json train ...``) for the same
config and seeds. :func:`load_run` reads a run folder back: its model, its
resolved config, predictions and the metrics ``xmask eval`` prints.

Example::

    import xmask_cli
    result = xmask_cli.train("graph-level", dataset="MUTAG", seeds="0-2", train__epochs=20)
    print(result.aggregate["test"].mean)            # and .std, .values: one per seed
    run = xmask_cli.load_run(result.runs[0].run_dir)
    logits, labels = run.predict("test")
"""
from __future__ import annotations

import json
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmask_cli import arguments as args
from xmask_cli.config import Config
from xmask_cli.config_resolve import Override, list_presets, resolve
from xmask_cli.errors import UsageError

if TYPE_CHECKING:  # the heavy modules load on first call: `import xmask_cli` and the CLI's option parsing stay light
    import torch

    from xmask_cli.data.spec import DatasetSpec
    from xmask_cli.engine.dryrun import DryRun
    from xmask_cli.engine.evaluate import SavedRun
    from xmask_cli.engine.experiment import Experiment
    from xmask_cli.engine.plan import RunPlan
    from xmask_cli.engine.runs import RunDir
    from xmask_cli.engine.tasks.base import Task
    from xmask_cli.results import EvalResult, SweepResult

__all__ = ["LoadedRun", "choose_preset", "dry_run", "load_run", "train"]


def _dataset_preset(preset: str | None, dataset: str) -> tuple[str, DatasetSpec]:
    """The preset a ``dataset`` picks (``preset`` itself when given) and the dataset's registry entry."""
    from xmask_cli.data.registry import get_dataset

    spec = get_dataset(dataset)
    if preset is None:
        preset = spec.key if spec.key in list_presets() else f"{spec.level}-level"
    return preset, spec


def choose_preset(preset: str | None, dataset: str | None, overrides: Sequence[str] | None) -> tuple[str, list[str]]:
    """Preset and overrides of a run: ``dataset`` overrides data.dataset and, without a preset, picks the
    dataset's own preset (else its level's); the default is graph-level."""
    out = list(overrides or [])
    if dataset is not None:
        preset, spec = _dataset_preset(preset, dataset)
        out.insert(0, f"data.dataset={json.dumps(spec.ref)}")  # quoted: a folder path
    return preset or "graph-level", out


def _plain(value: Any) -> Any:
    """A Python value as the schema takes it: a path as its text, a tuple as a list, a numpy number as Python's
    (as a shell would pass the path, and as YAML has lists only)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value  # anything else: the schema's check names its type


def _overrides(overrides: Mapping[str, Any] | Sequence[str] | None, dotted: Mapping[str, Any]) -> list[Override]:
    """The overrides in order: ``--set`` texts as given, then ``(dotted key, Python value)`` pairs from a
    mapping and from ``a__b=v`` keywords; a value is passed through, never written as text and parsed back."""
    if isinstance(overrides, str):
        overrides = [overrides]
    out: list[Override] = []
    if isinstance(overrides, Mapping):
        out += [(k, _plain(v)) for k, v in overrides.items()]
    elif overrides is not None:
        out += list(overrides)
    return out + [(k.replace("__", "."), _plain(v)) for k, v in dotted.items()]


def _resolve_config(config: str | os.PathLike | Config | None, dataset: str | None, name: str | None,
                    overrides: list[Override]) -> tuple[Config, DatasetSpec | None]:
    """The run's config: ``config`` (a preset, a path or a Config) with ``dataset``, the overrides and ``name``;
    and ``dataset``'s registry entry when it was looked up to pick the preset (the plan reuses it)."""
    steps = [*overrides, *([] if name is None else [("run.name", name)])]
    if isinstance(config, Config):
        return resolve(None, [*([] if dataset is None else [("data.dataset", dataset)]), *steps],
                       base=config.to_dict()), None
    preset, spec = None if config is None else str(config), None
    if dataset is not None:
        preset, spec = _dataset_preset(preset, dataset)
        steps.insert(0, ("data.dataset", spec.ref))
    return resolve(preset or "graph-level", steps), spec


def train(
    config: str | os.PathLike | Config | None = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    dataset: str | os.PathLike | None = None,
    seeds: int | str | Sequence[int] | None = 0,
    device: str = "auto",
    name: str | None = None,
    runs_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = lambda m: None,
    on_epoch: Callable[[int, dict[str, Any]], None] = lambda seed, row: None,
    on_seed_start: Callable[[int, int], None] = lambda seed, epochs: None,
    on_run_start: Callable[[int, int | None, int], None] = lambda seed, fold, epochs: None,
    **dotted: Any,
) -> SweepResult:
    """Train one run per seed, as ``xmask train`` does; its ``to_json()`` is what ``xmask --format json train`` prints.

    Args:
        config: a preset name (``xmask presets ls``), a preset YAML path, or a
            resolved :class:`~xmask_cli.config.Config`; None: ``dataset``'s preset, else graph-level.
        overrides: ``--set`` overrides, as ``["model.hidden=16"]`` texts or a mapping ``{"model.hidden": 16}``
            whose Python values are passed through (checked as ``--set`` checks its values).
        dataset: ``--dataset``: overrides ``data.dataset`` (and picks the preset when ``config`` is None).
        seeds: one seed, a list, or a sweep text such as ``"0-4"`` (``--seeds``); None: seed 0.
        device: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``.
        name: run name, ``<runs_dir>/<name>/<seed>/`` (default ``<dataset>-<level>``).
        runs_dir, cache_dir, data_root, offline, resume, overwrite: as the CLI options of the same names.
        log: receives the log lines ``xmask train`` writes to stderr.
        on_epoch: called with ``(seed, metrics row)`` after every epoch.
        on_seed_start: called with ``(seed, epochs)`` before each run trains.
        on_run_start: called with ``(seed, fold, epochs)`` before each run trains (fold None without
            ``data.folds``).
        **dotted: more overrides with ``__`` for the dots: ``model__hidden=16``, ``train__epochs=50``.

    Returns:
        a :class:`~xmask_cli.results.SweepResult`: ``name``, ``dataset``, ``level``, ``metric``, ``features``,
        ``seeds``, ``run_root``, ``runs`` (each run's :class:`~xmask_cli.results.RunSummary`) and ``aggregate``
        (``{part: MetricStats(mean, std, values)}``); ``result["runs"]`` reads its JSON (compatibility).

    Raises:
        UsageError: an argument of the wrong type or value (the message starts with its name), before any work.
        XMaskError: the CLI's errors (:mod:`xmask_cli.errors`), each with its exit code.
    """
    from xmask_cli.engine.sweep import train_plan

    for key, fn in (("log", log), ("on_epoch", on_epoch), ("on_seed_start", on_seed_start),
                    ("on_run_start", on_run_start)):
        args.callable_arg(key, fn)
    run = _sweep_args(config, overrides, dataset, seeds, device, name, runs_dir, cache_dir, data_root, offline,
                      resume, overwrite, dotted)
    return train_plan(run.plan, device=run.device, cache_dir=run.cache_dir, data_root=run.data_root,
                      offline=run.offline, resume=run.resume, overwrite=run.overwrite, log=log, on_epoch=on_epoch,
                      on_seed_start=on_seed_start, on_run_start=on_run_start)


def dry_run(
    config: str | os.PathLike | Config | None = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    dataset: str | os.PathLike | None = None,
    seeds: int | str | Sequence[int] | None = 0,
    device: str = "auto",
    name: str | None = None,
    runs_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    data_root: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    **dotted: Any,
) -> DryRun:
    """What :func:`train` with the same arguments would make, read and cost, without writing anything
    (``xmask train --dry-run``): the resolved config, the run folders, the cache file it needs and the
    estimate of stored pairs, parameters and peak memory per step (:mod:`xmask_cli.engine.dryrun`).
    The dataset is read offline."""
    from xmask_cli.engine.dryrun import dry_run as plan

    run = _sweep_args(config, overrides, dataset, seeds, device, name, runs_dir, cache_dir, data_root, True,
                      resume, overwrite, dotted)
    return plan(run.plan, cache_dir=run.cache_dir, data_root=run.data_root, resume=run.resume,
                overwrite=run.overwrite, device=run.device)


@dataclass(frozen=True)
class _Sweep:
    """:func:`train`'s arguments, checked and resolved: the plan (config, dataset entry, level, metric, run
    name and folder, seeds) made once, and how its runs train."""

    plan: RunPlan
    device: str
    cache_dir: Path
    data_root: Path | None
    offline: bool | None
    resume: bool
    overwrite: bool


def _sweep_args(config: Any, overrides: Any, dataset: Any, seeds: Any, device: Any, name: Any, runs_dir: Any,
                cache_dir: Any, data_root: Any, offline: Any, resume: Any, overwrite: Any,
                dotted: Mapping[str, Any]) -> _Sweep:
    """Check :func:`train`'s arguments (each named in its error), then resolve the config, seeds and device into
    the run's plan."""
    from xmask_cli.engine.plan import check_seeds, make_plan, parse_seeds, resolve_device
    from xmask_cli.prepare import resolve_cache_dir

    if not (config is None or isinstance(config, (str, os.PathLike, Config))):
        raise UsageError(f"config: expected a preset name, a preset YAML path or a Config; got {config!r:.80}")
    overrides = args.overrides_arg("overrides", overrides)
    args.optional_path_arg("dataset", dataset)  # a name or a folder; kept as written ("./g" is a folder, "g" a name)
    dataset = None if dataset is None else os.fspath(dataset)
    seed_value = args.seeds_arg("seeds", 0 if seeds is None else seeds)
    device = str(args.str_arg("device", device))
    name = args.str_arg("name", name, optional=True)
    runs_root, cache_root = args.optional_path_arg("runs_dir", runs_dir), args.optional_path_arg("cache_dir", cache_dir)
    data_root = args.optional_path_arg("data_root", data_root)
    offline = args.bool_arg("offline", offline, optional=True)
    resume, overwrite = bool(args.bool_arg("resume", resume)), bool(args.bool_arg("overwrite", overwrite))
    with args.as_parameter("seeds", "--seeds"):  # a text is parsed; a list is checked (bounds, repeats) as it is
        seed_list = parse_seeds(seed_value) if isinstance(seed_value, str) else check_seeds(seed_value)
    with args.as_parameter("device", "--device"):
        device = resolve_device(device)
    cfg, spec = _resolve_config(config, dataset, name, _overrides(overrides, dotted))
    plan = make_plan(cfg, seed_list, run_root=runs_root, spec=spec)
    return _Sweep(plan, device, resolve_cache_dir(cache_root), data_root, offline, resume, overwrite)


@dataclass
class LoadedRun:
    """A finished run read back: its best model in eval mode, resolved config, data and split.

    Attributes:
        path: the run folder, ``runs/<name>/<seed>/``.
        config: the resolved :class:`~xmask_cli.config.Config` the run trained with.
        model: the trained :class:`~xmask_cli.model.network.XMaskNet` (best checkpoint, eval mode).
        level, metric, seed, device: the run's task level, selection metric, seed and the device loaded on.
    """

    path: Path
    config: Config
    model: torch.nn.Module
    level: str
    metric: str
    seed: int
    device: str
    _run: RunDir = field(repr=False)
    _saved: SavedRun = field(repr=False)
    _exp: Experiment = field(repr=False)
    _task: Task[Any] = field(repr=False)

    def predict(self, part: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """``(outputs, targets)`` of ``part`` (``train``, ``val`` or ``test``) of the run's own split.

        Outputs are logits ``[n, classes]`` (graph, node, image levels) or
        predictions in the file's units (edge regression), in the order the
        split lists the items; the run's metric of them is what ``xmask eval`` prints.

        Raises:
            UsageError: a link-prediction run (it scores positive against
                sampled negative pairs: use :meth:`evaluate`), or an unknown part.
        """
        import torch

        from xmask_cli.engine.evaluate import run_precision
        from xmask_cli.engine.precision import autocast
        from xmask_cli.engine.splits import PARTS

        part = args.choice_arg("part", part, PARTS)
        self.model.eval()
        with torch.no_grad(), autocast(run_precision(self._saved), self.device):
            outputs = self._task.outputs(self.model, part)
        if outputs is None:
            raise UsageError(f"a {self.level}-level run has no per-item outputs to predict: use evaluate()")
        return outputs

    def score(self, part: str = "test") -> float:
        """The run's metric on ``part``: the number ``xmask eval --split PART`` prints."""
        from xmask_cli.engine.splits import PARTS

        part = args.choice_arg("part", part, PARTS)
        return float(self.evaluate((part,)).metrics[part])

    def evaluate(self, parts: Sequence[str] = ("val", "test")) -> EvalResult:
        """Metrics recomputed on ``parts`` beside the recorded ones; its ``to_json()`` is what
        ``xmask --format json eval`` prints."""
        from xmask_cli.engine.evaluate import evaluate_loaded
        from xmask_cli.engine.splits import PARTS

        parts = args.strs_arg("parts", parts, choices=PARTS)
        return evaluate_loaded(self._run, self._saved, self._exp, self._task, self.model, parts=tuple(parts),
                               device=self.device)

    def explain(self, graphs: Sequence[int] = (), nodes: Sequence[int] = (), edges: Sequence[Any] = (), *,
                layer: int | None = None, head: int | None = None, query: int | None = None,
                max_nodes: int = 64) -> dict[str, Any]:
        """One ``torch_geometric.explain.Explanation`` per target, by target name (``graph_3``, ``node_5``,
        ``edge_3_9``): what ``xmask explain --pyg`` saves, from the same recorded attention.

        ``edge_mask`` is the attention of ``head`` of ``layer`` (default: the last layer, the mean over its heads;
        both numbered from 0) on the crop's edges, ``node_mask`` the query node's attention per node; ``x``,
        ``edge_index`` and ``node_ids`` describe the crop (see :mod:`xmask_cli.explain.pyg`).

        Raises:
            UsageError: no target, a target that does not fit the run's level, or a layer, head or id out of range.
        """
        from xmask_cli.explain.pyg import to_explanation
        from xmask_cli.explain.run import ExplainRequest, check_request, record_targets

        request = ExplainRequest(graphs=graphs, nodes=nodes, edges=edges, max_nodes=max_nodes, query=query,
                                 layer=layer, head=head, pyg=True)
        check_request(request, self.path, self._saved)
        self.model.eval()
        results, _ = record_targets(request, self._exp, self.model, self._task)
        return {t.name: to_explanation(t, layer, head) for t in results}


def load_run(
    path: str | os.PathLike,
    *,
    device: str = "cpu",
    cache_dir: str | os.PathLike | None = None,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> LoadedRun:
    """Read a run folder back (as ``xmask eval`` does): its best model, resolved config, data and split.

    Args:
        path: a run folder, ``runs/<name>/<seed>/``.
        device: ``cpu`` (default), ``auto``, ``cuda`` or ``cuda:N``.
        cache_dir, data_root, offline: as the CLI options of the same names.

    Raises:
        UsageError: an argument of the wrong type or value (the message starts with its name).
        RunNotFoundError: not a run folder, or a checkpoint that does not fit its config.
    """
    from xmask_cli.engine.evaluate import read_run, rebuild_run
    from xmask_cli.engine.plan import resolve_device
    from xmask_cli.prepare import resolve_cache_dir

    run_path = args.path_arg("path", path)
    device = str(args.str_arg("device", device))
    cache_root, data_root = args.optional_path_arg("cache_dir", cache_dir), args.optional_path_arg("data_root", data_root)
    offline = args.bool_arg("offline", offline, optional=True)
    args.callable_arg("log", log)
    with args.as_parameter("device", "--device"):
        dev = resolve_device(device)
    run, saved = read_run(run_path)
    exp, task, model = rebuild_run(run, saved, cache_dir=resolve_cache_dir(cache_root), data_root=data_root,
                               offline=offline, device=dev, log=log)
    return LoadedRun(path=run.path, config=exp.cfg, model=model, level=exp.level,
                     metric=exp.metric, seed=int(saved["train"]["seed"]), device=dev, _run=run, _saved=saved,
                     _exp=exp, _task=task)
