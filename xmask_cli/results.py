"""What training and evaluation return: frozen result types with ``to_json()`` and ``from_json()``.

A run's summary (``summary.json``), a sweep over seeds (what ``xmask train`` prints; its
``aggregate.json`` is the same without ``runs``), an evaluation (``xmask eval``) and a comparison of
finished runs (``xmask runs compare``); an ablation's are in :mod:`xmask_cli.results_ablation`. ``to_json()``
gives the JSON that command prints and that file holds; ``from_json()`` reads it back, checking each
field's type (:func:`~xmask_cli.jsonfile.check_fields`: a wrong one raises
:class:`~xmask_cli.jsonfile.Damaged`). A leaf below the engine: renderers read these types without
loading torch.

Code written against the plain-dict results keeps working: ``result["runs"][0]["metrics"]`` is
``result.to_json()["runs"][0]["metrics"]`` (compatibility only; read attributes in new code).

Example::

    result = train_seeds(cfg, [0, 1], cache_dir=Path("cache"))
    print(result.aggregate["test"].mean, result.runs[0].best_epoch)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xmask_cli.jsonfile import Damaged, MapOf, Number, OptionalInt, check_fields

__all__ = ["CompareResult", "EvalResult", "ExportResult", "FoldsSummary", "JsonItems", "MetricStats", "RunRow",
           "RunSummary", "SUMMARY_FIELDS", "SUMMARY_OPTIONAL", "SweepResult", "stats_of"]

_NONE = type(None)


class JsonItems:
    """A result with :meth:`to_json`; ``result[key]`` reads that JSON (compatibility with the plain-dict results)."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise Damaged(f"{what} is not a JSON object")
    return data


def _unknown(cls: type, data: Mapping[str, Any], strict: bool) -> None:
    """A strict read refuses keys the type does not hold: a writer's new key would be dropped silently."""
    names = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(set(data) - names)
    if strict and extra:
        raise Damaged(f"unknown field(s) {', '.join(map(repr, extra))} for {cls.__name__}")


@dataclass(frozen=True)
class MetricStats(JsonItems):
    """Mean and population standard deviation (``ddof=0``; 0 for one run) of one metric over runs."""

    mean: float
    std: float
    values: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "values": list(self.values)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MetricStats:
        """Checked: ``mean`` and ``std`` numbers, ``values`` a list of numbers."""
        check_fields(_mapping(data, "a metric's statistics"), {"mean": Number, "std": Number, "values": list[float]})
        return cls(float(data["mean"]), float(data["std"]), tuple(float(v) for v in data["values"]))


def stats_of(data: Mapping[str, Mapping[str, Any]]) -> dict[str, MetricStats]:
    """``{part: MetricStats}`` from ``{part: {"mean", "std", "values"}}`` (``runs.aggregate``'s result)."""
    return {str(k): MetricStats.from_json(v) for k, v in _mapping(data, "an aggregate").items()}


#: summary.json's fields: the required ones, then the optional ones with their types (what a reader checks).
SUMMARY_FIELDS = {"metrics": MapOf(Number)}
SUMMARY_OPTIONAL = {"dataset": (str, _NONE), "metric": str, "seed": int, "best_epoch": OptionalInt,
                     "epochs_run": int, "stopped_early": bool, "split": dict, "selection": dict, "processes": int,
                     "level": str, "run_dir": str, "fold": OptionalInt, "folds": int}
#: Keys written only when they hold a value (a distributed run's process count, a sweep's fold).
_SUMMARY_WHEN_SET = ("processes", "level", "run_dir", "fold", "folds")


