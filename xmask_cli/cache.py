"""The HDF5 structure cache: key, atomic write, lazy reads, verify, list, clear.

One file per (input graphs, structure parameters, format version) at
``<cache_dir>/<dataset>/<key>.h5``. Layout (format version 3), every array
chunked, LZF-compressed and fletcher32-checksummed::

    /                     attrs: format_version, key, dataset, level, fingerprint,
                                 params (JSON), created, versions (JSON), complete
    /graphs/num_nodes     int64 [G]        node count per graph
    /graphs/node_ptr      int64 [G+1]      offsets of each graph's nodes in /nodes/*
    /graphs/num_edges     int64 [G]        undirected edges per graph (no self loops)
    /graphs/large         bool  [G]        True: truncation rule and SPD radius applied
    /nodes/component      int32 [N]        connected-component id (equal ids: mutually reachable)
    /nodes/part           int32 [N]        METIS part of each node (only with partitions)
    /powers/indptr        int64 [N+1]      CSR over all nodes: node i's pairs are indptr[i]:indptr[i+1]
    /powers/col           uint16 [P]       graph-local column of each pair (int32 if a graph has > 65536 nodes)
    /powers/values        float32 [P, K]   column j = Â^(j+1) at each pair (0 where absent)
    /powers               attrs: k, normalization, truncation (JSON: tau, topk, rule),
                                 dropped_mass (JSON: rows, mean[K], max[K]: share of each
                                 truncated row's exact Â^k mass the stored entries miss)
    /spd/{indptr,col}     pairs at distance <= max_distance (<= spd_radius if large)
    /spd/dist             uint8 [S]
    /rrwp/{indptr,col}    pairs of the union support of I, P, ..., P^steps
    /rrwp/values          float32 [R, steps+1]    (attrs: dropped_mass, as /powers, for I..P^steps)
    /spectrum/{val_ptr,vec_ptr}   int64 [G+1] offsets into eigvals / flat eigvecs
    /spectrum/eigvals     float64 [sum m_g]      per graph ascending: every zero pair (one per component),
                                                 then the lowest non-zero ones (structure.graph_spectra)
    /spectrum/eigvecs     float32 [sum n_g*m_g]  row-major [n_g, m_g] per graph
    /magnetic/...         as /spectrum, eigvecs complex64

Graph ``g``'s pairs are ``indptr[node_ptr[g]] : indptr[node_ptr[g+1]]``, one
contiguous read (the PyG ``slices`` idea); the row of a pair is implied by
``indptr``, so only columns are stored. A pair missing from
``/spd`` is farther than the cut-off when both nodes share a component, and
unreachable otherwise.
"""
from __future__ import annotations

import datetime as _dt
import errno
import functools
import hashlib
import json
import os
import queue
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np

from xmask_cli.data.load import STAGING_MARKER
from xmask_cli.errors import CacheError, NotWritableError, UsageError, first_line
from xmask_cli.fs import ensure_writable_dir

# Bump whenever the layout or the numbers written change: the key includes it, so old files are
# then rebuilt instead of misread. 2: large graphs keep Â^1 and every real edge whole, dropped mass recorded.
# 3: spectra solved per connected component (every zero pair, then the m lowest non-zero ones).
FORMAT_VERSION = 3
_CHUNK = 1 << 17
_FLUSH_BYTES = 64 << 20
_GROUPS_WITH_PAIRS = ("powers", "spd", "rrwp")


#: What h5py raises on a damaged file: OSError (checksums, truncation), RuntimeError (metadata, e.g.
#: "bad heap free list"), ValueError / KeyError / TypeError (attributes of the wrong shape or type).
_H5_ERRORS = (OSError, RuntimeError, ValueError, KeyError, TypeError)


