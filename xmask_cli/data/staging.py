"""Staging a read-only data root: its files linked into ``<cache_dir>/_pyg/<folder>/``, with a manifest
so that a change of the raw files invalidates the loader's ``processed/`` there."""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from xmask_cli.data.spec import DatasetSpec
from xmask_cli.data.tables import check_regular, open_regular
from xmask_cli.errors import NotWritableError, UsageError
from xmask_cli.fs import atomic_write, open_nofollow, sha256_of
from xmask_cli.jsonfile import read_json

STAGING_MARKER = ".xmask-staging"  # in <cache_dir>/_pyg: `cache clear` removes only a folder carrying it


#: Sub-folders a loader writes itself: never staged from a source (stale outputs of another version).
_LOADER_OUTPUTS = ("processed",)
#: Written beside the staged files: what was staged, so a change invalidates the loader's ``processed/``.
STAGE_MANIFEST = ".xmask-staged.json"


def source_files(spec: DatasetSpec, source_root: Path) -> list[str]:
    """Every file of ``source_root/<folder>`` a loader may read, relative, sorted.

    That is the whole folder (``raw/``, and OGB's ``split/``, ``mapping/``,
    ``RELEASE_v1.txt``) minus what loaders write (``processed/``): PyG's
    ``TUDataset`` globs ``raw/<name>_*.txt`` and takes node labels and
    attributes from whichever files are there, so staging only the registry's
    minimum would silently drop the node features.
    """
    src = source_root / spec.folder
    out = []
    # os.walk with followlinks: a data root may hold raw/ as a link to another disk.
    for folder, dirs, names in os.walk(src, followlinks=True):
        rel_dir = Path(folder).relative_to(src)
        if rel_dir == Path("."):
            dirs[:] = [d for d in dirs if d not in _LOADER_OUTPUTS]
        out += [(rel_dir / n).as_posix() for n in names if n != STAGE_MANIFEST]
    return sorted(out)


def check_source_files(spec: DatasetSpec, source_root: Path) -> list[str]:
    """:func:`source_files`, each checked to be a regular file (through links) without opening it.

    The loader reads whichever of them it wants (PyG's ``TUDataset`` globs ``raw/``): a FIFO among them
    would block it forever, so every one is checked before the folder is handed over.

    Raises:
        UsageError: a FIFO, socket or device among the files (named).
    """
    files = source_files(spec, source_root)
    for rel in files:
        check_regular(source_root / spec.folder / rel)
    return files


def _manifest(src: Path, files: list[str]) -> dict[str, Any]:
    # Content hashes, not paths: the bundled and a shared copy of the same files share one processed/.
    digest = {}
    for rel in files:
        # Never blocking, and only regular files (links followed: a data root may link to another disk).
        with open_regular(src / rel, follow_links=True) as fh:
            digest[rel] = sha256_of(fh)
    return {"version": 1, "files": digest}


def is_plain_relative(name: Any) -> bool:
    """Whether ``name`` is a relative path of plain names (no ``..``, ``.``, empty part, absolute path or NUL):
    one that, joined to a folder, stays inside it."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts) and PurePosixPath(name).parts == tuple(parts)


def _read_manifest(stamp: Path) -> dict[str, Any] | None:
    """The manifest staging wrote earlier, or None (missing, a link, unreadable, or holding anything but plain
    relative names and hex digests: such a manifest is ignored and staging starts afresh)."""
    if stamp.is_symlink():
        return None
    try:
        data = read_json(stamp, error=UsageError)  # bounded (size, depth); any failure: start afresh
    except (OSError, UsageError):
        return None
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("files"), dict):
        return None
    if not all(is_plain_relative(k) and isinstance(v, str) for k, v in data["files"].items()):
        return None
    return data


def _replace_linked_folders(dst: Path) -> None:
    """Remove every link to a folder inside the staging folder ``dst`` (staging links files only, never folders):
    a loader must never write its ``processed/`` through one into somebody else's folder."""
    if dst.is_symlink():
        dst.unlink()
        return
    for folder, dirs, _ in os.walk(dst):  # os.walk does not descend into links
        for d in list(dirs):
            if (Path(folder) / d).is_symlink():
                (Path(folder) / d).unlink()  # the link only; its target is untouched
                dirs.remove(d)


def _stage(spec: DatasetSpec, source_root: Path, staging_root: Path) -> Path:
    """Link every source file of ``spec`` (see :func:`source_files`) into ``staging_root/<folder>``.

    Files staged earlier that the source no longer has are removed, and when the
    staged set or its contents changed (e.g. a cache staged by an older xmask
    without the node-label files) the loader's ``processed/`` there is deleted,
    so the features are re-read from the raw files, never taken from a stale cache.
    """
    src = source_root / spec.folder
    dst = staging_root / spec.folder
    files = check_source_files(spec, source_root)
    manifest = _manifest(src, files)
    if staging_root.is_symlink():
        raise UsageError(f"{staging_root} is a symbolic link; xmask stages datasets only in a folder it made: "
                         f"remove the link (or pass another --cache-dir)")
    try:
        if not staging_root.is_dir():
            staging_root.mkdir(parents=True, exist_ok=True)
        # `cache clear` removes a staging folder only when it carries this marker. Nothing is
        # written when everything is in place: a complete cache on a read-only mount still loads.
        marker = staging_root / STAGING_MARKER
        if marker.is_symlink():
            marker.unlink()
        if not marker.exists():
            os.close(open_nofollow(marker, os.O_WRONLY | os.O_CREAT, "staging folder"))
        _replace_linked_folders(dst)
        if not dst.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        stamp = dst / STAGE_MANIFEST
        previous = _read_manifest(stamp)
        for old in (previous or {}).get("files", {}):
            if old not in manifest["files"] and (dst / old).is_symlink():
                (dst / old).unlink()
        for rel in files:
            target = dst / rel
            if not target.parent.is_dir():
                target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                if target.resolve() == (src / rel).resolve():
                    continue
                target.unlink()
            try:
                target.symlink_to((src / rel).resolve())
            except OSError:
                shutil.copy2(src / rel, target)
        if previous != manifest:
            for out in _LOADER_OUTPUTS:
                if (dst / out).is_dir():
                    shutil.rmtree(dst / out)
            data = json.dumps(manifest, sort_keys=True).encode()
            atomic_write(stamp, lambda f: f.write(data))
    except OSError as exc:
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise
        raise NotWritableError(f"cannot stage {spec.name} under {staging_root}: {exc.strerror}; pass a writable --cache-dir") from exc
    return staging_root
