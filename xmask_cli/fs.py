"""Filesystem checks every layer uses (a leaf: imports nothing of xmask but its errors)."""
from __future__ import annotations

import os
from pathlib import Path

from xmask_cli.errors import NotWritableError

__all__ = ["ensure_writable_dir"]


def ensure_writable_dir(path: Path, what: str = "cache dir", hint: str = "pass --cache-dir or set XMASK_CACHE") -> Path:
    """Create ``path`` if needed; fail with :class:`NotWritableError` if it cannot take files.

    Args:
        what, hint: how the message names the folder and what to do (``"output folder"``, ``"pass another --out"``).

    Raises:
        NotWritableError: ``path`` (or a parent) is a file, or it cannot be created or written.
    """
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                where = f"{what} {path}" + ("" if p == path else f": {p}")
                raise NotWritableError(f"{where} is a file, not a folder; {hint}")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritableError(f"cannot create {what} {path}: {exc.strerror}; {hint}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise NotWritableError(f"{what} {path} is not writable; {hint}")
    return path
