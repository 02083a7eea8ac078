"""Managing the cache dir: ``xmask cache ls`` (listing), ``verify``, ``clear`` (only files provably xmask's)."""
from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from xmask_cli.cache.files import (
    FORMAT_VERSION,
    H5_ERRORS,
    HDF5_SIGNATURE,
    KEY_NAME,
    TMP_NAME,
    cache_json,
    cache_key,
    is_stale_temp,
    pid_alive,
)
from xmask_cli.data.staging import STAGING_MARKER
from xmask_cli.errors import CacheError, NotWritableError, UsageError, first_line
from xmask_cli.fs import refuse_file_as_dir

__all__ = ["CacheInfo", "cache_files", "clear", "dataset_folder", "holds", "info", "is_own_cache_file", "listing",
           "verify"]

_GROUPS_WITH_PAIRS = ("powers", "spd", "rrwp", "edge")


def holds(params: dict[str, Any]) -> list[str]:
    """What a file with these recorded parameters holds, in words: ``["A^1..A^4", "spd<=8", "spectrum m=16"]``.

    A file serves any request it holds (``xmask prepare`` copies a smaller one out of it, nothing recomputed).
    """
    out = []
    pw = params.get("powers", {})
    if "k" in pw:
        powers = "A^1" if int(pw["k"]) == 1 else f"A^1..A^{pw['k']}"
        out.append(powers + ("" if pw.get("normalization", "sym") == "sym" else f" ({pw['normalization']})"))
    if params.get("spd", {}).get("enabled"):
        out.append(f"spd<={params['spd'].get('max_distance')}")
    if params.get("spectrum", {}).get("enabled"):
        out.append(f"spectrum m={params['spectrum'].get('num_eigs')}")
    if params.get("magnetic", {}).get("enabled"):
        out.append(f"magnetic q={params['magnetic'].get('q')} m={params['magnetic'].get('num_eigs')}")
    if params.get("rrwp", {}).get("enabled"):
        out.append(f"rrwp steps={params['rrwp'].get('steps')}")
    if params.get("edge", {}).get("enabled"):
        out.append(f"edge attrs {params['edge'].get('encoding')} {params['edge'].get('dims')}")
    if int(params.get("partition", {}).get("parts", 0) or 0) > 0:
        out.append(f"parts={params['partition']['parts']}")
    return out


@dataclass(frozen=True)
class CacheInfo:
    """One row of ``xmask cache ls``."""

    path: Path
    dataset: str
    key: str
    size_bytes: int
    created: str
    params: dict[str, Any]
    num_graphs: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "dataset": self.dataset,
            "key": self.key,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "num_graphs": self.num_graphs,
            "params": self.params,
            "holds": holds(self.params),
        }


def info(path: Path) -> CacheInfo:
    """Summary of one cache file (raises :class:`CacheError` if unreadable)."""
    if not Path(path).is_file():
        raise CacheError(f"unreadable cache file {path}: not a regular file")
    try:
        with h5py.File(path, "r") as f:
            return CacheInfo(
                path=path,
                dataset=str(f.attrs.get("dataset", path.parent.name)),
                key=str(f.attrs.get("key", path.stem)),
                size_bytes=path.stat().st_size,
                created=str(f.attrs.get("created", "")),
                params=cache_json(f.attrs.get("params", "{}"), path, "params"),
                num_graphs=int(f["graphs/num_nodes"].shape[0]) if "graphs/num_nodes" in f else 0,
            )
    except H5_ERRORS as exc:
        raise CacheError(f"unreadable cache file {path}: {first_line(exc)}") from exc


def cache_files(cache_dir: Path, dataset: str | None = None) -> list[Path]:
    """Cache files under ``cache_dir`` (one dataset's, if given), temporary files excluded."""
    return [p for d in _dataset_dirs(cache_dir, dataset) for p in sorted(d.glob("*.h5")) if not p.name.startswith(".")]


