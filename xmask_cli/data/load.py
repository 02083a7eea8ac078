"""Load registered datasets through the real PyG / OGB classes, offline-safe.

Where the files are looked for, in order:

1. ``data_root`` (``--data-root``, else ``XMASK_DATA_ROOT``, else the preset's
   ``data.root``), when ``<root>/<folder>/`` holds the raw files;
2. the copy bundled with the package (Cora and MUTAG);
3. a download into the data root (default ``~/.cache/xmask/datasets``), unless
   offline (``--offline`` or ``XMASK_OFFLINE=1``).

The loaders write ``processed/`` beside ``raw/``. A data root is treated as
read-only (a shared copy, the installed package; as root, permission bits do
not tell): the raw files found there are linked into
``<cache_dir>/_pyg/<folder>/`` and the loader runs and writes there. Only a
download writes into the data root, as PyG does.

Modules by job: this one finds the files and runs :func:`load_graphs`;
``graphset`` holds the arrays (:class:`GraphSet`, features, fingerprint),
``staging`` links a read-only root's files into the cache dir, ``pyg``
constructs the PyG / OGB dataset classes safely. Their public names are
importable from here too.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

from xmask_cli.data.folder import load_folder
from xmask_cli.data.graphset import (  # noqa: F401  (re-exported: callers import them from here)
    MAX_DEGREE,
    FeatureInfo,
    GraphSet,
    degree_width,
    graph_arrays,
    graphs_fingerprint,
    one_hot_degrees,
)
from xmask_cli.data.pyg import (  # noqa: F401
    ProcessedFileRejected,
    _construct,
    _construct_safely,
    _no_prompt,
    safe_torch_load,
)
from xmask_cli.data.spec import DatasetSpec
from xmask_cli.data.staging import STAGE_MANIFEST, STAGING_MARKER, _stage, check_source_files, source_files  # noqa: F401
from xmask_cli.data.tables import check_regular
from xmask_cli.errors import CacheError, DataNotFoundError, NotWritableError, UsageError, first_line
from xmask_cli.versions import require_extra

DEFAULT_DATA_ROOT = Path("~/.cache/xmask/datasets").expanduser()
EMBEDDED_ROOT = Path(__file__).resolve().parent / "embedded"


def is_offline(offline: bool | None = None) -> bool:
    """Offline when asked, or when ``XMASK_OFFLINE`` is set to a true value."""
    if offline is not None:
        return offline
    return os.environ.get("XMASK_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_data_root(cli_root: str | os.PathLike | None, preset_root: str | None = None) -> Path | None:
    """``--data-root`` > ``XMASK_DATA_ROOT`` > the preset's ``data.root``; None if none is set."""
    for cand in (cli_root, os.environ.get("XMASK_DATA_ROOT") or None, preset_root):
        if cand:
            return Path(cand).expanduser()
    return None


def has_raw_files(spec: DatasetSpec, root: Path) -> bool:
    """True when ``root/<folder>/`` holds every raw file the loader needs.

    Raises:
        UsageError: one of them is there but is not a regular file (a FIFO, socket, device or folder):
            named, rather than taken for missing (which would load another copy, or download over it).
    """
    base = root / spec.folder
    for f in spec.raw_files:
        if not os.path.lexists(base / f):
            return False
        try:
            check_regular(base / f)
        except DataNotFoundError:  # a link to nothing: missing
            return False
    return True


def _remove_empty_dirs(folder: Path, stop: Path) -> None:
    """Remove ``folder``'s empty subfolders, then ``folder`` and its parents up to ``stop`` while empty
    (what a failed download leaves: ``raw/``, ``processed/``); never a file."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    for p in (folder, *folder.parents):
        if p == stop or stop not in p.parents:
            break
        try:
            p.rmdir()
        except OSError:
            break


def _missing_message(spec: DatasetSpec, looked: list[Path], reason: str) -> str:
    where = ", ".join(str(p / spec.folder) for p in looked) or "(no data root set)"
    need = spec.raw_files[0]
    return (
        f"{spec.name}: raw files not found in {where} ({reason}); "
        f"put them at <root>/{spec.folder}/{need} etc. and pass --data-root <root> (or set XMASK_DATA_ROOT), "
        f"or go online without --offline/XMASK_OFFLINE to download"
    )


def load_graphs(
    spec: DatasetSpec,
    *,
    data_root: Path | None,
    cache_dir: Path,
    offline: bool | None = None,
) -> GraphSet:
    """Load ``spec`` and return its graphs as arrays (see module docstring for the search order).

    Raises:
        DataNotFoundError: raw files are missing and cannot (or may not) be downloaded.
        NotWritableError: neither the data root nor the cache dir can take ``processed/``.
    """
    if spec.family == "folder":  # a user's files, read in place

        return load_folder(spec)
    if spec.family == "graphqa":  # generated from a seed: no files, no download
        from xmask_cli.data.graphqa import GraphQADataset

        ds = GraphQADataset(spec.name.split(":", 1)[1])
        edges, nodes = graph_arrays(ds)
        return GraphSet(spec=spec, edge_index=edges, num_nodes=nodes, source=Path("generated"), dataset=ds)
    if spec.family in ("ogbg", "ogbn"):  # the OGB classes come with the [ogb] extra
        require_extra("ogb", "ogb", f"{spec.name} (an OGB dataset)")
    if spec.root:  # a user's TU-format folder: its parent is the data root, whatever else is set
        data_root = Path(spec.root)
    offline = is_offline(offline)
    looked: list[Path] = []
    source: Path | None = None
    if data_root is not None and data_root.exists() and not data_root.is_dir():
        raise UsageError(f"data root {data_root} is a file, not a folder; pass --data-root <folder holding "
                         f"{spec.folder}/raw/...> (or set XMASK_DATA_ROOT)")
    if data_root is not None:
        looked.append(data_root)
        if has_raw_files(spec, data_root):
            source = data_root
    if source is None and spec.embedded:
        source = EMBEDDED_ROOT
    if source is not None:
        root = _stage(spec, source, cache_dir / "_pyg")
    else:
        root = data_root or DEFAULT_DATA_ROOT
        if root not in looked:
            looked.append(root)
        if has_raw_files(spec, root):
            source = root
            check_source_files(spec, root)  # read in place, not staged: the loader must not meet a FIFO
        elif offline:
            raise DataNotFoundError(_missing_message(spec, looked, "offline, so no download was tried"))
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NotWritableError(f"cannot create data root {root}: {exc.strerror}; pass a writable --data-root") from exc
    chatter = io.StringIO()
    notes: list[str] = []
    with _no_prompt(spec), contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        # Loaders print progress bars; stdout is for results only and stderr for our own log.
        try:
            ds = _construct_safely(spec, root, notes)
        except (DataNotFoundError, NotWritableError, CacheError):
            raise
        except PermissionError as exc:
            raise NotWritableError(f"{spec.name}: cannot write processed files under {root}: {exc.strerror}; pass a writable --cache-dir") from exc
        except Exception as exc:  # network errors, partial downloads, corrupt raw files
            if source is None:
                _remove_empty_dirs(root / spec.folder, stop=root)
                first = first_line(exc)
                raise DataNotFoundError(_missing_message(spec, looked, f"download failed: {first}")) from exc
            raise
    for note in notes:  # after the redirect: the user should see that a file was replaced
        sys.stderr.write(note + "\n")
    edges, nodes = graph_arrays(ds)
    return GraphSet(spec=spec, edge_index=edges, num_nodes=nodes, source=(source or root) / spec.folder, dataset=ds)
