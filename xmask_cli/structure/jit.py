"""numba for the structure kernels, its on-disk cache of compiled code kept in the user's cache folder.

numba's ``cache=True`` writes ``.nbi`` / ``.nbc`` files beside the source
(``xmask_cli/structure/__pycache__``) unless ``NUMBA_CACHE_DIR`` names another
folder: inside site-packages or a user's checkout, and impossible on a read-only
install. The kernels import numba from here, which sets that folder first.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["numba", "numba_cache_dir"]


def numba_cache_dir() -> Path:
    """Where compiled kernels are cached: ``NUMBA_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/xmask/numba``
    (``~/.cache/xmask/numba``)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home folder known (no HOME, no passwd entry)
            base = str(Path(tempfile.gettempdir()) / f"xmask-{os.getuid()}")
    return Path(base) / "xmask" / "numba"


# Set before numba reads its configuration; kept in the environment so spawned workers use the same folder.
os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_dir())

import numba  # noqa: E402

# numba imported earlier (by another library) read its configuration already.
numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
