"""``--set`` on a searched key: the key is taken out of the search space, so every trial keeps the value set.

``xmask tune --preset cora --set model.hidden=16`` searches the preset's space without ``model.hidden``
(every trial trains width 16) and says so on stderr. A key whose space entry is itself given on the command
line (``--set tune.model.hidden='{choice: [16, 32]}'``) stays searched: the entry was asked for, and the
value set is where the search starts (trial 0).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from xmask_cli.config import Config
from xmask_cli.config_resolve import Override, parse_override, shorten
from xmask_cli.tune.space import parse_space

__all__ = ["fixed_keys", "narrow_space", "fixed_note"]


def _dotted(prefix: str, value: Any) -> list[str]:
    """``prefix`` and, for a mapping value (``--set model='{hidden: 16}'``), every dotted key below it."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _dotted(f"{prefix}.{k}", v)
    return out


def _parts(item: Override) -> tuple[list[str], Any]:
    if isinstance(item, str):
        return parse_override(item)
    key, value = item
    parts = str(key).split(".")
    return (["tune", ".".join(parts[1:])] if parts[0] == "tune" and len(parts) > 1 else parts), value


def fixed_keys(overrides: Sequence[Override]) -> tuple[str, ...]:
    """The dotted keys ``overrides`` (``--set`` texts or ``(key, value)`` pairs) set, less those whose search
    space entry they also give (``tune.<key>``, or a ``tune`` mapping naming it)."""
    fixed: list[str] = []
    spaced: list[str] = []
    for item in overrides:
        parts, value = _parts(item)
        if parts[0] != "tune":
            fixed += _dotted(".".join(parts), value)
        elif len(parts) > 1:
            spaced.append(parts[1])
        elif isinstance(value, dict):
            spaced += [str(k) for k in value]
    return tuple(k for k in dict.fromkeys(fixed)
                 if not any(k == s or k.startswith(s + ".") or s.startswith(k + ".") for s in spaced))


def _value(cfg: Config, key: str) -> Any:
    node: Any = cfg.to_dict()
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def narrow_space(cfg: Config, fixed: Sequence[str]) -> tuple[Config, list[str]]:
    """``cfg`` with the searched keys among ``fixed`` dropped from its ``tune:`` space, and those keys."""
    if not cfg.tune or not fixed:
        return cfg, []
    params = parse_space(cfg.tune)
    pinned = [p.key for p in params if p.key in set(fixed)]
    if not pinned:
        return cfg, []
    tune = {p.key: p.to_dict() for p in params if p.key not in pinned}
    return dataclasses.replace(cfg, tune=tune), pinned


def fixed_note(cfg: Config, key: str) -> str:
    """The note on stderr for a searched ``key`` that ``--set`` fixed (once the study's setup is accepted)."""
    return (f"note: --set {key}={shorten(_value(cfg, key))} fixes a searched key: {key} is not searched, every "
            f"trial uses that value (to search it, leave it out of --set or give its range with --set tune.{key}=...)")
