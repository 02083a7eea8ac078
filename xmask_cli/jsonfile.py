"""The one reader of the JSON xmask reads back (a leaf: imports nothing of xmask but its errors and fs).

Run files (``config.json``, ``summary.json``, ``metrics.jsonl``), fold index files, a study's
``summary.json`` and the JSON text a cache file keeps in its attributes were written by xmask, but
whatever is on disk now may have been edited, truncated or replaced. Everything read back goes
through :func:`read_json` / :func:`read_json_lines` / :func:`parse_json`, which bound the size and the
nesting depth before a value is built (Python's parser recurses: 100,000 nested ``[`` raise
``RecursionError``), check the top-level type, and check the fields the caller will use
(:func:`check_fields`). A file that fails is *damaged*: the caller's error type (exit 6 for a run,
4 for the cache) with one line that names the file and says why.

Example::

    summary = read_json(run / "summary.json", fields={"metrics": MapOf(Number)})
"""
from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np

from xmask_cli.errors import RunNotFoundError, XMaskError
from xmask_cli.fs import NotRegularFile, open_regular_fd

__all__ = ["MAX_BYTES", "MAX_DEPTH", "Damaged", "MapOf", "Number", "OptionalInt", "check_fields", "parse_checked", "parse_json",
           "read_json", "read_json_lines"]

#: Largest JSON file (or attribute text) read back, and deepest nesting of arrays and objects. xmask's own
#: files nest 5 deep; the largest are fold files and metrics of long runs (a few MB).
MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64
#: Field types :func:`check_fields` understands beside plain types and tuples of them: a number (int or
#: float, never bool), an int or None; :class:`MapOf`, ``list[T]`` and ``dict[str, T]`` check every value.
Number = (int, float)
OptionalInt = (int, type(None))
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_HINT = "restore it, or train again with --overwrite"


class Damaged(ValueError):
    """A JSON text that fails the bounds or the expected shape (``str(err)`` says why, without the file)."""


