"""The ``tune:`` section of a config: a search space over dotted config keys, parsed and checked alone.

A preset names the keys to search and how (docs/tune.md)::

    tune:
      model.hidden: {int: [32, 256], log: true}
      train.lr: {float: [1.0e-4, 1.0e-2], log: true}
      model.head_powers: {choice: [[1, 2, 3, 4], [1, 1, 2, 2]]}

Each entry is exactly one of ``int: [low, high]``, ``float: [low, high]`` (both inclusive; ``log: true``
samples on a log scale, ``step: s`` on a grid) or ``choice: [v1, v2, ...]``. ``null`` drops a key a parent
preset tunes; nested mappings (what ``--set tune.model.hidden=...`` makes) are read as dotted keys.

:func:`check_section` is what every config build runs (:func:`xmask_cli.config_resolve.resolve`, on every
entry point): the key is a setting of the schema and a hyper-parameter (not ``run.*``, ``task.*`` or which
data set), the range is non-empty and of the key's type, and every value a trial can draw has that type.
The checks against the rest of the config (``xmask tune``, before any trial) and the sampling live in
:mod:`xmask_cli.tune.space`. A leaf below the schema's resolver: no optuna, no engine.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from xmask_cli.config import Config
from xmask_cli.config_build import coerce, shorten
from xmask_cli.errors import ConfigError

__all__ = ["FORBIDDEN", "PROBE_ALL_INTS", "Param", "check_section", "field_type", "label", "parse_space",
           "values_to_probe"]

#: Keys no search may change: where runs go, which task and data set a study is about.
FORBIDDEN = ("run", "task", "data.dataset", "data.root", "data.split", "description", "tune")
_KINDS = ("int", "float", "choice")
_OPTIONS = ("log", "step")


@dataclass(frozen=True)
class Param:
    """One searched key.

    Attributes:
        key: dotted config key, e.g. ``model.hidden``.
        kind: ``int``, ``float`` or ``choice``.
        low, high: inclusive range (``int`` / ``float``).
        log: sample on a log scale.
        step: grid step (``None``: continuous / every integer).
        choices: the values of a ``choice`` (any YAML values).
    """

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def bounds(self) -> tuple[float | int, float | int]:
        """``(low, high)`` of an ``int`` / ``float`` param.

        Raises:
            ValueError: a ``choice`` param (it has no range).
        """
        if self.low is None or self.high is None:
            raise ValueError(f"tune.{self.key}: a {self.kind} parameter has no range")
        return self.low, self.high

    def labels(self) -> list[Any]:
        """Optuna's categorical choices: scalars as they are, lists and mappings as their JSON text."""
        return [label(c) for c in self.choices]

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"choice": list(self.choices)}
        out: dict[str, Any] = {self.kind: [self.low, self.high]}
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = self.step
        return out


