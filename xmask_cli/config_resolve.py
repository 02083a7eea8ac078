"""Presets: YAML with ``extends:``, dotted ``--set`` overrides, typed coercion into the schema.

Unknown keys fail with the nearest valid key named, wrong types fail with the
key and the expected type; :func:`resolve` is the one entry point (preset +
overrides -> :class:`~xmask_cli.config.Config`). The schema itself is
:mod:`xmask_cli.config` (each section checks its own fields), the rules between sections
:mod:`xmask_cli.config_rules`; building a config runs both. Checks that need a layer above the leaves (bias types, the ``tune:``
space) run once that layer has registered them (:func:`register_check`): on import of its module,
and for every CLI command before it resolves a preset.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from xmask_cli.config import Config
from xmask_cli.config_rules import check_rules
from xmask_cli.config_section import Section
from xmask_cli.errors import ConfigError, UsageError


# ------------------------------------------------------------------- presets
def packaged_presets_dir() -> Path:
    """Folder of the presets shipped with xmask.

    A wheel carries the repo's ``presets/`` as ``xmask_cli/presets``; a source
    checkout (or an editable install) reads ``presets/`` beside the package.
    """
    installed = Path(str(resources.files("xmask_cli"))) / "presets"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "presets"


def preset_dirs() -> list[Path]:
    """Where preset names are looked up: ``XMASK_PRESETS`` (``:``-separated) first."""
    extra = [Path(p) for p in os.environ.get("XMASK_PRESETS", "").split(os.pathsep) if p]
    return [*extra, packaged_presets_dir()]


def list_presets() -> dict[str, Path]:
    """Preset name -> file, earlier directories shadowing later ones."""
    found: dict[str, Path] = {}
    for d in reversed(preset_dirs()):
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                found[p.stem] = p
    return dict(sorted(found.items()))


def find_preset(name_or_path: str, *, relative_to: Path | None = None) -> Path:
    """Resolve a preset name or a YAML path to a file."""
    candidates = []
    if relative_to is not None:
        candidates.append(relative_to / name_or_path)
        candidates.append(relative_to / f"{name_or_path}.yaml")
    candidates.append(Path(name_or_path))
    for c in candidates:
        if c.suffix in (".yaml", ".yml") and c.is_file():
            return c
    presets = list_presets()
    if name_or_path in presets:
        return presets[name_or_path]
    close = difflib.get_close_matches(name_or_path, list(presets), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UsageError(f"unknown preset '{name_or_path}': {hint}see `xmask presets ls` for the {len(presets)} available")


#: What one preset file (or one ``--set`` value) may expand to, aliases expanded: the shipped presets hold
#: about 200 values nested 6 deep. Checked while loading, so an alias bomb never gets expanded.
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 32
#: Longest value quoted in an error message.
MAX_SHOWN = 200


def shorten(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to about ``limit`` characters: an error message never carries a huge value."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class YamlTooLarge(yaml.YAMLError):
    """A YAML document beyond :data:`MAX_YAML_NODES` values or :data:`MAX_YAML_DEPTH` levels."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the nesting depth bounded while composing (its composer recurses)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise YamlTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: Any) -> None:
    """Count the nodes ``root`` expands to (an alias counts as often as it is used), stopping at the bound."""
    stack = [(root, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise YamlTooLarge(f"expands to more than {MAX_YAML_NODES} values (aliases counted each time they are used)")
        if depth > MAX_YAML_DEPTH:
            raise YamlTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels (aliases expanded)")
        if isinstance(node, yaml.SequenceNode):
            stack += [(child, depth + 1) for child in node.value]
        elif isinstance(node, yaml.MappingNode):
            stack += [(child, depth + 1) for pair in node.value for child in pair]


def load_yaml_bounded(text: str) -> Any:
    """``yaml.safe_load(text)`` within :data:`MAX_YAML_NODES` and :data:`MAX_YAML_DEPTH`.

    Raises:
        YamlTooLarge: beyond the bounds (checked before any value is built).
        yaml.YAMLError: not YAML.
    """
    loader = _BoundedLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expansion(node)
        except RecursionError:
            raise YamlTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels") from None
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: Path) -> dict[str, Any]:
    """One preset file as a mapping (no inheritance applied), within :data:`MAX_YAML_NODES` values."""
    try:
        data = load_yaml_bounded(path.read_text()) or {}
    except YamlTooLarge as exc:
        raise ConfigError(f"{path}: too large for a preset: {exc}; a preset holds at most {MAX_YAML_NODES} "
                          f"values nested at most {MAX_YAML_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0][:MAX_SHOWN]})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of sections, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_preset_dict(name_or_path: str, *, _seen: tuple[str, ...] = (), _relative: Path | None = None) -> dict[str, Any]:
    """Raw merged mapping of a preset and everything it ``extends``."""
    path = find_preset(name_or_path, relative_to=_relative)
    key = str(path.resolve())
    if key in _seen:
        raise ConfigError(f"preset '{path.stem}' extends itself through {' -> '.join(Path(s).stem for s in _seen)}")
    data = read_yaml(path)
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = _merge(merged, load_preset_dict(str(parent), _seen=(*_seen, key), _relative=path.parent))
    return _merge(merged, data)


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
    out = _merge({}, data)
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


# ---------------------------------------------------------------- validation
def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as schema type ``tp`` (dataclass lists built and checked); ConfigError naming ``key`` if it is not one."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{key}: expected {_type_name(tp)}, got {shorten(value)} ({type(value).__name__})")
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin in (typing.Union, types.UnionType):
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
    if origin is dict:  # free-form mappings (the tune section) are checked by their owner
        if value is None:  # `tune: null` clears an inherited mapping
            return {}
        if isinstance(value, dict):
            return dict(value)
        raise bad
    if origin is list:
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
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "1e-30" as a string
            try:
                out = float(value)
            except ValueError:
                raise bad from None
        else:
            raise bad
        if not math.isfinite(out):  # no setting means anything at inf or nan (train.lr=inf trains to NaN)
            raise ConfigError(f"{key}: expected a finite number, got {shorten(value)}")
        return out
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    raise bad


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Instantiate dataclass ``cls`` from ``data``, checking keys and types."""
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
    _check_built(obj, prefix)
    return obj


def _check_built(obj: Any, prefix: str) -> None:
    """A built section's own checks (:meth:`~xmask_cli.config_section.Section.check`) or, for the whole
    config, the rules between its sections (:mod:`xmask_cli.config_rules`, config stage); then the checks
    registered for its type (:func:`register_check`)."""
    if isinstance(obj, Section):
        obj.check(prefix)
    elif isinstance(obj, Config):
        check_rules(obj)

    def need(cond: bool, key: str, what: str) -> None:
        if not cond:
            raise ConfigError(f"{prefix}.{key}: {what}")

    for section, checks in _CHECKS.items():
        if isinstance(obj, section):
            for check in list(checks.values()):
                check(obj, need)


#: A check a layer above the leaves owns: called with the built section and ``need(cond, key, what)``
#: (which raises :class:`~xmask_cli.errors.ConfigError` naming ``<section>.<key>``).
SectionCheck = Callable[[Any, Callable[[bool, str, str], None]], None]
#: Section type -> its registered checks by name, run after the section's own checks above.
_CHECKS: dict[type, dict[str, SectionCheck]] = {}


def register_check(section: type, name: str, check: SectionCheck) -> None:
    """Run ``check`` on every ``section`` built from now on; a check registered under ``name`` before is replaced.

    The layers that own knowledge the schema lacks register here rather than being imported from this
    leaf: the bias registry (:mod:`xmask_cli.model.biases`) checks ``model.biases[].type``, and
    :mod:`xmask_cli.tune.space` the ``tune:`` section, each when imported; the CLI registers forwarders
    to both before any command resolves a preset (:mod:`xmask_cli.cli.checks`).
    """
    _CHECKS.setdefault(section, {})[name] = check


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