@dataclass(frozen=True)
class RunSummary(JsonItems):
    """One run's result, scored on its best state by validation: what ``summary.json`` holds.

    Attributes:
        metrics: the run's metric on each scored part (``{"train": .., "val": .., "test": ..}``).
        dataset, metric, seed, level: what was trained, and the selection metric.
        best_epoch, epochs_run, stopped_early: the kept epoch (0-based), epochs trained, early stop.
        split: the split's name, seed and part sizes; selection: the rule that chose ``best_epoch``
            and the values it read there (``rule``, ``val_<metric>``, ``val_loss``).
        run_dir: the run folder; fold, folds: the outer fold of a ``data.folds`` sweep and K.
        processes: the process count of a distributed run (None: one process).
    """

    metrics: Mapping[str, float]
    dataset: str | None = None
    metric: str | None = None
    seed: int | None = None
    best_epoch: int | None = None
    epochs_run: int | None = None
    stopped_early: bool | None = None
    split: Mapping[str, Any] | None = None
    selection: Mapping[str, Any] | None = None
    level: str | None = None
    run_dir: str | None = None
    fold: int | None = None
    folds: int | None = None
    processes: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in _SUMMARY_WHEN_SET:
                continue
            out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, strict: bool = False) -> RunSummary:
        """A summary read back (``summary.json``, or the loop's own), its fields checked.

        ``strict``: refuse keys this type does not hold (what the sweep does with the loop's summary).

        Raises:
            Damaged: ``metrics`` missing, or a field of another type than xmask writes.
        """
        check_fields(_mapping(data, "a run summary"), SUMMARY_FIELDS, SUMMARY_OPTIONAL)
        _unknown(cls, data, strict)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class FoldsSummary(JsonItems):
    """A ``data.folds`` sweep: K, the folds trained per seed, the holdout share, each seed's fold statistics."""

    k: int
    trained: int
    holdout: float
    per_seed: Mapping[str, Mapping[str, MetricStats]]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "trained": self.trained, "holdout": self.holdout,
                "per_seed": {s: {p: v.to_json() for p, v in parts.items()} for s, parts in self.per_seed.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FoldsSummary:
        """Checked: ``k`` and ``trained`` ints, ``holdout`` a number, ``per_seed`` aggregates by seed."""
        check_fields(_mapping(data, "a folds summary"), {"k": int, "trained": int, "holdout": Number, "per_seed": dict})
        return cls(data["k"], data["trained"], float(data["holdout"]),
                   {str(s): stats_of(v) for s, v in data["per_seed"].items()})


@dataclass(frozen=True)
class SweepResult(JsonItems):
    """One run per seed (and outer fold): what ``xmask --format json train`` prints.

    Attributes:
        name, dataset, level, metric: the run name (``<run_root>`` ends in it) and what was trained.
        features: the node features the model read (None for image sets and edge files).
        seeds: the seeds, in training order; run_root: ``<runs>/<name>``.
        runs: each run's :class:`RunSummary`, in training order.
        aggregate: mean ± std over every run of each scored part (None on a distributed run's other ranks).
        folds: the per-seed fold statistics of a ``data.folds`` sweep, else None.
    """

    name: str
    dataset: str
    level: str
    metric: str
    features: Mapping[str, Any] | None
    seeds: tuple[int, ...]
    run_root: str
    runs: tuple[RunSummary, ...]
    aggregate: Mapping[str, MetricStats] | None
    folds: FoldsSummary | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.aggregate_json()
        out["runs"] = [r.to_json() for r in self.runs]
        return out

    def aggregate_json(self) -> dict[str, Any]:
        """What ``aggregate.json`` holds: :meth:`to_json` without ``runs``."""
        out: dict[str, Any] = {
            "name": self.name, "dataset": self.dataset, "level": self.level, "metric": self.metric,
            "features": None if self.features is None else dict(self.features), "seeds": list(self.seeds),
            "run_root": self.run_root,
            "aggregate": None if self.aggregate is None else {k: v.to_json() for k, v in self.aggregate.items()}}
        if self.folds is not None:
            out["folds"] = self.folds.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepResult:
        """A sweep read back: ``xmask train``'s json, or ``aggregate.json`` (no ``runs``).

        Raises:
            Damaged: a field missing or of another type than xmask writes.
        """
        check_fields(_mapping(data, "a sweep result"), {"name": str, "dataset": str, "level": str, "metric": str, "seeds": list[int],
                            "run_root": str, "aggregate": (dict, _NONE), "features": (dict, _NONE)},
                     {"runs": list, "folds": dict})
        return cls(data["name"], data["dataset"], data["level"], data["metric"], data["features"],
                   tuple(data["seeds"]), data["run_root"],
                   tuple(RunSummary.from_json(r) for r in data.get("runs", ())),
                   None if data["aggregate"] is None else stats_of(data["aggregate"]),
                   FoldsSummary.from_json(data["folds"]) if "folds" in data else None)


@dataclass(frozen=True)
class EvalResult(JsonItems):
    """A run's metrics recomputed from its best checkpoint: what ``xmask --format json eval`` prints.

    Attributes:
        run_dir, dataset, level, metric, seed: the run read back.
        metrics: the recomputed metric of each part asked for; recorded: ``summary.json``'s value of
            each (None where the summary has none).
        config_sha256: the first 16 hex digits of the SHA-256 of the run's saved ``config.json``, less its
            ``environment`` (the software, device and threads it ran on).
    """

    run_dir: str
    dataset: str
    level: str
    metric: str
    seed: int
    metrics: Mapping[str, float]
    recorded: Mapping[str, float | None]
    config_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {f.name: dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalResult:
        """Checked: every field, of the type ``xmask eval`` prints.

        Raises:
            Damaged: a field missing or of another type.
        """
        check_fields(_mapping(data, "an eval result"), {"run_dir": str, "dataset": str, "level": str, "metric": str, "seed": int,
                            "metrics": MapOf(Number), "recorded": MapOf((int, float, _NONE)), "config_sha256": str})
        _unknown(cls, data, strict=True)
        return cls(**data)


@dataclass(frozen=True)
class ExportResult(JsonItems):
    """A trained model written as a program for inference: what ``xmask --format json export`` prints.

    Attributes:
        run_dir, dataset, level: the run read back.
        out: the file written; to: ``torch`` (a ``torch.export`` program, ``.pt2``) or ``onnx``.
        path: the attention path the program runs (``dense`` or ``pairs``).
        inputs: each input's shape (symbols ``B``, ``N``, ``E`` are dynamic); output: the output's shape.
        export_s: seconds to trace (and translate to ONNX); size_bytes: the file's size.
        checked: items of the test part the program was run on; max_abs_diff: the largest difference
            between its outputs and ``xmask eval``'s (None without test items); for ``onnx``, of the
            ``torch.export`` program the ONNX model is translated from.
    """

    run_dir: str
    dataset: str
    level: str
    out: str
    to: str
    path: str
    inputs: Mapping[str, list[str | int]]
    output: list[str | int]
    export_s: float
    size_bytes: int
    checked: int
    max_abs_diff: float | None

    def to_json(self) -> dict[str, Any]:
        return {f.name: dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v
                for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class RunRow(JsonItems):
    """One finished run of ``xmask runs compare``: its summary's numbers, its wall time and validation curve.

    Attributes:
        run_dir, name, seed, fold: the run folder, its name (``<name>/<seed>[/fold-<i>]``), seed and fold.
        dataset, metric, best_epoch, epochs_run, train, val, test: from its ``summary.json``.
        wall_s: the epochs' ``epoch_s`` summed (``train_s`` where a row has no ``epoch_s``).
        curve: ``(epoch, val metric)`` of each ``metrics.jsonl`` row that holds it.
    """

    run_dir: str
    name: str
    seed: int | None
    fold: int | None
    dataset: str | None
    metric: str
    best_epoch: int | None
    epochs_run: int | None
    train: float | None
    val: float | None
    test: float | None
    wall_s: float
    curve: tuple[tuple[int, float | None], ...]

    def to_json(self, curve: bool = True) -> dict[str, Any]:
        """The row as JSON; ``curve=False`` leaves the curve out (what the command prints)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "curve"}
        return {**out, "curve": [list(point) for point in self.curve]} if curve else out


@dataclass(frozen=True)
class CompareResult(JsonItems):
    """``xmask runs compare``: one :class:`RunRow` per finished run, the plot's path (None: no plot), and the
    packages whose versions differ between the runs (``{package: {version: [run folder, ...]}}``, from each
    run's ``config.json`` ``environment``; empty when they agree or recorded none)."""

    runs: tuple[RunRow, ...]
    plot: str | None
    version_differences: Mapping[str, Mapping[str, list[str]]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_json(curve=False) for r in self.runs], "plot": self.plot,
                "version_differences": {k: dict(v) for k, v in self.version_differences.items()}}
