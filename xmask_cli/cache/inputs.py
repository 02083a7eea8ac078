"""``xmask cache verify --check-inputs``: read a cache file's input again and fingerprint it.

A registry dataset is found by the name of its cache folder; a user's folder by the root
attribute ``source_folder`` that ``prepare`` records (its real absolute path). That attribute
is read from a file the user controls, so it is checked before use: an absolute, normalized
path to a folder that no symbolic link leads to (xmask follows no link it did not make).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import h5py

from xmask_cli.cache.files import H5_ERRORS
from xmask_cli.data.folder import folder_spec
from xmask_cli.data.load import load_graphs, resolve_data_root
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import DataNotFoundError, UsageError

if TYPE_CHECKING:
    from xmask_cli.data.graphset import GraphSet
    from xmask_cli.data.spec import DatasetSpec

__all__ = ["SOURCE_ATTR", "InputFingerprints", "recorded_folder"]

#: Root attribute naming the user's dataset folder a cache file was prepared from.
SOURCE_ATTR = "source_folder"
#: Cache folders of the training-edge graphs of link and edge tasks (a seeded split: no dataset to reread).
_TRAIN_EDGES = "-train-edges"


class BadRecord(ValueError):
    """The recorded folder is not a usable value (a problem of the cache file, reported as such)."""


def recorded_folder(value: object) -> str:
    """``value`` (a ``source_folder`` attribute) as a path that may be read, else :class:`BadRecord`.

    Raises:
        BadRecord: not a string, not absolute, or not normalized (``..``, ``//``, a trailing ``/``).
    """
    if not isinstance(value, str) or not value or "\0" in value:
        raise BadRecord(f"records a bad dataset folder ({type(value).__name__} {str(value)[:80]!r}, not a path)")
    if not os.path.isabs(value) or os.path.normpath(value) != value:
        raise BadRecord(f"records dataset folder {value!r}, which is not a normalized absolute path")
    return value


def _first_link(folder: str) -> str | None:
    """The first component of ``folder`` (from the root down) that is a symbolic link, else None."""
    p = Path(folder)
    for part in [*reversed(p.parents), p]:
        if part.is_symlink():
            return str(part)
    return None


class InputFingerprints:
    """The fingerprints of the inputs cache files were built from, each input read once (offline)."""

    def __init__(self, data_root: Path | None, cache_dir: Path):
        self.data_root, self.cache_dir = data_root, Path(cache_dir)
        self._seen: dict[str, str] = {}

    def expected(self, path: Path) -> tuple[str | None, list[str]]:
        """``(fingerprint of the input now on disk, problems)`` for the cache file ``path``.

        The fingerprint is None where there is nothing to compare: an image grid (its key hashes the
        grid), a training-edge graph, a file that cannot be read (``verify`` reports that) or one whose
        record is a problem (then listed).

        Raises:
            DataNotFoundError: the input is gone (a registry dataset's raw files, or the recorded folder).
            UsageError: the recorded folder is reached through a symbolic link, or no longer reads
                as a dataset folder.
        """
        path = Path(path)
        try:
            with h5py.File(path, "r") as f:
                recorded = f.attrs.get(SOURCE_ATTR)
        except H5_ERRORS:
            return None, []
        if recorded is not None:
            try:
                folder = recorded_folder(recorded)
            except BadRecord as exc:
                return None, [f"{exc}; {self._reprepare('<folder>')}"]
            return self._memo(f"folder:{folder}", lambda: self._folder_fingerprint(path, folder)), []
        name = path.parent.name
        if name.endswith(_TRAIN_EDGES):
            return None, []

        try:
            spec = get_dataset("graphqa:" + name[len("graphqa-"):] if name.startswith("graphqa-") else name)
        except UsageError:
            return None, [f"records no dataset folder and '{name}' is not a registry dataset, so its input cannot "
                          f"be read again; if it was prepared from a folder of files, "
                          f"{self._reprepare('<folder>')} (it then records the folder)"]
        if spec.family == "images":
            return None, []
        return self._memo(f"name:{spec.key}", lambda: self._load(spec).fingerprint()), []

    def _memo(self, key: str, compute: Callable[[], str]) -> str:
        if key not in self._seen:
            self._seen[key] = compute()
        return self._seen[key]

    def _reprepare(self, folder: str) -> str:
        return f"prepare it again with `xmask prepare {folder} --force --cache-dir {self.cache_dir}`"

    def _load(self, spec: DatasetSpec) -> GraphSet:
        return load_graphs(spec, data_root=resolve_data_root(self.data_root), cache_dir=self.cache_dir, offline=True)

    def _folder_fingerprint(self, path: Path, folder: str) -> str:
        """Fingerprint of the recorded ``folder``, read as ``prepare`` read it; one error line if it cannot be."""
        where = f"{path} was prepared from the dataset folder {folder}"
        link = _first_link(folder)
        if link is not None:
            raise UsageError(f"{where}, and {link} is now a symbolic link; xmask follows no link it did not make: "
                             f"{self._reprepare('<the real folder>')}")
        if not os.path.lexists(folder):
            raise DataNotFoundError(f"{where}, which no longer exists; put the folder back there, or "
                                    f"{self._reprepare('<its new path>')}")
        if not os.path.isdir(folder):
            raise UsageError(f"{where}, which is no longer a folder; put the dataset folder back there, or "
                             f"{self._reprepare('<its new path>')}")
        try:
            return self._load(folder_spec(folder)).fingerprint()
        except (DataNotFoundError, UsageError) as exc:
            raise type(exc)(f"{where}, which no longer reads as a dataset folder: {exc}") from None
