"""Argument checks for the Python API: each public function checks its arguments on entry.

A wrong argument raises :class:`~xmask_cli.errors.UsageError` (exit code 2, a subclass of
:class:`~xmask_cli.errors.XMaskError`) whose message starts with the parameter's name, says what was
expected and shows what came, e.g. ``seeds: expected an int, a range text such as '0-4' or a list of
ints; got [0, 'x']``. The checks run before any work, so a bad call writes nothing.

Example::

    n = int_arg("heads", heads, minimum=1)
    root = optional_path_arg("runs_dir", runs_dir)  # None stays None
"""
from __future__ import annotations

import numbers
import operator
import os
import re
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from xmask_cli.errors import UsageError

__all__ = ["as_parameter", "literal_choices", "int_arg", "float_arg", "bool_arg", "str_arg", "choice_arg", "path_arg", "optional_path_arg", "callable_arg", "seeds_arg",
           "ints_arg", "overrides_arg", "strs_arg"]

T = TypeVar("T")

_SHOW = 80  # characters of a bad value shown in the message


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW - 3] + "..."


def _fail(name: str, expected: str, value: Any) -> UsageError:
    return UsageError(f"{name}: expected {expected}; got {_shown(value)}")


def _as_int(value: Any) -> int | None:
    """``value`` as an int when it is an integer (Python or numpy, not bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def literal_choices(section: type, key: str) -> tuple[Any, ...]:
    """The values a config section's ``Literal`` field allows (``literal_choices(ModelSection, "norm")``): the
    API accepts what a preset accepts."""
    return typing.get_args(typing.get_type_hints(section)[key])


def int_arg(name: str, value: Any, *, minimum: int | None = None) -> int:
    """An integer (a bool is refused: ``True`` is not a count), at least ``minimum``."""
    n = _as_int(value)
    bound = "" if minimum is None else f" >= {minimum}"
    if n is None or (minimum is not None and n < minimum):
        raise _fail(name, f"an int{bound}", value)
    return n


def float_arg(name: str, value: Any, *, low: float | None = None, high: float | None = None,
              low_open: bool = False, high_open: bool = False) -> float:
    """A real number (int or float, numpy's too; not a bool) in ``[low, high]``, either end open on request."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(name, "a number", value)
    v = float(value)
    lo_ok = low is None or (v > low if low_open else v >= low)
    hi_ok = high is None or (v < high if high_open else v <= high)
    if v != v or not (lo_ok and hi_ok):  # NaN fails every range
        lo = "(-inf" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "inf)" if high is None else f"{high:g}" + (")" if high_open else "]")
        raise _fail(name, f"a number in {lo}, {hi}", value)
    return v


def bool_arg(name: str, value: Any, *, optional: bool = False) -> bool | None:
    """True or False (None too when ``optional``); 0, 1 and strings are refused, they are usually slips."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise _fail(name, "True or False" + (" or None" if optional else ""), value)
    return value


def str_arg(name: str, value: Any, *, optional: bool = False, pattern: str | None = None) -> str | None:
    """A non-empty string (None too when ``optional``), matching ``pattern`` in full when given."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or (pattern is not None and not re.fullmatch(pattern, value)):
        raise _fail(name, "a non-empty string" + (" or None" if optional else ""), value)
    return value


def choice_arg(name: str, value: Any, choices: Collection[T]) -> T:
    """One of ``choices`` (compared by equality; a bool never passes for an int choice)."""
    for c in choices:
        if type(value) is type(c) and value == c:
            return c
    raise _fail(name, "one of " + ", ".join(repr(c) for c in choices), value)


def path_arg(name: str, value: Any) -> Path:
    """A path given as a string or ``os.PathLike``."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise _fail(name, "a path (a str or os.PathLike)", value)
    return Path(value)


def optional_path_arg(name: str, value: Any) -> Path | None:
    """None, or a path as :func:`path_arg` takes it."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return path_arg(name, value)
    raise _fail(name, "a path (a str or os.PathLike) or None", value)


def callable_arg(name: str, value: Any) -> Callable[..., Any]:
    """A callable (a function, a method, an object with ``__call__``)."""
    if not callable(value):
        raise _fail(name, "a callable", value)
    fn: Callable[..., Any] = value
    return fn


def seeds_arg(name: str, value: Any) -> list[int] | str:
    """``int`` -> ``[int]``; a sequence of non-negative ints -> that list; a string passes on to the sweep
    parser (``"0-4"``, ``"0,2,7"``), which checks its text."""
    expected = "an int, a range text such as '0-4' or a list of ints"
    if isinstance(value, str):
        if not value.strip():
            raise _fail(name, expected, value)
        return value
    n = _as_int(value)
    if n is not None:
        if n < 0:
            raise _fail(name, "seeds >= 0", value)
        return [n]
    if isinstance(value, Sequence) and value:
        out = [_as_int(v) for v in value]
        if all(v is not None and v >= 0 for v in out):
            return [int(v) for v in out if v is not None]
    raise _fail(name, expected, value)


def ints_arg(name: str, value: Any, *, minimum: int | None = None, optional: bool = True) -> list[int] | None:
    """A non-empty sequence of ints each at least ``minimum`` (None stays None when ``optional``)."""
    if value is None and optional:
        return None
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        out = [_as_int(v) for v in value]
        if all(v is not None and (minimum is None or v >= minimum) for v in out):
            return [int(v) for v in out if v is not None]
    raise _fail(name, f"a non-empty list of ints{bound}" + (" or None" if optional else ""), value)


def strs_arg(name: str, value: Any, *, choices: Collection[str]) -> tuple[str, ...]:
    """A non-empty sequence of strings, each one of ``choices`` (a lone string is one item)."""
    items = [value] if isinstance(value, str) else value
    if isinstance(items, Sequence) and items and all(isinstance(v, str) and v in choices for v in items):
        return tuple(items)
    raise _fail(name, "a list of " + ", ".join(repr(c) for c in choices), value)


def overrides_arg(name: str, value: Any) -> Mapping[str, Any] | list[str] | None:
    """``--set`` overrides: None, one ``"KEY=VALUE"`` text, a list of them, or a mapping of dotted keys."""
    expected = "'KEY=VALUE' texts (a str or a list of them) or a mapping of dotted keys"
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and k for k in value):
            return value
        raise _fail(name, expected, value)
    if isinstance(value, Sequence) and all(isinstance(v, str) and "=" in v for v in value):
        return list(value)
    raise _fail(name, expected, value)


@contextmanager
def as_parameter(name: str, flag: str) -> Iterator[None]:
    """Re-word a CLI-worded :class:`UsageError` (``--seeds '0-': ...``) under the parameter's name
    (``seeds: '0-': ...``): the API shares the CLI's parsers, its caller knows the keyword."""
    try:
        yield
    except UsageError as exc:
        text = str(exc)
        if text.startswith(flag):
            raise type(exc)(f"{name}: {text[len(flag):].lstrip()}") from None
        raise
