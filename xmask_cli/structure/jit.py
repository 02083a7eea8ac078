"""numba for the structure kernels, its on-disk cache of compiled code kept in the user's cache folder.

numba's ``cache=True`` writes ``.nbi`` / ``.nbc`` files beside the source
(``xmask_cli/structure/__pycache__``) unless ``NUMBA_CACHE_DIR`` names another
folder: inside site-packages or a user's checkout, and impossible on a read-only
install. The kernels import numba from here, which sets that folder first.
"""
from __future__ import annotations

import os
import stat
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
            base = _private_temp_dir()
    return Path(base) / "xmask" / "numba"


def _private_temp_dir() -> str:
    """``<tmp>/xmask-<uid>`` when it is this user's own private folder, else a fresh private one.

    numba loads pickled code from its cache: a folder another user could have made first (or could write
    into) is never used.
    """
    path = Path(tempfile.gettempdir()) / f"xmask-{os.getuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="xmask-")
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return str(path)
    return tempfile.mkdtemp(prefix="xmask-")


# Set before numba reads its configuration; kept in the environment so spawned workers use the same folder.
os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_dir())

import numba  # noqa: E402

# numba imported earlier (by another library) read its configuration already.
numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]  # type: ignore[attr-defined]  # set at runtime by numba
