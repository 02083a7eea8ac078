"""The base of every config section: a section that checks its own fields.

:class:`Section` gives each frozen section of :mod:`xmask_cli.config` a :meth:`~Section.check`
(plain bounds, ``Literal`` choices, and the rules between the section's own keys) that raises the
one config error, :class:`~xmask_cli.errors.ConfigError` (exit 2). A leaf below the schema.
"""
from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from xmask_cli.errors import ConfigError

__all__ = ["Need", "Section", "needer"]

#: ``need(cond, key, what)``: raises :class:`ConfigError` naming the key when ``cond`` is false.
Need = Callable[[bool, str, str], None]


def needer(where: str) -> Need:
    """The ``need`` of a section at ``where`` (``"model"``, ``"model.biases[0]"``): its messages read
    ``model.hidden: must be ...``; at ``""`` (a run view built in Python) they read ``hidden must be ...``."""
    def need(cond: bool, key: str, what: str) -> None:
        if not cond:
            raise ConfigError(f"{where}.{key}: {what}" if where else f"{key} {what}")
    return need


_CHOICES: dict[type, dict[str, tuple[Any, ...]]] = {}


def _choices(cls: type) -> dict[str, tuple[Any, ...]]:
    """Field -> the values its ``Literal`` type allows (of a list's items for ``list[Literal]``); read once per class."""
    if cls not in _CHOICES:
        out = {}
        for name, tp in typing.get_type_hints(cls).items():
            if typing.get_origin(tp) is list:
                (tp,) = typing.get_args(tp)
            if typing.get_origin(tp) is Literal:
                out[name] = typing.get_args(tp)
        _CHOICES[cls] = out
    return _CHOICES[cls]


class Section:
    """A section that checks its own fields (in the spirit of a config that validates itself).

    :meth:`check` runs the plain bounds (:attr:`AT_LEAST`, :attr:`WITHIN`), the ``Literal`` choices
    (which ``--set`` coercion already enforces; a section built in Python meets them here) and
    :meth:`_check_own`, the rules between the section's own keys. Rules between sections live in
    :mod:`xmask_cli.config_rules`.
    """

    #: key -> lowest value, or ``(lowest, note)``.
    AT_LEAST: ClassVar[Mapping[str, float | tuple[float, str]]] = {}
    #: key -> closed range ``(low, high)``.
    WITHIN: ClassVar[Mapping[str, tuple[float, float]]] = {}

    def check(self, where: str) -> None:
        """Raise :class:`ConfigError` naming ``<where>.<key>`` on the first field out of its domain."""
        need = needer(where)
        for key, bound in self.AT_LEAST.items():
            low, note = bound if isinstance(bound, tuple) else (bound, "")
            need(getattr(self, key) >= low, key, f"must be >= {low}" + (f" ({note})" if note else ""))
        for key, (low, high) in self.WITHIN.items():
            need(low <= getattr(self, key) <= high, key, f"must lie in [{low}, {high}]")
        for key, allowed in _choices(type(self)).items():
            value = getattr(self, key)
            for i, v in enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]:
                need(v in allowed, key if i is None else f"{key}[{i}]", f"must be one of {allowed}, got {v!r}")
        self._check_own(need, lambda key: f"{where}.{key}" if where else key)

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        """Rules between this section's own keys; ``at(key)`` names another key in a message."""
