"""A user's own graph as a folder of files: node classification and link prediction (``--dataset PATH``).

The format (docs/datasets-from-files.md is the user's guide)::

    mygraph/
      edges.csv | edges.npz | edges.parquet          required: src, dst [, weight]; 0-based node ids
      features.npy | .npz | .csv | .parquet          optional: float [n, d]
      labels.npy | .npz | .csv | .parquet            node level: int [n], -1 = unlabelled
      train.npy|.csv, val.npy|.csv, test.npy|.csv    optional split: node ids, one file per part
      masks.npz                                      ... or boolean arrays train, val, test of length n

* An edge is the unordered pair ``{src, dst}``: a file may list it once or in
  both directions. A ``(src, dst)`` row listed again is merged into its first
  listing (one log line counts the merged rows and names the first repeat);
  with a weight column the copies must carry the same weight. A weight column,
  when present, must agree between the two directions and is read and checked
  but not used by the structure (X-LogSMask's ``Â`` is of the unweighted graph).
* ``n`` is the row count of features (labels must match), else of labels,
  else ``max id + 1``. The row counts of the node files (features, labels,
  masks) are compared from their headers (NPY, NPZ members, Parquet footer)
  before any file is read; a count given by a features file alone is at most
  :data:`~xmask_cli.data.tables.MAX_FEATURE_NODES` (``XMASK_MAX_NODES`` sets another), and the
  largest label is below the number of labelled nodes (every class
  ``0..C-1`` has one) before anything is sized by it.
* Without split files the node level draws the seeded 60/20/20 split of the
  labelled nodes; every class ``0..C-1`` needs a training node.
* Only regular files are read, never through a symbolic link; other files in
  the folder are ignored. The cache fingerprint hashes every file read, so a
  change to any of them gives a new cache key.

Every inconsistency is a one-line :class:`~xmask_cli.errors.UsageError` (exit 2)
naming the file and row (see :mod:`xmask_cli.data.tables`). Each file is read by
:mod:`~xmask_cli.data.folder_read`; the checks across files and rows are in
:mod:`~xmask_cli.data.folder_checks`.

Example::

    spec = folder_spec("./mygraph")          # DatasetSpec, family "folder"
    graphs = load_folder(spec)               # GraphSet: graphs.dataset[0] has x, y, edge_index (+ masks)
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.data.binary_tables import declared_rows, read_npz
from xmask_cli.data.folder_checks import check_ids, check_reverse_weights, check_train_classes, repeated_rows
from xmask_cli.data.folder_read import read_edges, read_features, read_index_file, read_labels
from xmask_cli.data.graphset import GraphSet
from xmask_cli.data.spec import DatasetSpec, tu_raw_files
from xmask_cli.data.tables import (
    Rows,
    bounded_max_id,
    check_feature_nodes,
    check_regular,
    file_digest,
    not_regular,
)
from xmask_cli.errors import DataNotFoundError, UsageError

__all__ = ["FORMATS", "FolderFiles", "FolderDataset", "find_files", "folder_spec", "load_folder", "is_folder_ref",
           "FOLDER_SPLIT_FILES", "check_train_classes", "source_folder", "check_declared_rows"]

#: File stem -> the extensions it may have (exactly one file per stem).
FORMATS: dict[str, tuple[str, ...]] = {
    "edges": ("csv", "npz", "parquet"),
    "features": ("npy", "npz", "csv", "parquet"),
    "labels": ("npy", "npz", "csv", "parquet"),
    "train": ("npy", "csv"),
    "val": ("npy", "csv"),
    "test": ("npy", "csv"),
    "masks": ("npz",),
}
#: Split name of a folder whose split comes from its files.
FOLDER_SPLIT_FILES = "files"


def is_folder_ref(name: str) -> bool:
    """True when a ``--dataset`` value names a folder: it holds ``/`` or starts with ``.`` or ``~``."""
    text = name.strip()
    return "/" in text or os.sep in text or text.startswith((".", "~"))


@dataclass(frozen=True)
class FolderFiles:
    """The files of a dataset folder, by stem (``edges``, ``features``, ...); absent ones are None."""

    folder: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def get(self, stem: str) -> Path | None:
        return self.paths.get(stem)

    @property
    def has_split(self) -> bool:
        return any(s in self.paths for s in ("train", "val", "test", "masks"))


def find_files(folder: Path) -> FolderFiles:
    """The dataset files of ``folder`` (see :data:`FORMATS`); other files are ignored.

    Raises:
        DataNotFoundError: no edges file.
        UsageError: two files for one stem, a link or folder under a dataset file's name, a split that is
            neither three index files nor one masks file.
    """
    found: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise DataNotFoundError(f"dataset folder {folder}: cannot list it ({exc.strerror})") from None
    for entry in entries:
        stem, dot, ext = entry.name.partition(".")
        if not dot or stem not in FORMATS or ext not in FORMATS[stem]:
            continue
        path = folder / entry.name
        if entry.is_symlink():
            raise UsageError(f"{path}: a symbolic link; xmask reads only regular files in a dataset folder "
                             f"(copy the file in)")
        if not entry.is_file(follow_symlinks=False):
            raise not_regular(path, entry.stat(follow_symlinks=False).st_mode)
        if stem in found:
            raise UsageError(f"{folder}: both {found[stem].name} and {entry.name}; keep one {stem} file")
        found[stem] = path
    if "edges" not in found:
        raise DataNotFoundError(f"dataset folder {folder} has no edges file: expected edges.csv (header src,dst), "
                                f"edges.npz (arrays src, dst) or edges.parquet; see docs/datasets-from-files.md")
    parts = [s for s in ("train", "val", "test") if s in found]
    if parts and "masks" in found:
        raise UsageError(f"{folder}: both split index files ({', '.join(found[s].name for s in parts)}) and "
                         f"masks.npz; keep one way of giving the split")
    if parts and len(parts) != 3:
        missing = [s for s in ("train", "val", "test") if s not in found]
        raise UsageError(f"{folder}: split files {', '.join(found[s].name for s in parts)} without "
                         f"{', '.join(m + '.npy' for m in missing)}; give all three (or none for the seeded 60/20/20)")
    return FolderFiles(folder, found)


def folder_spec(text: str) -> DatasetSpec:
    """The registry entry of the folder ``text``: levels ``node`` and ``link`` (``link`` only without labels).

    Raises:
        DataNotFoundError: no such folder, or no edges file in it.
        UsageError: ``text`` is a file, or the folder's files clash (see :func:`find_files`).
    """
    path = Path(os.path.abspath(Path(text.strip()).expanduser()))
    if not path.exists():
        raise DataNotFoundError(f"dataset folder {text} not found (a --dataset value holding '/' or starting with "
                                f"'.' or '~' is a folder path; registry names have neither)")
    if not path.is_dir():
        raise UsageError(f"--dataset {text} is a file; give the folder holding edges.csv, features.npy and "
                         f"labels.npy (see docs/datasets-from-files.md)")
    tu = tu_folder_spec(path)
    if tu is not None:
        return tu
    files = find_files(path)
    levels = ("node", "link") if files.get("labels") is not None else ("link",)
    split = FOLDER_SPLIT_FILES if files.has_split else "random-60-20-20"
    return DatasetSpec(path.name or "folder", "folder", levels, split, str(path),
                       tuple(p.name for p in files.paths.values()), "accuracy")


def source_folder(spec: DatasetSpec) -> str | None:
    """The real absolute path of the user's folder ``spec`` was read from (links resolved); None for a registry name.

    A cache records it, so that ``xmask cache verify --check-inputs`` can read the same folder again.
    """
    if spec.family == "folder":
        return os.path.realpath(spec.folder)
    if spec.family == "tu" and spec.root:
        return os.path.realpath(os.path.join(spec.root, spec.folder))
    return None


def tu_folder_spec(path: Path) -> DatasetSpec | None:
    """A graph set in TU's raw format, ``<root>/NAME/raw/NAME_A.txt`` etc., as a graph-level entry; else None.

    Loaded by PyG's ``TUDataset`` like the registry's TU sets, with ``<root>`` as the data root.
    """
    # lexists: the set is recognised by its NAME_A.txt whatever sits there, so a FIFO or folder under that
    # name is named as such (exit 2), not taken for a node folder without an edges file.
    if not os.path.lexists(path / "raw" / f"{path.name}_A.txt"):
        return None
    needed = tu_raw_files(path.name)
    for f in needed:
        if not os.path.exists(path / f):  # a link to nothing is missing too
            raise DataNotFoundError(f"{path / f} not found: a graph set in TU format needs "
                                    f"{', '.join(needed)} (see docs/datasets-from-files.md)")
        check_regular(path / f)
    return DatasetSpec(path.name, "tu", ("graph",), "random-8-1-1", path.name, tu_raw_files(path.name), "accuracy",
                       root=str(path.parent))


class FolderDataset:
    """The one graph of a folder, shaped like a one-graph PyG dataset (``len``, ``[0]``, ``num_classes``, ``transform``)."""

    def __init__(self, data: Any, num_classes: int, files: FolderFiles):
        self._data, self.num_classes, self.files = data, num_classes, files
        self.transform = None  # set by Experiment for data.normalize_features, applied on access as PyG does

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> Any:
        if i not in (0, -1):
            raise IndexError(f"a folder dataset holds one graph, not graph {i}")
        return self._data if self.transform is None else self.transform(self._data.clone())


def check_declared_rows(files: FolderFiles) -> None:
    """The node files' row counts, as their headers declare them, compared before any file is read: features
    against labels, the masks against both, and a count from features alone against
    :data:`~xmask_cli.data.tables.MAX_FEATURE_NODES`.

    Raises:
        UsageError: counts that disagree, or a features file alone declaring more nodes than the bound.
    """
    paths = files.paths
    nx = declared_rows(paths["features"], "x") if "features" in paths else None
    ny = declared_rows(paths["labels"], "y") if "labels" in paths else None
    if nx is not None and ny is not None and nx != ny:
        raise UsageError(f"{paths['labels']}: {ny:,} labels but {paths['features'].name} has {nx:,} rows (as their "
                         f"headers declare); one label per node (-1 for unlabelled)")
    if nx is not None and "labels" not in paths:
        check_feature_nodes(paths["features"], nx)
    n = nx if nx is not None else ny
    if "masks" in paths and ny is not None and n is not None:  # masks are read only beside labels
        for part in ("train", "val", "test"):
            m = declared_rows(paths["masks"], part)
            if m is not None and m != n:
                raise UsageError(f"{paths['masks']}: {part} must be {n:,} booleans (one per node); its header "
                                 f"declares {m:,}")


def check_label_range(y: np.ndarray, path: Path) -> None:
    """The largest label is below the number of labelled nodes (every class ``0..C-1`` needs a node), checked
    before a count of classes is taken from it: a label of 10^18 is one line, not an allocation."""
    labelled = int(np.count_nonzero(y >= 0))
    if labelled and int(y.max()) >= labelled:
        row, where = int(np.argmax(y)), Rows(path, csv=path.suffix.lower() == ".csv")
        raise UsageError(f"{where.at(row)}: label {int(y[row])} is out of range: labels are 0..C-1 with every "
                         f"class present, and only {labelled:,} nodes are labelled (so C <= {labelled:,})")


def _split_masks(files: FolderFiles, n: int, y: np.ndarray | None) -> dict[str, np.ndarray]:
    """``train``/``val``/``test`` boolean masks from index files or masks.npz, checked."""
    if y is None or not files.has_split:
        return {}
    masks: dict[str, np.ndarray] = {}
    where: dict[str, tuple[Rows, np.ndarray]] = {}
    if files.get("masks") is not None:
        path = files.paths["masks"]
        arrays = read_npz(path, ["train", "val", "test"])
        for part, given in arrays.items():
            mask = np.asarray(given)
            if mask.ndim != 1 or mask.size != n or (mask.dtype.kind != "b" and not np.isin(mask, (0, 1)).all()):
                raise UsageError(f"{path}: {part} must be {n} booleans (one per node), got shape "
                                 f"{list(mask.shape)} dtype {mask.dtype}")
            masks[part] = mask.astype(bool)
            idx = np.flatnonzero(masks[part])
            where[part] = (Rows(path), idx)
    else:
        for part in ("train", "val", "test"):
            path = files.paths[part]
            idx, rows = read_index_file(path)
            check_ids(idx, n, rows, "node id", "rows of the node files")
            order = np.argsort(idx, kind="stable")
            same = np.flatnonzero(idx[order][1:] == idx[order][:-1])
            if same.size:
                r, first = int(order[same[0] + 1]), int(order[same[0]])
                raise UsageError(f"{rows.at(r)}: node {int(idx[r])} repeats {rows.at(first)}; a split file lists "
                                 f"each node once")
            m = np.zeros(n, dtype=bool)
            m[idx] = True
            masks[part] = m
            where[part] = (rows, idx)
    for part in ("train", "val", "test"):
        rows, idx = where[part]
        if idx.size == 0:
            raise UsageError(f"{rows.path}: the {part} split is empty; every part needs at least one node")
        unl = np.flatnonzero(y[idx] < 0)
        if unl.size:
            at = rows.at(unl[0]) if files.get("masks") is None else f"{rows.path} {part}[{int(idx[unl[0]])}]"
            raise UsageError(f"{at}: node {int(idx[unl[0]])} is unlabelled (-1 in {files.paths['labels'].name}) "
                             f"but in the {part} split; a split holds labelled nodes only")
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        both = np.flatnonzero(masks[a] & masks[b])
        if both.size:
            node = int(both[0])
            ra, ia = where[a]
            rb, ib = where[b]
            at_a = ra.at(int(np.flatnonzero(ia == node)[0])) if files.get("masks") is None else f"{ra.path} {a}"
            at_b = rb.at(int(np.flatnonzero(ib == node)[0])) if files.get("masks") is None else f"{rb.path} {b}"
            raise UsageError(f"{at_b}: node {node} is in both {a} ({at_a}) and {b}; the parts must not overlap")
    return masks


def _node_count(x: np.ndarray | None, y: np.ndarray | None, files: FolderFiles, src: np.ndarray,
                dst: np.ndarray, rows: Rows) -> tuple[int, str]:
    """``(n, what n is)``: features rows, else labels length, else max id + 1 (bounded)."""
    if x is not None and y is not None and len(x) != len(y):
        raise UsageError(f"{files.paths['labels']}: {len(y)} labels but {files.paths['features'].name} has "
                         f"{len(x)} rows; one label per node (-1 for unlabelled)")
    if x is not None:
        return len(x), f"{files.paths['features'].name} has {len(x)} rows"
    if y is not None:
        return len(y), f"{files.paths['labels'].name} has {len(y)} rows"
    top = bounded_max_id(src, dst, rows.at, " (without a features or labels file ids must lie below {bound})",
                         "or add features or labels with one row per node")
    return top + 1, f"max id + 1 in {rows.path.name}"


def folder_digest(files: FolderFiles) -> str:
    """sha256 over every file read (name and content): any change to any file gives a new cache key."""
    parts = {name: file_digest(path) for name, path in sorted((p.name, p) for p in files.paths.values())}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def load_folder(spec: DatasetSpec) -> Any:
    """Read and check the folder of ``spec`` (see the module docstring); returns its :class:`GraphSet`.

    Raises:
        DataNotFoundError: the folder or its edges file is gone.
        UsageError: any inconsistency, as one line naming the file and row.
    """
    folder = Path(spec.folder)
    files = find_files(folder)
    check_declared_rows(files)  # from the headers, before any file is read (or torch is loaded)
    src, dst, w, rows = read_edges(files.paths["edges"])
    if src.size == 0:
        raise UsageError(f"{files.paths['edges']}: no edges; the graph needs at least one")
    x = read_features(files.paths["features"]) if "features" in files.paths else None
    y = read_labels(files.paths["labels"]) if "labels" in files.paths else None
    if y is not None:
        check_label_range(y, files.paths["labels"])
    n, why_n = _node_count(x, y, files, src, dst, rows)
    check_ids(src, n, rows, "src", why_n)
    check_ids(dst, n, rows, "dst", why_n)
    keep, merged_note = repeated_rows(src, dst, w, n, rows)
    if w is not None:
        check_reverse_weights(src, dst, w, n, rows)  # on the file's rows, so that a message names the right line
    merged = 0
    if keep is not None:
        merged = int(src.size - np.count_nonzero(keep))
        src, dst = src[keep], dst[keep]
        w = None if w is None else w[keep]
    masks = _split_masks(files, n, y)
    num_classes = 0
    if y is not None:
        if not (y >= 0).any():
            raise UsageError(f"{files.paths['labels']}: every node is unlabelled (-1); node classification needs "
                             f"labels 0..C-1")
        num_classes = int(y.max()) + 1
        seen = np.bincount(y[y >= 0], minlength=num_classes)
        if not seen.all():  # fails every split: say so before any structure is computed
            c = int(np.flatnonzero(seen == 0)[0])
            raise UsageError(f"{files.paths['labels']}: no node has label {c}; labels must be 0..C-1 with every "
                             f"class present (C = max label + 1 = {num_classes})")
        if masks:
            check_train_classes(y, np.flatnonzero(masks["train"]),
                                files.paths["labels"], (files.paths.get("train") or files.paths["masks"]).name)
    notes = [] if merged_note is None else [merged_note]
    if w is not None:
        notes.append(f"note: {files.paths['edges'].name} has a weight column: read and checked, but the "
                     f"structure (Â of A + I) uses the unweighted graph")
    import torch
    from torch_geometric.data import Data

    edge_index = np.stack([src, dst])
    del src, dst
    data = Data(edge_index=torch.from_numpy(edge_index), num_nodes=n)  # shares edge_index's memory
    if x is not None:
        data.x = torch.from_numpy(x)
    if y is not None:
        data.y = torch.from_numpy(y)
    if w is not None:
        data.edge_weight = torch.from_numpy(w.astype(np.float32))
    for part, m in masks.items():
        setattr(data, f"{part}_mask", torch.from_numpy(m))
    dataset = FolderDataset(data, num_classes, files)
    return GraphSet(spec=spec, edge_index=[edge_index], num_nodes=np.asarray([n], dtype=np.int64),
                    source=folder, dataset=dataset, content=folder_digest(files), merged_edge_rows=merged,
                    notes=tuple(notes))
