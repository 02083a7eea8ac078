"""What ``xmask ablate`` returns: frozen result types with ``to_json()`` and ``from_json()``.

``AblationResult.to_json()`` is ``ablation.json`` and what ``xmask --format json ablate`` prints;
``from_json()`` reads it back with every field's type checked (a wrong one raises
:class:`~xmask_cli.jsonfile.Damaged`). A leaf, like :mod:`xmask_cli.results`: the renderer reads these
types without loading torch.

Example::

    result = AblationResult.from_json(json.loads(Path("ablations/mutag-graph/ablation.json").read_text()))
    for row in result.rows[1:]:
        print(row.variant, row.paired.mean, row.paired.above, row.paired.below)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xmask_cli.jsonfile import Damaged, MapOf, Number, check_fields
from xmask_cli.results import JsonItems

__all__ = ["AblationResult", "AblationRow", "PairedDelta"]

_NONE = type(None)
_NUMBER = (int, float, _NONE)


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise Damaged(f"{what} is not a JSON object")
    return data


def _refuse_unknown(cls: type, data: Mapping[str, Any]) -> None:
    """A key the type does not hold is refused: a writer's new key would be dropped silently."""
    extra = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if extra:
        raise Damaged(f"unknown field(s) {', '.join(map(repr, extra))} for {cls.__name__}")


@dataclass(frozen=True)
class PairedDelta(JsonItems):
    """A variant against ``full`` run by run: the same seed (and outer fold) is the same split and test set,
    so the difference per run leaves out the spread between splits that the two rows' own stds hold.

    Attributes:
        values: ``{run: variant test - full test}`` over the runs both rows have (run keys as in
            :attr:`AblationRow.runs`), in ``full``'s order.
        mean, std: of ``values`` (population std, 0 for one run).
        above, below, ties: how many runs the variant's test metric is above, below or equal to ``full``'s
            (in the metric's own direction: for an error metric, above is worse).
    """

    values: Mapping[str, float]
    mean: float
    std: float
    above: int
    below: int
    ties: int

    def to_json(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "values": dict(self.values)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PairedDelta:
        """Checked: every field, of the type ``ablation.json`` holds."""
        check_fields(_mapping(data, "a paired delta"), {"values": MapOf(Number), "mean": Number, "std": Number,
                                                        "above": int, "below": int, "ties": int})
        _refuse_unknown(cls, data)
        return cls(**{**data, "values": {k: float(v) for k, v in data["values"].items()}})


@dataclass(frozen=True)
class AblationRow(JsonItems):
    """One variant of an ablation over the seeds (and outer folds).

    Attributes:
        variant, description: the variant's name and what it changes.
        status, error: ``ok``, or ``failed`` with ``<ExceptionType>: <first line>``.
        runs: each run's metrics, keyed by its folder under the variant's: ``"0"`` for seed 0 on the
            dataset's split, ``"0/fold-3"`` for seed 0's outer fold 3 (``{"0": {"train": .., "val": ..,
            "test": ..}}``); reused: the seeds whose runs were all read back from finished runs.
        val_mean, val_std, test_mean, test_std: over the runs (population std; None without a run).
        delta_test: ``test_mean`` minus that of ``full`` (None where either has none).
        paired: the run-by-run difference from ``full`` (None for ``full`` and where no run is shared).
    """

    variant: str
    description: str
    status: str
    error: str | None
    runs: Mapping[str, Mapping[str, float]]
    reused: tuple[int, ...]
    val_mean: float | None
    val_std: float | None
    test_mean: float | None
    test_std: float | None
    delta_test: float | None = None
    paired: PairedDelta | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["runs"] = {key: dict(m) for key, m in self.runs.items()}
        out["reused"] = list(self.reused)
        out["paired"] = None if self.paired is None else self.paired.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationRow:
        """Checked: every field, of the type ``ablation.json`` holds (``paired`` may be absent: None).

        Raises:
            Damaged: a field missing or of another type.
        """
        check_fields(_mapping(data, "an ablation row"), {
            "variant": str, "description": str, "status": str, "error": (str, _NONE), "runs": dict,
            "reused": list[int], "val_mean": _NUMBER, "val_std": _NUMBER, "test_mean": _NUMBER, "test_std": _NUMBER,
            "delta_test": _NUMBER}, optional={"paired": (dict, _NONE)})
        for key, metrics in data["runs"].items():
            check_fields({key: metrics}, {key: MapOf(Number)})
        _refuse_unknown(cls, data)
        paired = data.get("paired")
        return cls(**{**data, "reused": tuple(data["reused"]),
                      "paired": None if paired is None else PairedDelta.from_json(paired)})


@dataclass(frozen=True)
class AblationResult(JsonItems):
    """Every variant over the seeds (and outer folds): what ``ablation.json`` holds and
    ``xmask --format json ablate`` prints.

    Attributes:
        dataset, level, metric, name: what was trained (runs in ``<out_dir>/runs/<name>-<variant>/<seed>/``,
            with ``folds`` in its ``fold-<i>/`` folders).
        seeds, selection: the seeds and the rule that chose each run's epoch.
        preset, overrides: the base config as given; out_dir: the ablation folder.
        rows: one :class:`AblationRow` per variant, ``full`` first.
        folds: the outer folds every seed of every variant runs (0: the dataset's split).
    """

    dataset: str
    level: str
    metric: str
    seeds: tuple[int, ...]
    name: str
    selection: str
    preset: str | None
    overrides: tuple[str, ...]
    out_dir: str
    rows: tuple[AblationRow, ...]
    folds: int = 0

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**out, "seeds": list(self.seeds), "overrides": list(self.overrides),
                "rows": [r.to_json() for r in self.rows]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationResult:
        """``ablation.json`` read back, every field checked (``folds`` may be absent: 0).

        Raises:
            Damaged: a field missing or of another type.
        """
        check_fields(_mapping(data, "an ablation result"), {
            "dataset": str, "level": str, "metric": str, "seeds": list[int], "name": str, "selection": str,
            "preset": (str, _NONE), "overrides": list[str], "out_dir": str, "rows": list}, optional={"folds": int})
        _refuse_unknown(cls, data)
        return cls(**{**data, "seeds": tuple(data["seeds"]), "overrides": tuple(data["overrides"]),
                      "rows": tuple(AblationRow.from_json(r) for r in data["rows"])})
