"""The base of every config section: a section that checks its own fields.

:class:`Section` gives each frozen section of :mod:`xmask_cli.config` a :meth:`~Section.check`
(plain bounds, the dtype a value is used in, ``Literal`` choices, and the rules between the section's
own keys) that raises the one config error, :class:`~xmask_cli.errors.ConfigError` (exit 2), carrying
the keys the failed check read (:attr:`~xmask_cli.errors.ConfigError.keys`). A leaf below the schema.
"""
from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from xmask_cli.errors import ConfigError

__all__ = ["FLOAT32_MAX", "FLOAT32_TINY", "INT64_MAX", "Need", "Section", "machine_memory_bytes", "needer"]

#: ``need(cond, key, what)``: raises :class:`ConfigError` naming the key when ``cond`` is false.
Need = Callable[[bool, str, str], None]
#: Largest finite float32: every float setting reaches torch as a float32 scalar or tensor (the optimizer's
#: learning rate and weight decay included, whatever ``train.precision`` autocasts the forwards to).
FLOAT32_MAX = 3.4028234663852886e38
#: Smallest normal float32 (a positive float below it is subnormal, flushed to 0 by many kernels, or 0 outright).
FLOAT32_TINY = 1.1754943508222875e-38
#: Integer settings become int64 tensors or indices.
INT64_MAX = 2**63 - 1


def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def needer(where: str, read: list[str] | None = None) -> Need:
    """The ``need`` of a section at ``where`` (``"model"``, ``"model.biases[0]"``): its messages read
    ``model.hidden: must be ...``; at ``""`` (a run view built in Python) they read ``hidden must be ...``.

    ``read``: the other keys the message of the coming check names (what ``at`` collected while the
    message was formed); the error carries them with its own key as :attr:`ConfigError.keys`.
    """
    def full(key: str) -> str:
        return f"{where}.{key}" if where else key

    def need(cond: bool, key: str, what: str) -> None:
        others = list(read or ())
        if read is not None:
            read.clear()
        if not cond:
            raise ConfigError(f"{where}.{key}: {what}" if where else f"{key} {what}",
                              keys=[full(key), *(full(k) for k in others)])
    return need


_TYPES: dict[type, tuple[dict[str, tuple[Any, ...]], dict[str, type]]] = {}


def _types(cls: type) -> tuple[dict[str, tuple[Any, ...]], dict[str, type]]:
    """Field -> the values its ``Literal`` type allows (of a list's items for ``list[Literal]``), and
    field -> ``int`` / ``float`` for the numeric ones (plain, optional or a list); read once per class."""
    if cls not in _TYPES:
        choices: dict[str, tuple[Any, ...]] = {}
        numbers: dict[str, type] = {}
        for name, tp in typing.get_type_hints(cls).items():
            if typing.get_origin(tp) is list:
                (tp,) = typing.get_args(tp)
            if typing.get_origin(tp) is Literal:
                choices[name] = typing.get_args(tp)
            args = set(typing.get_args(tp)) or {tp}
            for kind in (float, int):
                if kind in args:
                    numbers[name] = kind
                    break
        _TYPES[cls] = (choices, numbers)
    return _TYPES[cls]


def _items(value: Any) -> list[tuple[int | None, Any]]:
    return list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]


class Section:
    """A section that checks its own fields (in the spirit of a config that validates itself).

    :meth:`check` runs the dtype bounds (every float finite in float32, :data:`FLOAT32_MAX`; every
    integer within int64), the plain bounds (:attr:`AT_LEAST`, :attr:`AT_MOST`, :attr:`WITHIN`), the
    ``Literal`` choices (which ``--set`` coercion already enforces; a section built in Python meets them
    here) and :meth:`_check_own`, the rules between the section's own keys. Rules between sections live
    in :mod:`xmask_cli.config_rules`.
    """

    #: key -> lowest value, or ``(lowest, note)``.
    AT_LEAST: ClassVar[Mapping[str, float | tuple[float, str]]] = {}
    #: key -> highest value, or ``(highest, note)``: where a larger value cannot mean anything (a width no
    #: memory holds).
    AT_MOST: ClassVar[Mapping[str, float | tuple[float, str]]] = {}
    #: key -> closed range ``(low, high)``.
    WITHIN: ClassVar[Mapping[str, tuple[float, float]]] = {}

    def check(self, where: str) -> None:
        """Raise :class:`ConfigError` naming ``<where>.<key>`` on the first field out of its domain."""
        read: list[str] = []
        need = needer(where, read)
        choices, numbers = _types(type(self))
        for key, kind in numbers.items():
            for i, v in _items(getattr(self, key)):
                name = key if i is None else f"{key}[{i}]"
                if kind is float and isinstance(v, float):
                    need(abs(v) <= FLOAT32_MAX, name, f"{v:g} is not finite in float32, the dtype it is used in "
                         f"(at most {FLOAT32_MAX:.4g} in magnitude)")
                elif isinstance(v, int) and not isinstance(v, bool):
                    need(abs(v) <= INT64_MAX, name, f"{v} does not fit int64, the dtype it is used in")
        for key, bound in self.AT_LEAST.items():
            low, note = bound if isinstance(bound, tuple) else (bound, "")
            need(getattr(self, key) >= low, key, f"must be >= {low}" + (f" ({note})" if note else ""))
        for key, bound in self.AT_MOST.items():
            high, note = bound if isinstance(bound, tuple) else (bound, "")
            need(getattr(self, key) <= high, key, f"must be <= {high}" + (f" ({note})" if note else ""))
        for key, (low, high) in self.WITHIN.items():
            need(low <= getattr(self, key) <= high, key, f"must lie in [{low}, {high}]")
        for key, allowed in choices.items():
            for i, v in _items(getattr(self, key)):
                need(v in allowed, key if i is None else f"{key}[{i}]", f"must be one of {allowed}, got {v!r}")

        def at(key: str) -> str:
            read.append(key)
            return f"{where}.{key}" if where else key

        self._check_own(need, at)

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        """Rules between this section's own keys; ``at(key)`` names another key in a message (and records
        that the check reads it: the error's :attr:`~xmask_cli.errors.ConfigError.keys`)."""
