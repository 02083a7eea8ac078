"""Preset files: where they are found, how one is read (bounded YAML), and ``extends:`` inheritance.

A preset is a UTF-8 YAML mapping of sections; ``extends:`` names the presets it builds on (a name, a
path relative to the file, or a list of them; later ones and the file itself win). Loading is linear
in the files: each file is read and parsed once per load, however many paths of the ``extends:`` graph
reach it; the graph is checked for cycles, and bounded in files (:data:`MAX_PRESET_FILES`) and depth
(:data:`MAX_EXTENDS_DEPTH`). Every refusal is a :class:`~xmask_cli.errors.ConfigError` (exit 2) naming
the file. A leaf: the schema is applied later (:mod:`xmask_cli.config_resolve`).
"""
from __future__ import annotations

import copy
import difflib
import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from xmask_cli.config_build import MAX_SHOWN, shorten
from xmask_cli.errors import ConfigError, UsageError

__all__ = ["MAX_YAML_NODES", "MAX_YAML_DEPTH", "MAX_PRESET_FILES", "MAX_EXTENDS_DEPTH", "YamlTooLarge",
           "packaged_presets_dir", "preset_dirs", "list_presets", "find_preset", "load_yaml_bounded", "read_yaml",
           "merge", "load_preset_dict"]

#: What one preset file (or one ``--set`` value) may expand to, aliases expanded: the shipped presets hold
#: about 200 values nested 6 deep. Checked while loading, so an alias bomb never gets expanded.
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 32
#: Files one preset may reach through ``extends:`` (the shipped presets reach at most a handful).
MAX_PRESET_FILES = 100
#: Longest ``extends:`` chain from a preset to a root ancestor, the preset itself counted.
MAX_EXTENDS_DEPTH = 32


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
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); a preset is a UTF-8 YAML file") from None
    try:
        data = load_yaml_bounded(text) or {}
    except YamlTooLarge as exc:
        raise ConfigError(f"{path}: too large for a preset: {exc}; a preset holds at most {MAX_YAML_NODES} "
                          f"values nested at most {MAX_YAML_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0][:MAX_SHOWN]})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of sections, got {type(data).__name__}")
    return data


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, mappings key by key (``over`` wins); neither argument is changed."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _parents(path: Path, value: Any) -> list[str]:
    """The names a file's ``extends:`` value gives: one name or a list of names (null: none)."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{path}: extends must be a preset name or a list of names, got {shorten(value)} "
                          f"({type(value).__name__})")
    return names


class _Loader:
    """One load of a preset: its files read once each (memoised by resolved path), the graph bounded."""

    def __init__(self) -> None:
        self.merged: dict[Path, dict[str, Any]] = {}
        self.files = 0  # files read so far (a file is merged only once its parents are)

    def load(self, name: str, relative: Path | None, chain: tuple[Path, ...]) -> dict[str, Any]:
        path = find_preset(name, relative_to=relative)
        key = path.resolve()
        if key in chain:
            loop = " -> ".join(p.stem for p in (*chain[chain.index(key):], key))
            raise ConfigError(f"preset '{path.stem}' extends itself through {loop} ({path})")
        if key in self.merged:
            return self.merged[key]
        if len(chain) >= MAX_EXTENDS_DEPTH:
            raise ConfigError(f"{chain[0]}: extends: chains longer than {MAX_EXTENDS_DEPTH} presets "
                              f"(reached {path})")
        if self.files >= MAX_PRESET_FILES:
            raise ConfigError(f"{chain[0]}: extends: reaches more than {MAX_PRESET_FILES} preset files "
                              f"(reached {path})")
        self.files += 1
        data = read_yaml(path)
        merged: dict[str, Any] = {}
        for parent in _parents(path, data.pop("extends", None)):
            merged = merge(merged, self.load(parent, path.parent, (*chain, key)))
        self.merged[key] = out = merge(merged, data)
        return out


def load_preset_dict(name_or_path: str) -> dict[str, Any]:
    """Raw merged mapping of a preset and everything it ``extends`` (the caller's own copy).

    Raises:
        UsageError: no such preset.
        ConfigError: a file that is not UTF-8 YAML within the bounds, an ``extends:`` that is not a name
            or a list of names, a cycle, or a graph beyond :data:`MAX_PRESET_FILES` / :data:`MAX_EXTENDS_DEPTH`.
    """
    return copy.deepcopy(_Loader().load(name_or_path, None, ()))