def listing(cache_dir: Path, dataset: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``xmask cache ls``: every cache file (``status`` ``ok`` or ``corrupt``, with ``error``)
    and every writer temp file (``status`` ``writing`` while its process runs, ``stale`` once it is gone;
    the next writer in that folder removes stale ones)."""
    def unread(p: Path, key: str, **status: Any) -> dict[str, Any]:
        """The row of a file whose contents are not read (a temp file, or a file that cannot be)."""
        return {"path": str(p), "dataset": p.parent.name, "key": key, "size_bytes": _size(p), "created": "",
                "num_graphs": 0, "params": {}, "holds": [], **status}

    rows: list[dict[str, Any]] = []
    for d in _dataset_dirs(cache_dir, dataset):
        for p in sorted(d.iterdir()):
            m = TMP_NAME.match(p.name)
            if m:
                pid = int(m.group(1))
                rows.append(unread(p, p.name[1:21], status="writing" if pid_alive(pid) else "stale", writer_pid=pid))
            elif p.suffix == ".h5" and not p.name.startswith("."):
                try:
                    rows.append({**info(p).to_dict(), "status": "ok"})
                except CacheError as exc:
                    rows.append(unread(p, p.stem, status="corrupt", error=str(exc)))
    return rows


def _size(p: Path) -> int:
    try:
        return p.stat().st_size if p.is_file() else 0
    except OSError:
        return 0


def _dataset_dirs(cache_dir: Path, dataset: str | None) -> list[Path]:
    """Per-dataset folders of a cache dir (``_``-prefixed folders hold loader files, not caches)."""
    cache_dir = Path(cache_dir)
    refuse_file_as_dir(cache_dir)  # exit 5, as prepare says of it
    if not cache_dir.is_dir():
        return []
    dirs = [dataset_folder(cache_dir, dataset)] if dataset else sorted(d for d in cache_dir.iterdir() if not d.name.startswith("_"))
    return [d for d in dirs if d.is_dir()]


def verify(path: Path, expected_fingerprint: str | None = None, *, full: bool = True,
           expected_dataset: str | None = None) -> list[str]:
    """Problems with one cache file; an empty list means it is sound.

    Checks the format version, the completion flag, that the key in the name
    matches the recorded fingerprint and parameters (and, given, the expected
    fingerprint and dataset folder), the graph offsets, and with ``full`` reads
    every dataset in full (fletcher32 checksums catch corrupted chunks). Any
    failure of the HDF5 library, damaged metadata included, is a problem, never
    an exception.
    """
    path = Path(path)
    if not path.is_file():
        return ["not a regular file" if path.exists() else "missing"]
    try:
        f = h5py.File(path, "r")
    except H5_ERRORS as exc:
        return [f"cannot open: {first_line(exc)}"]
    try:
        with f:
            return _problems(f, path, expected_fingerprint, full, expected_dataset)
    except H5_ERRORS as exc:
        return [f"unreadable: {first_line(exc)}"]


def _problems(f: h5py.File, path: Path, expected_fingerprint: str | None, full: bool,
              expected_dataset: str | None) -> list[str]:
    problems: list[str] = []
    version = int(f.attrs.get("format_version", -1))
    if version != FORMAT_VERSION:
        problems.append(f"format version {version}, expected {FORMAT_VERSION}")
    if not bool(f.attrs.get("complete", False)):
        problems.append("incomplete write")
    try:
        params = cache_json(f.attrs["params"], path, "params")
        fp = str(f.attrs["fingerprint"])
        if cache_key(fp, params) != path.stem or str(f.attrs.get("key", "")) != path.stem:
            problems.append("file name does not match its recorded key, fingerprint and parameters")
        if expected_fingerprint is not None and fp != expected_fingerprint:
            problems.append("built from other input graphs than the dataset now on disk")
        if expected_dataset is not None and str(f.attrs.get("dataset", "")) != expected_dataset:
            problems.append(f"records dataset '{f.attrs.get('dataset', '')}', expected '{expected_dataset}'")
    except (KeyError, ValueError, TypeError) as exc:
        problems.append(f"missing or bad root attributes ({exc})")

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            try:
                for start in range(0, max(obj.shape[0], 1), 1 << 22):
                    obj[start:start + (1 << 22)]
            except (OSError, ValueError, RuntimeError) as exc:
                problems.append(f"dataset '{name}' unreadable: {first_line(exc)}")

    if full:
        try:
            f.visititems(visit)
        except (OSError, RuntimeError) as exc:
            problems.append(f"file structure unreadable: {first_line(exc)}")
    if "graphs/node_ptr" in f and "graphs/num_nodes" in f and not problems:
        ptr, nn = f["graphs/node_ptr"][()], f["graphs/num_nodes"][()]
        if ptr.shape[0] != nn.shape[0] + 1 or not np.array_equal(np.diff(ptr), nn):
            problems.append("graph offsets inconsistent with node counts")
        for group in _GROUPS_WITH_PAIRS:
            if f"{group}/indptr" in f:
                ip = f[f"{group}/indptr"]
                if ip.shape[0] != int(nn.sum()) + 1 or int(ip[-1]) != f[f"{group}/col"].shape[0]:
                    problems.append(f"'{group}/indptr' inconsistent with the node count or '{group}/col'")
    elif not problems:
        problems.append("missing graphs/node_ptr")
    return problems


def is_own_cache_file(path: Path) -> bool:
    """Whether ``path`` provably is a cache file xmask wrote (the only files ``clear`` deletes).

    It must be a regular file named ``<key>.h5``, start with the HDF5 signature,
    and record that key, a format version and its dataset folder in its root
    attributes. A file whose HDF5 metadata is too damaged to read those back is
    accepted on its name and signature alone (so a corrupt cache can be cleared).
    """
    path = Path(path)
    if not KEY_NAME.match(path.name) or path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != HDF5_SIGNATURE:
                return False
    except OSError:
        return False
    try:
        with h5py.File(path, "r") as f:
            attrs = dict(f.attrs)
    except (OSError, ValueError, RuntimeError, KeyError):
        return True
    return ("format_version" in attrs and str(attrs.get("key", "")) == path.stem
            and str(attrs.get("dataset", "")) == path.parent.name)


def dataset_folder(cache_dir: Path, dataset: str) -> Path:
    """The folder of ``dataset`` inside ``cache_dir``; a path argument must name one of its dataset folders.

    Raises:
        UsageError: ``dataset`` is a path (``..``, ``/x``, ``a/b``) that is not a dataset folder of ``cache_dir``.
    """
    seps = [s for s in (os.sep, os.altsep) if s]
    if dataset in (".", "..", "") or any(s in dataset for s in seps):
        p = Path(dataset).expanduser().resolve()
        if p.parent == Path(cache_dir).resolve() and p.is_dir() and not p.name.startswith("_"):
            return Path(cache_dir) / p.name
        raise UsageError(f"'{dataset}' is not a dataset folder of the cache dir {cache_dir}; give a dataset "
                         f"name as `xmask cache ls` shows it (and --cache-dir for another cache)")
    if dataset.startswith("_"):
        raise UsageError(f"'{dataset}' is not a dataset name (folders starting with '_' hold loader files)")
    return Path(cache_dir) / dataset.lower()


def clear(cache_dir: Path, dataset: str | None = None, kept: list[Path] | None = None) -> list[Path]:
    """Remove xmask's own cache files (one dataset's, if given) and temp files of dead writers.

    Only files :func:`is_own_cache_file` proves are cache files, and
    :class:`CacheWriter` temp files whose writer is gone, are deleted; any other
    file is left alone (and appended to ``kept`` when given). Without
    ``dataset`` the loader staging folder ``_pyg`` goes too, when it carries
    xmask's marker. Returns what was removed.

    Raises:
        UsageError: ``dataset`` is a path outside the cache dir's dataset folders.
        NotWritableError: a file cannot be deleted (e.g. a read-only mount).
    """
    cache_dir = Path(cache_dir)
    removed: list[Path] = []
    if dataset:
        dataset_folder(cache_dir, dataset)  # a path outside the cache dir is refused even when nothing is cached
    try:
        for d in (d for d in _dataset_dirs(cache_dir, dataset) if not d.is_symlink()):
            mine = 0
            for p in sorted(d.iterdir()):
                if is_own_cache_file(p) or is_stale_temp(p):
                    p.unlink()
                    removed.append(p)
                    mine += 1
                elif kept is not None:
                    kept.append(p)
            if mine and not any(d.iterdir()):  # a folder we emptied; never someone else's empty folder
                d.rmdir()
        staging = cache_dir / "_pyg"
        if dataset is None and staging.is_dir() and not staging.is_symlink():
            if (staging / STAGING_MARKER).is_file():
                shutil.rmtree(staging)  # rmtree never follows the symlinks to raw files
                removed.append(staging)
            elif kept is not None:
                kept.append(staging)
    except PermissionError as exc:
        raise NotWritableError(f"cannot remove {exc.filename or cache_dir}: {exc.strerror}; "
                               f"the cache dir is read-only here") from exc
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise NotWritableError(f"cannot remove {exc.filename or cache_dir}: read-only file system") from exc
        raise
    return removed