def label(value: Any) -> Any:
    """A choice as Optuna stores it: scalars as they are, lists and mappings as canonical JSON."""
    # Optuna's categorical values are None/bool/int/float/str: encode the rest as canonical JSON.
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def _flatten(section: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ConfigError(f"tune{'.' + prefix if prefix else ''}: expected a mapping of dotted keys to "
                          f"{{int: [low, high]}}, {{float: [low, high]}} or {{choice: [...]}}, got {shorten(section)}")
    out: dict[str, Any] = {}
    for k, v in section.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and _is_section(key) and not any(kind in v for kind in _KINDS):
            items = _flatten(v, key)  # a nested group: tune: {model: {hidden: ...}}
        else:
            items = {key: v}
        for kk, vv in items.items():
            if kk in out:
                raise ConfigError(f"tune.{kk}: given twice (once dotted, once nested); keep one")
            out[kk] = vv
    return out


def _is_section(key: str) -> bool:
    """Does dotted ``key`` name a section of the schema (``model``, ``structure.powers``)?"""
    tp: Any = Config
    for part in key.split("."):
        if not dataclasses.is_dataclass(tp) or part not in {f.name for f in dataclasses.fields(tp)}:
            return False
        tp = typing.get_type_hints(tp)[part]
    return dataclasses.is_dataclass(tp)


def field_type(key: str) -> Any:
    """The schema type of dotted ``key``; unknown keys fail with the nearest valid one named."""
    cls: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = {f.name for f in dataclasses.fields(cls)}
        if part not in fields:
            here = ".".join(parts[:i])
            full = [f"{here}.{f}" if here else f for f in fields]
            close = difflib.get_close_matches(".".join(parts[: i + 1]), full, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(sorted(full))}"
            raise ConfigError(f"tune.{key}: unknown key '{key}': {hint}")
        tp = typing.get_type_hints(cls)[part]
        if i < len(parts) - 1:
            if not dataclasses.is_dataclass(tp):
                raise ConfigError(f"tune.{key}: '{'.'.join(parts[: i + 1])}' is a setting, not a section")
            cls = tp
        elif dataclasses.is_dataclass(tp):
            raise ConfigError(f"tune.{key}: '{key}' is a section; name one of its settings, e.g. "
                              f"{key}.{dataclasses.fields(tp)[0].name}")
    return tp


def _is_int_type(tp: Any) -> bool:
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    return int in args and float not in args


def _number(v: Any, key: str, what: str, integer: bool) -> float | int:
    if isinstance(v, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or (not integer and not math.isfinite(float(v))):
        raise ConfigError(f"tune.{key}: {what} must be {'an integer' if integer else 'a finite number'}, got {shorten(v)}")
    return int(v) if integer else float(v)


def _param(key: str, spec: Any) -> Param:
    if key.split(".")[0] in FORBIDDEN or any(key == f or key.startswith(f + ".") for f in FORBIDDEN):
        raise ConfigError(f"tune.{key}: not a hyper-parameter a search may change (run.*, task.*, data.dataset, "
                          f"data.root and data.split are fixed per study)")
    tp = field_type(key)
    if not isinstance(spec, dict):
        raise ConfigError(f"tune.{key}: expected {{int: [low, high]}}, {{float: [low, high]}} or {{choice: [...]}}, "
                          f"got {shorten(spec)}")
    kinds = [k for k in _KINDS if k in spec]
    unknown = [k for k in spec if k not in _KINDS and k not in _OPTIONS]
    if unknown:
        raise ConfigError(f"tune.{key}: unknown entry '{unknown[0]}'; an entry has one of int, float, choice "
                          f"and optionally log, step")
    if len(kinds) != 1:
        raise ConfigError(f"tune.{key}: give exactly one of int, float, choice (got {', '.join(kinds) or 'none'})")
    kind = kinds[0]
    if kind == "choice":
        if set(spec) & set(_OPTIONS):
            raise ConfigError(f"tune.{key}: log and step apply to int and float ranges, not to choice")
        choices = spec["choice"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"tune.{key}: choice must be a non-empty list of values, got {shorten(choices)}")
        labels = [json.dumps(c, sort_keys=True) for c in choices]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"tune.{key}: choice lists a value twice")
        return Param(key, "choice", choices=tuple(choices))
    rng = spec[kind]
    if not isinstance(rng, list) or len(rng) != 2:
        raise ConfigError(f"tune.{key}: {kind} must be a range [low, high], got {shorten(rng)}")
    integer = kind == "int"
    if integer is False and _is_int_type(tp):
        raise ConfigError(f"tune.{key}: '{key}' takes integers: use {{int: [low, high]}}")
    low, high = (_number(v, key, "low" if i == 0 else "high", integer) for i, v in enumerate(rng))
    if not low < high:
        raise ConfigError(f"tune.{key}: empty range [{low}, {high}]: low must be below high")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"tune.{key}: log must be true or false, got {shorten(log)}")
    if log and low <= 0:
        raise ConfigError(f"tune.{key}: a log range needs low > 0, got {low}")
    step = spec.get("step")
    if step is not None:
        step = _number(step, key, "step", integer)
        if log:
            raise ConfigError(f"tune.{key}: give log or step, not both")
        n = (high - low) / step if step > 0 else -1
        if step <= 0 or step > high - low or abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
            raise ConfigError(f"tune.{key}: step {step} must be > 0 and divide high - low ({high - low})")
    return Param(key, kind, low=low, high=high, log=log, step=step)


def parse_space(tune: dict[str, Any]) -> list[Param]:
    """The ``tune:`` mapping as :class:`Param` entries (sorted by key), each checked alone.

    Raises:
        ConfigError: an unknown or forbidden key, a malformed entry, an empty or invalid range.
    """
    flat = {k: v for k, v in _flatten(tune).items() if v is not None}
    return [_param(k, flat[k]) for k in sorted(flat)]


#: Integer ranges with at most this many grid points are probed at every point, not only the ends.
PROBE_ALL_INTS = 1024


def values_to_probe(p: Param) -> list[Any]:
    """The values of ``p`` checked before any trial: every choice, every point of a small integer range, else the ends."""
    if p.kind == "choice":
        return list(p.choices)
    low, high = p.bounds()
    if p.kind == "int" and not p.log and (high - low) // (p.step or 1) < PROBE_ALL_INTS:
        # Every value a trial can draw: model.hidden: {int: [32, 256]} holds 33, which no 4-head model takes.
        return list(range(int(low), int(high) + 1, int(p.step or 1)))
    if p.kind == "int" and p.log and high - low < PROBE_ALL_INTS:
        return list(range(int(low), int(high) + 1))
    return [low, high]


def check_section(cfg: Config) -> list[Param]:
    """Parse ``cfg.tune`` and check each value a trial can draw against its key's type (no other setting read).

    Raises:
        ConfigError: as :func:`parse_space`, or a value of the wrong type (``tune.<key>: value ... is not valid: ...``).
    """
    params = parse_space(cfg.tune)
    for p in params:
        tp = field_type(p.key)
        for value in values_to_probe(p):
            try:
                coerce(value, tp, p.key)
            except ConfigError as exc:
                raise ConfigError(f"tune.{p.key}: value {shorten(value)} is not valid: {exc}") from None
    return params
