"""Presets and overrides -> a checked :class:`~xmask_cli.config.Config`: the one entry point, :func:`resolve`.

A preset (YAML with ``extends:``, :mod:`xmask_cli.config_presets`) or a base mapping, then dotted
``--set`` overrides applied in order, then typed coercion into the schema (:mod:`xmask_cli.config_build`:
unknown keys fail with the nearest valid key named, wrong types with the key and the expected type),
each section's own checks (:mod:`xmask_cli.config`), the config-stage rules between sections
(:mod:`xmask_cli.config_rules`) and the ``tune:`` space (:mod:`xmask_cli.config_space`). Every check
runs on every entry point that builds a config (the CLI, ``xmask_cli.train``, a direct call), whatever
was imported before. The names of the modules below are re-exported here.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from xmask_cli.config import Config
from xmask_cli.config_build import MAX_SHOWN, coerce, shorten
from xmask_cli.config_build import build as build_section
from xmask_cli.config_presets import (
    MAX_EXTENDS_DEPTH,
    MAX_PRESET_FILES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    YamlTooLarge,
    find_preset,
    list_presets,
    load_preset_dict,
    load_yaml_bounded,
    merge,
    packaged_presets_dir,
    preset_dirs,
    read_yaml,
)
from xmask_cli.config_space import check_section
from xmask_cli.errors import ConfigError

__all__ = ["MAX_EXTENDS_DEPTH", "MAX_PRESET_FILES", "MAX_SHOWN", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "Override",
           "YamlTooLarge", "apply_overrides", "build", "coerce", "find_preset", "list_presets", "load_preset_dict",
           "load_yaml_bounded", "packaged_presets_dir", "parse_override", "preset_dirs", "read_yaml", "resolve",
           "shorten"]


# ----------------------------------------------------------------- overrides
#: One override: a ``--set`` text ``"KEY=VALUE"`` (the value parsed as YAML), or a ``(dotted key, value)`` pair
#: whose Python value is taken as it is; both then pass the same schema coercion and checks.
Override = str | tuple[str, Any]


def _key_parts(key: str, shown: str) -> list[str]:
    """``"a.b"`` -> ``["a", "b"]``; ``shown`` is what an error quotes (the ``--set`` text, or the key)."""
    parts = key.strip().split(".")
    if not key.strip():
        raise ConfigError(f"--set '{shown}': empty key")
    if any(not p.strip() for p in parts):  # model..heads, .heads, heads.: a typo, never a key
        raise ConfigError(f"--set '{shown}': empty part in key '{key.strip()}'; keys are dotted names such as model.heads")
    parts = [p.strip() for p in parts]
    if parts[0] == "tune" and len(parts) > 2:  # tune's keys are dotted names: tune.model.hidden -> tune["model.hidden"]
        parts = ["tune", ".".join(parts[1:])]
    return parts


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=v"`` -> (``["a", "b"]``, typed ``v``), values parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"--set '{text}': expected KEY=VALUE, e.g. --set structure.powers.k=3")
    key, raw = text.split("=", 1)
    parts = _key_parts(key, text)
    try:
        value = load_yaml_bounded(raw) if raw.strip() else ""
    except YamlTooLarge as exc:
        raise ConfigError(f"--set '{key.strip()}=...': the value is too large: {exc}") from None
    except yaml.YAMLError:
        value = raw
    return parts, value


def _override_parts(item: Override) -> tuple[list[str], Any]:
    if isinstance(item, str):
        return parse_override(item)
    key, value = item
    if not isinstance(key, str):
        raise ConfigError(f"override key {shorten(key)}: expected a dotted name such as model.heads")
    # A copy: the resolved config must not share a list or mapping the caller may change afterwards.
    return _key_parts(key, key), copy.deepcopy(value)


def apply_overrides(data: dict[str, Any], overrides: Iterable[Override]) -> dict[str, Any]:
    """Return ``data`` with every override applied in order (schema checks come later)."""
    out = merge({}, data)
    for item in overrides:
        parts, value = _override_parts(item)
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = {}
                node[p] = nxt
            node = nxt
        node[parts[-1]] = value
    return out


def resolve(preset: str | None = None, overrides: Sequence[Override] | None = None,
            base: dict[str, Any] | None = None) -> Config:
    """Preset name/path (or none: ``base``, else the schema defaults) + overrides -> :class:`Config`.

    ``overrides``, applied in order: ``--set`` texts (``"model.hidden=16"``) and ``(dotted key, value)``
    pairs (``("model.hidden", 16)``: the Python value is not parsed, so ``"007"`` stays a string); either
    form passes the same coercion and checks, with the same errors.
    """
    data = load_preset_dict(preset) if preset else dict(base or {})
    data = apply_overrides(data, overrides or [])
    return build(Config, data)


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Instantiate schema dataclass ``cls`` from ``data`` with every check (:func:`config_build.build
    <xmask_cli.config_build.build>`); a whole :class:`Config` has its ``tune:`` space checked too."""
    obj = build_section(cls, data, prefix)
    if isinstance(obj, Config):
        check_section(obj)
    return obj

