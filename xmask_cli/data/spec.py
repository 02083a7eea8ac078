"""What xmask knows about one dataset (:class:`DatasetSpec`), and the files a TU-format graph set holds.

A leaf of ``data/``: the registry's table and a user's folder (:mod:`xmask_cli.data.folder`) both build
these entries, so it sits below both.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DatasetSpec", "tu_raw_files"]


@dataclass(frozen=True)
class DatasetSpec:
    """What xmask knows about one benchmark dataset.

    Attributes:
        name: canonical name (as the loader spells it).
        family: loader family: planetoid, amazon, coauthor, wikics, tu, ogbg, ogbn, images; ``folder``
            for a user's folder (:mod:`xmask_cli.data.folder`).
        levels: task levels it supports; the first is its default.
        split: default split, named as the run config records it.
        folder: sub-folder of the data root the loader reads (a user's folder: its absolute path).
        raw_files: files that must exist under ``<root>/<folder>/`` to load offline.
        metric: default metric of its main task.
        embedded: raw files ship inside the package (works with no data root).
        root: a data root fixed by the user's path (a graph set in TU's raw format given as
            ``--dataset ./sets/NAME``: the root is ``./sets``); empty for the registry's names.
    """

    name: str
    family: str
    levels: tuple[str, ...]
    split: str
    folder: str
    raw_files: tuple[str, ...]
    metric: str
    aliases: tuple[str, ...] = ()
    embedded: bool = False
    root: str = ""

    @property
    def level(self) -> str:
        return self.levels[0]

    @property
    def ref(self) -> str:
        """What ``data.dataset`` holds to find this entry again: the name, or a folder's absolute path."""
        if self.family == "folder":
            return self.folder
        return str(Path(self.root) / self.folder) if self.root else self.name

    @property
    def key(self) -> str:
        """Lower-case name used for cache and run folders (no ``:``, which some file systems refuse)."""
        return self.name.lower().replace(":", "-")


def tu_raw_files(name: str) -> tuple[str, ...]:
    """The files a TU-format graph set must have under ``<root>/<name>/``."""
    return (f"raw/{name}_A.txt", f"raw/{name}_graph_indicator.txt", f"raw/{name}_graph_labels.txt")
