"""Typed coercion into the schema: one setting (:func:`coerce`) or a whole section (:func:`build`).

:func:`coerce` turns a YAML or Python value into the type a schema field declares (``int``, ``float``,
``Literal`` choices, lists, unions, lists of sections) and raises :class:`~xmask_cli.errors.ConfigError`
naming the key and the expected type when it is not one; :func:`build` makes a section of a mapping,
naming the nearest valid key for an unknown one, and runs the section's own checks (and, for a whole
:class:`~xmask_cli.config.Config`, the config-stage rules between sections). A leaf below
:mod:`xmask_cli.config_resolve` (presets and overrides) and :mod:`xmask_cli.config_space` (the ``tune:``
space, whose values are coerced here).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal

from xmask_cli.config import Config
from xmask_cli.config_rules import check_rules
from xmask_cli.config_section import Section
from xmask_cli.errors import ConfigError

__all__ = ["MAX_SHOWN", "shorten", "type_name", "coerce", "build"]

#: Longest value quoted in an error message.
MAX_SHOWN = 200


def shorten(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to about ``limit`` characters: an error message never carries a huge value."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def type_name(tp: Any) -> str:
    """A schema type in words: ``int``, ``one of 'a', 'b'``, ``list of int``, ``int or null``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _float(value: Any, key: str, bad: ConfigError) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            out = float(value)
        except OverflowError:  # an int beyond float64 (10**400)
            raise ConfigError(f"{key}: expected a finite number, got {shorten(value)}", keys=[key]) from None
    elif isinstance(value, str):  # YAML 1.1 reads "1e-30" as a string
        try:
            out = float(value)
        except ValueError:
            raise bad from None
    else:
        raise bad
    if not math.isfinite(out):  # no setting means anything at inf or nan (train.lr=inf trains to NaN)
        raise ConfigError(f"{key}: expected a finite number, got {shorten(value)}", keys=[key])
    return out


def _union(value: Any, tp: Any, key: str, bad: ConfigError) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    for a in args:
        if a is type(None):
            continue
        try:
            return coerce(value, a, key)
        except ConfigError:
            continue
    raise bad


def _list(value: Any, tp: Any, key: str, bad: ConfigError) -> list[Any]:
    (inner,) = typing.get_args(tp)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        if isinstance(value, dict):  # one mapping stands for a list of one
            value = [value]
        if not isinstance(value, list):
            raise bad
        return [build(inner, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (int, float, str)) and not isinstance(value, bool) and inner is not str:
        value = [value]
    if not isinstance(value, list):
        raise bad
    return [coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]


def coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as schema type ``tp`` (lists of sections built and checked); ConfigError naming ``key`` if it is not one."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{key}: expected {type_name(tp)}, got {shorten(value)} ({type(value).__name__})", keys=[key])
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin in (typing.Union, types.UnionType):
        return _union(value, tp, key, bad)
    if origin is dict:  # free-form mappings (the tune section) are checked by their owner
        if value is None:  # `tune: null` clears an inherited mapping
            return {}
        if isinstance(value, dict):
            return dict(value)
        raise bad
    if origin is list:
        return _list(value, tp, key, bad)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        return _float(value, key, bad)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    raise bad


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Instantiate dataclass ``cls`` from ``data``, checking keys and types; then the section's own checks
    (:meth:`~xmask_cli.config_section.Section.check`) or, for a whole config, the config-stage rules between
    its sections (:mod:`xmask_cli.config_rules`)."""
    where = prefix or "config"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {shorten(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f"did you mean '{prefix + '.' if prefix else ''}{close[0]}'?" if close else f"valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown key '{full}': {hint}")
        tp = hints[key]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[key] = build(tp, value, full)
        else:
            kwargs[key] = coerce(value, tp, full)
    obj = cls(**kwargs)
    if isinstance(obj, Section):
        obj.check(prefix)
    elif isinstance(obj, Config):
        check_rules(obj)
    return obj
