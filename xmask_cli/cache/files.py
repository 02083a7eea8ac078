"""Names and keys of cache files: the format version, the key, the path, temp names, whose files are stale."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from xmask_cli.errors import CacheError
from xmask_cli.jsonfile import parse_checked

__all__ = ["FORMAT_VERSION", "H5_ERRORS", "HDF5_SIGNATURE", "KEY_NAME", "TMP_NAME", "cache_key", "cache_path",
           "is_stale_temp", "pid_alive"]

# Bump whenever the layout or the numbers written change: the key includes it, so old files are
# then rebuilt instead of misread. 2: large graphs keep Â^1 and every real edge whole, dropped mass recorded.
# 3: spectra solved per connected component (every zero pair, then the m lowest non-zero ones).
FORMAT_VERSION = 3

#: What h5py raises on a damaged file: OSError (checksums, truncation), RuntimeError (metadata, e.g.
#: "bad heap free list"), ValueError / KeyError / TypeError (attributes of the wrong shape or type).
H5_ERRORS = (OSError, RuntimeError, ValueError, KeyError, TypeError)


def cache_key(fingerprint: str, params: dict[str, Any]) -> str:
    """Short hash of the input fingerprint, the canonical parameters and the format version."""
    blob = json.dumps({"fingerprint": fingerprint, "params": params, "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cache_path(cache_dir: Path, dataset_key: str, key: str) -> Path:
    """``<cache_dir>/<dataset_key>/<key>.h5``."""
    return Path(cache_dir) / dataset_key / f"{key}.h5"


#: A cache file's name: its key (see :func:`cache_key`).
KEY_NAME = re.compile(r"^[0-9a-f]{20}\.h5$")
#: A temporary file of :class:`CacheWriter`: ``.<key>.h5.tmp-<writer pid>``.
TMP_NAME = re.compile(r"^\.[0-9a-f]{20}\.h5\.tmp-(\d+)$")
#: The first bytes of every HDF5 file.
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a writer still running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale_temp(path: Path) -> bool:
    """A :class:`CacheWriter` temp file whose writer process is gone."""
    m = TMP_NAME.match(path.name)
    return m is not None and path.is_file() and not path.is_symlink() and not pid_alive(int(m.group(1)))


def cache_json(value: Any, path: str | os.PathLike[str], attr: str) -> dict[str, Any]:
    """A JSON-object attribute (``params``, ``truncation``, ``dropped_mass``) of the cache file ``path``, read
    through the bounded reader (:mod:`xmask_cli.jsonfile`).

    Raises:
        CacheError: the attribute is missing, not JSON text, too large or deep, or not an object (exit 4).
    """
    parsed: dict[str, Any] = parse_checked(value, f"cache {path} (attribute {attr})", dict, error=CacheError,
                                           hint="run `xmask cache verify`, then `xmask prepare ... --force` to "
                                                "rebuild it")
    return parsed