def _depth(data: bytes) -> int:
    """Deepest nesting of ``[`` / ``{`` in JSON text, strings left out (their brackets are not structure).

    Only the brackets are kept (``bytes.translate``, C speed) and summed in blocks, so a file of
    millions of brackets is measured in a fraction of a second and nothing is parsed.
    """
    brackets = _STRINGS.sub(b'""', data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for start in range(0, len(brackets), 1 << 20):
        block = np.frombuffer(brackets[start:start + (1 << 20)], dtype=np.uint8)
        steps = np.where((block == 0x5B) | (block == 0x7B), 1, -1).astype(np.int64)
        running = depth + np.cumsum(steps)
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


def parse_json(data: str | bytes, expect: type | tuple[type, ...] = dict, *, max_depth: int = MAX_DEPTH,
               max_bytes: int = MAX_BYTES) -> Any:
    """``data`` parsed, once its size, depth and top-level type are within bounds.

    Raises:
        Damaged: not UTF-8 JSON, longer than ``max_bytes``, nested deeper than ``max_depth``, or whose
            top-level value is not an ``expect``.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise Damaged(f"{len(raw)} bytes, more than the {max_bytes} a JSON file of xmask may hold")
    if _depth(raw) > max_depth:
        raise Damaged(f"nested more than {max_depth} levels deep")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Damaged(f"not JSON: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not isinstance(value, expect):
        raise Damaged(f"not a JSON {_kind(expect)} but {_json_kind(value)}")
    return value


def _kind(expect: type | tuple[type, ...]) -> str:
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
             type(None): "null"}
    types = expect if isinstance(expect, tuple) else (expect,)
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _json_kind(value: Any) -> str:
    """``an array``, ``a string``: what a value is, as JSON names it."""
    kind = _kind(type(value))
    return ("an " if kind[0] in "aeiou" else "a ") + kind


class MapOf:
    """A field type: a JSON object whose values are all ``value`` (a type or a tuple of types)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _fits(value: Any, want: Any) -> bool:
    if isinstance(want, MapOf):
        return isinstance(value, dict) and all(isinstance(k, str) and _fits(v, want.value) for k, v in value.items())
    if isinstance(want, tuple):
        return isinstance(value, want) and not (isinstance(value, bool) and bool not in want)
    if isinstance(want, type):
        return isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
    origin = getattr(want, "__origin__", None)
    if origin is Mapping or origin is dict:
        _, value_type = want.__args__
        return isinstance(value, dict) and all(isinstance(k, str) and _fits(v, value_type) for k, v in value.items())
    if origin is list:
        (item,) = want.__args__
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if origin is Union:
        return any(_fits(value, t) for t in want.__args__)
    raise TypeError(f"check_fields cannot check {want!r}")


def check_fields(obj: Mapping[str, Any], fields: Mapping[str, Any], optional: Mapping[str, Any] | None = None) -> None:
    """``obj[name]`` is of type ``fields[name]`` for each name (and of ``optional[name]`` where present).

    Raises:
        Damaged: a field missing or of another type; the message names it.
    """
    for name, want in fields.items():
        if name not in obj:
            raise Damaged(f"no '{name}' field")
        if not _fits(obj[name], want):
            raise Damaged(f"'{name}' is {_json_kind(obj[name])}, not what xmask writes there")
    for name, want in (optional or {}).items():
        if name in obj and not _fits(obj[name], want):
            raise Damaged(f"'{name}' is {_json_kind(obj[name])}, not what xmask writes there")


def parse_checked(data: Any, where: str, expect: type | tuple[type, ...] = dict, *,
                  fields: Mapping[str, Any] | None = None, optional: Mapping[str, Any] | None = None,
                  error: type[XMaskError] = RunNotFoundError, hint: str = _HINT, max_bytes: int = MAX_BYTES,
                  max_depth: int = MAX_DEPTH) -> Any:
    """JSON text that is not a file of its own (a cache file's attribute, a checkpoint's saved config),
    checked as :func:`read_json` checks a file.

    Raises:
        error: ``<where> is damaged (<why>); <hint>``.
    """
    try:
        if not isinstance(data, (str, bytes)):
            raise Damaged(f"not JSON text but {type(data).__name__}")
        value = parse_json(data, expect, max_depth=max_depth, max_bytes=max_bytes)
        if fields or optional:
            check_fields(value, fields or {}, optional)
    except Damaged as exc:
        raise error(f"{where} is damaged ({exc}); {hint}") from None
    return value


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    """The file's bytes; only a regular file is read (opened without blocking: a FIFO never hangs)."""
    try:
        fd = open_regular_fd(path)
    except NotRegularFile:
        raise Damaged("not a regular file") from None
    try:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise Damaged(f"{st.st_size} bytes, more than the {max_bytes} a JSON file of xmask may hold")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Damaged(f"more than the {max_bytes} bytes a JSON file of xmask may hold")
    return data


def read_json(path: str | os.PathLike[str], expect: type | tuple[type, ...] = dict, *,
              fields: Mapping[str, Any] | None = None, optional: Mapping[str, Any] | None = None,
              error: type[XMaskError] = RunNotFoundError, hint: str = _HINT, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``path``, checked (bounds, top-level type, ``fields`` / ``optional``).

    Args:
        error: raised for a damaged file (``RunNotFoundError``, exit 6: a run's files; ``CacheError``: the cache's).
        hint: what the user can do, after the reason.

    Raises:
        FileNotFoundError: no file (the caller says what is missing).
        error: ``<path> is damaged (<why>); <hint>``.
    """
    path = Path(path)
    return parse_checked(_file_bytes(path, max_bytes, error, hint), str(path), expect, fields=fields,
                         optional=optional, error=error, hint=hint, max_bytes=max_bytes, max_depth=max_depth)


def _file_bytes(path: Path, max_bytes: int, error: type[XMaskError], hint: str) -> bytes:
    """:func:`_read_bytes`, a damaged or unreadable file raised as ``error`` (a missing one as itself)."""
    try:
        return _read_bytes(path, max_bytes)
    except FileNotFoundError:
        raise
    except Damaged as exc:
        raise error(f"{path} is damaged ({exc}); {hint}") from None
    except OSError as exc:
        reason = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or type(exc).__name__)
        raise error(f"{path} is damaged or unreadable ({reason}); {hint}") from None


def read_json_lines(path: str | os.PathLike[str], *, fields: Mapping[str, Any] | None = None,
                    optional: Mapping[str, Any] | None = None, error: type[XMaskError] = RunNotFoundError,
                    hint: str = _HINT, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    """Every non-blank line of ``path`` as a JSON object, each checked as :func:`read_json` checks a file.

    Raises:
        FileNotFoundError: no file.
        error: ``<path> line <n> is damaged (<why>); <hint>``.
    """
    path = Path(path)
    data = _file_bytes(path, max_bytes, error, hint)
    rows = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, dict, max_depth=max_depth, max_bytes=max_bytes)
            if fields or optional:
                check_fields(row, fields or {}, optional)
        except Damaged as exc:
            raise error(f"{path} line {n} is damaged ({exc}); {hint}") from None
        rows.append(row)
    return rows
