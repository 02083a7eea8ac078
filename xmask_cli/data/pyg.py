"""The PyG / OGB dataset classes, constructed offline-safe: no stdin prompt, no unpickling of arbitrary objects."""
from __future__ import annotations

import builtins
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xmask_cli.data.spec import DatasetSpec
from xmask_cli.errors import CacheError, DataNotFoundError, UsageError, first_line


@contextlib.contextmanager
def _no_prompt(spec: DatasetSpec) -> Iterator[None]:
    """OGB asks on stdin before re-downloading a changed release: never let that block."""
    original = builtins.input

    def refuse(prompt: object = "") -> str:
        raise DataNotFoundError(
            f"{spec.name}: the loader asked to re-download ({str(prompt).strip() or 'update prompt'}); "
            f"remove the stale folder or provide matching raw files"
        )

    builtins.input = refuse
    try:
        yield
    finally:
        builtins.input = original


class ProcessedFileRejected(CacheError):
    """A processed file failed to load as plain tensors (planted pickle, truncated, foreign)."""

    def __init__(self, path: str, reason: BaseException):
        first = first_line(reason)
        # torch's message advises weights_only=False: never repeat that advice.
        if "weights_only" in first or "Weights only" in first:
            first = "it holds objects other than tensors and PyG data classes"
        super().__init__(f"refusing to load {path}: {first}")
        self.path = path


def _file_path(f: Any) -> str:
    """Best-effort path of what ``torch.load`` was given (a path or an fsspec/file object)."""
    for attr in ("path", "name"):
        value = getattr(f, attr, None)
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)
    return os.fspath(f) if isinstance(f, (str, os.PathLike)) else repr(f)


@contextlib.contextmanager
def safe_torch_load() -> Iterator[None]:
    """Make every ``torch.load`` inside load plain tensors only: ``weights_only=True``, with PyG's
    data classes allowed explicitly, whatever the caller asked.

    PyG's ``fs.torch_load`` retries a failed load with ``weights_only=False``
    and ``Dataset._process`` loads ``pre_transform.pt`` that way outright, so a
    pickle planted in ``processed/`` would run code. Here no load unpickles
    arbitrary objects; a file that does not load raises
    :class:`ProcessedFileRejected` (the caller then re-processes from raw).
    """
    import torch
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    original = torch.load
    allowed = [DataEdgeAttr, DataTensorAttr, GlobalStorage]  # OGB's processed file holds old-style Data

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("weights_only", None)
        kwargs.pop("pickle_module", None)
        try:
            with torch.serialization.safe_globals(allowed):
                return original(f, map_location, weights_only=True, **kwargs)
        except Exception as exc:  # UnpicklingError, truncated zip, EOF ...
            raise ProcessedFileRejected(_file_path(f), exc) from exc

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


def _construct(spec: DatasetSpec, root: Path) -> Any:
    """Instantiate the PyG / OGB dataset class for ``spec`` at ``root``."""
    import torch_geometric.datasets as D

    fam = spec.family
    if fam == "planetoid":
        return D.Planetoid(str(root), spec.name, split="public")
    if fam == "amazon":
        return D.Amazon(str(root), spec.name)
    if fam == "coauthor":
        return D.Coauthor(str(root), spec.name)
    if fam == "wikics":
        return D.WikiCS(str(root / spec.folder), is_undirected=True)
    if fam == "tu":
        return D.TUDataset(str(root), spec.name)
    if fam == "ogbg":
        from ogb.graphproppred import PygGraphPropPredDataset

        return PygGraphPropPredDataset(spec.name, root=str(root))
    if fam == "ogbn":
        import ogb.nodeproppred.dataset_pyg as ogbn

        # OGB asks on stdin before a download above 1 GB (ogbn-products): naming the dataset online is the yes.
        asks = ogbn.decide_download
        ogbn.decide_download = lambda url: True
        try:
            return ogbn.PygNodePropPredDataset(spec.name, root=str(root))
        finally:
            ogbn.decide_download = asks
    raise UsageError(f"no loader for family {fam!r}")


def _construct_safely(spec: DatasetSpec, root: Path, notes: list[str]) -> Any:
    """:func:`_construct` under :func:`safe_torch_load`; a processed file that does not load as plain
    tensors (planted, truncated, from another version) is deleted with its ``processed/`` folder and
    the dataset is processed again from the raw files.

    Raises:
        CacheError: a rejected file outside the dataset's ``processed/`` folder, or a second rejection.
    """
    for attempt in (0, 1):
        try:
            with safe_torch_load():
                return _construct(spec, root)
        except ProcessedFileRejected as exc:
            bad = Path(exc.path)
            processed = bad.parent
            inside = processed.name == "processed" and processed.resolve().is_relative_to(root.resolve())
            if attempt or not inside:
                raise CacheError(f"{spec.name}: {exc}; delete that file "
                                 f"(xmask re-processes the dataset from its raw files)") from None
            notes.append(f"{spec.name}: processed file rejected ({exc}); re-processed from the raw files")
            shutil.rmtree(processed)
    raise AssertionError("unreachable")