def cache_key(fingerprint: str, params: dict[str, Any]) -> str:
    """Short hash of the input fingerprint, the canonical parameters and the format version."""
    blob = json.dumps({"fingerprint": fingerprint, "params": params, "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cache_path(cache_dir: Path, dataset_key: str, key: str) -> Path:
    return Path(cache_dir) / dataset_key / f"{key}.h5"


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("xmask", "torch", "torch_geometric", "numpy", "scipy", "h5py"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


class CacheWriter:
    """Writes one cache file under a temporary name and renames it on success.

    Use as a context manager; arrays are appended block by block so that a
    large dataset never has to sit in memory whole. Buffered slabs are
    compressed and written by one background thread (h5py releases the GIL
    there), so writing overlaps the computation of the next blocks. On any
    exception (or a kill) only the temporary ``.<key>.h5.tmp-<pid>`` file is
    left, never a file under the real name.
    """

    def __init__(self, path: Path, attrs: dict[str, Any]):
        self.path = Path(path)
        ensure_writable_dir(self.path.parent)
        for old in self.path.parent.glob(".*.h5.tmp-*"):  # leftovers of killed writers
            if is_stale_temp(old):
                old.unlink(missing_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._attrs = attrs
        self._f: h5py.File | None = None
        self._buf: dict[str, list[np.ndarray]] = {}
        self._buffered = 0
        self._jobs: queue.Queue = queue.Queue(maxsize=2)  # bounds memory held by pending slabs
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> "CacheWriter":
        self._f = h5py.File(self.tmp, "w")
        for k, v in self._attrs.items():
            self._f.attrs[k] = v
        self._f.attrs["format_version"] = FORMAT_VERSION
        self._f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._f.attrs["versions"] = json.dumps(_versions(), sort_keys=True)
        self._f.attrs["complete"] = False
        self._thread = threading.Thread(target=self._run, name="xmask-cache-writer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        """Writer thread: the only code that touches the file between enter and exit."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self._error is None:
                try:
                    job()
                except BaseException as exc:  # re-raised in the caller's thread
                    self._error = exc

    def _submit(self, job: Callable[[], None]) -> None:
        if self._error is not None:
            raise self._error
        self._jobs.put(job)

    def append(self, name: str, array: np.ndarray) -> None:
        """Append rows to the extendable dataset ``name`` (created on first use).

        Rows are buffered and written in large slabs: many small resizes of a
        chunked, compressed dataset cost more than the data itself.
        """
        array = np.asarray(array)
        self._buf.setdefault(name, []).append(array)
        self._buffered += array.nbytes
        if self._buffered >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Hand every buffered slab to the writer thread."""
        slabs, self._buf, self._buffered = self._buf, {}, 0
        if slabs:
            self._submit(lambda: self._write(slabs))

    def _write(self, slabs: dict[str, list[np.ndarray]]) -> None:
        assert self._f is not None
        for name, parts in slabs.items():
            if len(parts) > 1 and sum(p.nbytes for p in parts) < (16 << 20):
                parts = [np.concatenate(parts)]  # small slabs: one write, no partial-chunk rewrites
            first, rest = parts[0], parts[1:]
            if name not in self._f:
                row_items = max(1, int(np.prod(first.shape[1:])))
                chunk_rows = max(1, min(_CHUNK // row_items, max(sum(p.shape[0] for p in parts), 1)))
                self._f.create_dataset(
                    name,
                    data=first,  # created with its first slab: one call instead of create, resize, write
                    maxshape=(None, *first.shape[1:]),
                    chunks=(chunk_rows, *first.shape[1:]),
                    # LZF (bundled with h5py) writes about twice as fast as gzip at a similar size here;
                    # byte shuffle cost 15-20 % more time for no smaller files on DD.
                    compression="lzf",
                    fletcher32=True,
                )
            else:
                rest = parts
            ds = self._f[name]
            start = ds.shape[0]
            if rest:
                ds.resize(start + sum(p.shape[0] for p in rest), axis=0)
            for p in rest:  # no concatenated copy of large slabs: each goes straight to its rows
                if p.shape[0]:
                    ds[start:start + p.shape[0]] = p
                    start += p.shape[0]

    def set_attrs(self, name: str, **attrs: Any) -> None:
        """Attributes on group ``name`` (created if needed), written in order with the data."""
        self.flush()

        def job() -> None:
            assert self._f is not None
            obj = self._f.require_group(name)
            for k, v in attrs.items():
                obj.attrs[k] = v

        self._submit(job)

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._f is not None and self._thread is not None
        ok = exc_type is None
        try:
            if ok:
                self.flush()
            self._jobs.put(None)
            self._thread.join()
            if ok and self._error is not None:
                ok = False
                raise self._error
            if ok:
                self._f.attrs["complete"] = True
        finally:
            self._f.close()
            try:
                if ok:
                    os.replace(self.tmp, self.path)
            finally:
                self.tmp.unlink(missing_ok=True)  # gone after a rename; removed after any failure


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
        }


class StructureCache:
    """Read API for one cache file; opens lazily, so it can be passed to loader workers.

    Example::

        from xmask_cli.cache import StructureCache
        c = StructureCache("cache/mutag/<key>.h5")
        row, col, vals = c.powers(0)          # pairs of graph 0 and Â^1..Â^K there
        dense = c.dense_powers(0)             # [K, n, n] float32
        d = c.dense_spd(0)                    # [n, n] int16, -1 beyond cut-off, -2 unreachable
        lam, vec = c.spectrum(0)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._f: h5py.File | None = None
        self._mem: dict[str, np.ndarray] = {}

    # -- file handling
    @property
    def file(self) -> h5py.File:
        if self._f is None:
            try:
                self._f = h5py.File(self.path, "r")
                version = int(self._f.attrs.get("format_version", -1))
            except _H5_ERRORS as exc:
                raise CacheError(f"cannot open cache {self.path}: {first_line(exc)}; "
                                 f"run `xmask prepare ... --force` to rebuild it") from exc
            if version != FORMAT_VERSION:
                raise CacheError(
                    f"cache {self.path} has format version {version}, this xmask reads {FORMAT_VERSION}; "
                    f"run `xmask prepare ... --force` to rebuild it"
                )
        return self._f

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def forget_handle(self) -> None:
        """Drop (without closing) a file handle inherited from a parent process; reopen lazily."""
        self._f = None

    @property
    def in_memory(self) -> bool:
        """True once :meth:`load_in_memory` has read the arrays."""
        return bool(self._mem)

    def __getstate__(self) -> dict[str, Any]:
        # h5py handles cannot be pickled: a worker reopens the file on first use.
        return {"path": self.path, "_f": None, "_mem": {}}

    def __enter__(self) -> "StructureCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def load_in_memory(self) -> "StructureCache":
        """Read every array once; later accessors then never touch the file."""
        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                self._mem[name] = self._checked(obj, name, None)

        try:
            self.file.visititems(visit)
        except (OSError, RuntimeError) as exc:  # damaged HDF5 metadata (e.g. "bad heap free list")
            raise self._corrupt("file structure", exc) from exc
        return self

    def has(self, name: str) -> bool:
        """Whether the group or dataset ``name`` (e.g. ``"rrwp"``, ``"spd/dist"``) is stored."""
        if self._mem:  # in memory: never touch the file
            return name in self._mem or any(k.startswith(f"{name}/") for k in self._mem)
        try:
            return name in self.file
        except (OSError, RuntimeError) as exc:
            raise self._corrupt(name, exc) from exc

    def _checked(self, ds: h5py.Dataset, name: str, sl: slice | None) -> np.ndarray:
        """Read ``ds`` (or a slice); a checksum or decompression failure becomes a :class:`CacheError`."""
        try:
            return ds[()] if sl is None else ds[sl]
        except (OSError, RuntimeError) as exc:
            raise self._corrupt(name, exc) from exc

    def _corrupt(self, name: str, exc: BaseException) -> CacheError:
        return CacheError(f"cache {self.path} is corrupt ('{name}': {first_line(exc)}); "
                          f"run `xmask cache verify`, then `xmask prepare ... --force` to rebuild it")

    def read_array(self, name: str, sl: slice | None = None) -> np.ndarray:
        """The stored array ``name`` (e.g. ``"graphs/large"``), or its slice ``sl``.

        Reads from memory after :meth:`load_in_memory`; a missing array or a
        damaged chunk raises :class:`CacheError` with the command that fixes it.
        """
        if name in self._mem:
            arr = self._mem[name]
            return arr if sl is None else arr[sl]
        if not self.has(name):
            raise CacheError(f"cache {self.path} has no '{name}'; prepare it with the structure that needs it")
        try:
            ds = self.file[name]
        except (OSError, RuntimeError, KeyError) as exc:
            raise self._corrupt(name, exc) from exc
        return self._checked(ds, name, sl)

    # -- metadata
    @property
    def params(self) -> dict[str, Any]:
        return json.loads(self.file.attrs["params"])

    @property
    def fingerprint(self) -> str:
        return str(self.file.attrs["fingerprint"])

    @property
    def num_graphs(self) -> int:
        return int(self.read_array("graphs/num_nodes").shape[0])

    def num_nodes(self, g: int) -> int:
        return int(self.read_array("graphs/num_nodes", slice(g, g + 1))[0])

    def node_slice(self, g: int) -> slice:
        """Graph ``g``'s rows in the per-node arrays (``nodes/*``, the ``indptr`` of pair groups)."""
        p = self.read_array("graphs/node_ptr", slice(g, g + 2))
        return slice(int(p[0]), int(p[1]))

    def num_pairs(self, group: str, g: int) -> int:
        """Stored pairs of graph ``g`` in a pair group (``powers``, ``spd``, ``rrwp``), without reading them."""
        nodes = self.node_slice(g)
        ip = self.read_array(f"{group}/indptr", slice(nodes.start, nodes.stop + 1))
        return int(ip[-1] - ip[0])

    # -- per-graph accessors
    def pairs(self, group: str, g: int) -> dict[str, np.ndarray]:
        """All arrays of a pair group (``powers``, ``spd``, ``rrwp``) for graph ``g``."""
        nodes = self.node_slice(g)
        ip = self.read_array(f"{group}/indptr", slice(nodes.start, nodes.stop + 1))
        sl = slice(int(ip[0]), int(ip[-1]))
        names = [k for k in ("col", "values", "dist") if self.has(f"{group}/{k}")]
        out = {k: self.read_array(f"{group}/{k}", sl) for k in names}
        out["row"] = np.repeat(np.arange(len(ip) - 1, dtype=np.int32), np.diff(ip))
        return out

    def powers(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, col, values[P, K])`` of graph ``g``: Â^1..Â^K on their union support."""
        d = self.pairs("powers", g)
        return d["row"], d["col"], d["values"]

    def dense_powers(self, g: int) -> np.ndarray:
        """``[K, n, n]`` float32 powers of graph ``g`` (zeros off the stored support)."""
        row, col, vals = self.powers(g)
        n = self.num_nodes(g)
        out = np.zeros((vals.shape[1], n, n), dtype=np.float32)
        out[:, row, col] = vals.T
        return out

    def spd(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.pairs("spd", g)
        return d["row"], d["col"], d["dist"]

    def dense_spd(self, g: int) -> np.ndarray:
        """``[n, n]`` int16 hop distances: ``-1`` beyond the cut-off, ``-2`` unreachable."""
        from xmask_cli.structure.spd import PairDistances

        return PairDistances(*self.spd(g), self.component(g)).block()

    def rrwp(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.pairs("rrwp", g)
        return d["row"], d["col"], d["values"]

    def component(self, g: int) -> np.ndarray:
        return self.read_array("nodes/component", self.node_slice(g))

    def partition(self, g: int) -> np.ndarray:
        return self.read_array("nodes/part", self.node_slice(g))

    def _eig(self, group: str, g: int) -> tuple[np.ndarray, np.ndarray]:
        vp = self.read_array(f"{group}/val_ptr", slice(g, g + 2))
        xp = self.read_array(f"{group}/vec_ptr", slice(g, g + 2))
        vals = self.read_array(f"{group}/eigvals", slice(int(vp[0]), int(vp[1])))
        flat = self.read_array(f"{group}/eigvecs", slice(int(xp[0]), int(xp[1])))
        return vals, flat.reshape(self.num_nodes(g), vals.shape[0])

    def spectrum(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """``(eigenvalues ascending, eigenvectors [n, m])`` of the normalized Laplacian."""
        return self._eig("spectrum", g)

    def magnetic(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """``(eigenvalues, complex eigenvectors [n, m])`` of the magnetic Laplacian."""
        return self._eig("magnetic", g)


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
                params=json.loads(f.attrs.get("params", "{}")),
                num_graphs=int(f["graphs/num_nodes"].shape[0]) if "graphs/num_nodes" in f else 0,
            )
    except _H5_ERRORS as exc:
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
                "num_graphs": 0, "params": {}, **status}

    rows: list[dict[str, Any]] = []
    for d in _dataset_dirs(cache_dir, dataset):
        for p in sorted(d.iterdir()):
            m = _TMP_NAME.match(p.name)
            if m:
                pid = int(m.group(1))
                rows.append(unread(p, p.name[1:21], status="writing" if _pid_alive(pid) else "stale", writer_pid=pid))
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
    except _H5_ERRORS as exc:
        return [f"cannot open: {first_line(exc)}"]
    try:
        with f:
            return _problems(f, path, expected_fingerprint, full, expected_dataset)
    except _H5_ERRORS as exc:
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
        params = json.loads(f.attrs["params"])
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


#: A cache file's name: its key (see :func:`cache_key`).
_KEY_NAME = re.compile(r"^[0-9a-f]{20}\.h5$")
#: A temporary file of :class:`CacheWriter`: ``.<key>.h5.tmp-<writer pid>``.
_TMP_NAME = re.compile(r"^\.[0-9a-f]{20}\.h5\.tmp-(\d+)$")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale_temp(path: Path) -> bool:
    """A :class:`CacheWriter` temp file whose writer process is gone."""
    m = _TMP_NAME.match(path.name)
    return bool(m) and path.is_file() and not path.is_symlink() and not _pid_alive(int(m.group(1)))


def is_own_cache_file(path: Path) -> bool:
    """Whether ``path`` provably is a cache file xmask wrote (the only files ``clear`` deletes).

    It must be a regular file named ``<key>.h5``, start with the HDF5 signature,
    and record that key, a format version and its dataset folder in its root
    attributes. A file whose HDF5 metadata is too damaged to read those back is
    accepted on its name and signature alone (so a corrupt cache can be cleared).
    """
    path = Path(path)
    if not _KEY_NAME.match(path.name) or path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != _HDF5_SIGNATURE:
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
