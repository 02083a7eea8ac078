"""Writing a cache file: block by block, in a background thread, under a temporary name renamed on success."""
from __future__ import annotations

import datetime as _dt
import json
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from xmask_cli.cache.files import FORMAT_VERSION, is_stale_temp
from xmask_cli.fs import ensure_writable_dir, write_failed
from xmask_cli.versions import package_versions

__all__ = ["CacheWriter"]

_CHUNK = 1 << 17
_FLUSH_BYTES = 64 << 20
#: Datasets stored without compression (checksummed all the same): eigenvectors and eigenvalues are
#: dense floats that LZF shrinks by 4 % on DD, for about 8 % of the writer thread's time.
_RAW = ("eigvals", "eigvecs")


#: The packages whose versions a cache file records (with xmask's), in its ``versions`` attribute.
_CACHE_PACKAGES = ("torch", "torch_geometric", "numpy", "scipy", "h5py")


class _GuardedFile:
    """The temp file as HDF5 sees it (h5py's file-object driver): a failed write is recorded, not raised.

    HDF5 left with a failed write in its caches retries it on every later flush and
    object release, printing tracebacks, and has crashed the process (a full disk,
    seen with a 600 KB tmpfs). Here HDF5 never sees the failure: the write is dropped,
    :attr:`error` keeps the first ``OSError``, and :class:`CacheWriter` raises it in the
    caller's thread and deletes the (useless) temp file.
    """

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        self.pos = 0
        self.size = 0
        self.error: OSError | None = None

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else (self.pos + offset if whence == 1 else self.size + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.error is None:
            try:
                done = 0
                while done < len(view):
                    done += os.pwrite(self.fd, view[done:], self.pos + done)
            except OSError as exc:
                self.error = exc
        self.pos += len(view)
        self.size = max(self.size, self.pos)
        return len(view)

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        got = os.preadv(self.fd, [view], self.pos) if self.error is None else 0
        view[got:] = bytes(len(view) - got)  # past the end (or after a dropped write): zeros, as HDF5 expects
        self.pos += len(view)
        return len(view)

    def read(self, size: int = -1) -> bytes:
        buf = bytearray(max(0, self.size - self.pos) if size < 0 else size)
        self.readinto(buf)
        return bytes(buf)

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self.fd, size)
            except OSError as exc:
                self.error = exc
        self.size = size
        return size

    def flush(self) -> None:
        """HDF5's flush: nothing to do, every write went to the file already (:meth:`sync` makes it durable)."""

    def sync(self) -> None:
        """Make the written file durable: once, after HDF5 closed it, before the rename."""
        if self.error is None:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                self.error = exc

    def close(self) -> None:
        os.close(self.fd)


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
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=2)  # bounds memory held by pending slabs
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> CacheWriter:
        self._file = _GuardedFile(self.tmp)
        self._f = h5py.File(self._file, "w")
        for k, v in self._attrs.items():
            self._f.attrs[k] = v
        self._f.attrs["format_version"] = FORMAT_VERSION
        self._f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._f.attrs["versions"] = json.dumps(package_versions(_CACHE_PACKAGES), sort_keys=True)
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
            if self._error is None and self._file.error is None:  # after a failure, nothing more is written
                try:
                    job()
                except BaseException as exc:  # re-raised in the caller's thread
                    self._error = exc

    def _failed(self) -> BaseException | None:
        """The first failure: of the disk (a full disk, a quota: exit 5), else of a write job."""
        disk = getattr(self, "_file", None)
        if disk is not None and disk.error is not None:
            return write_failed(disk.error, self.path, "pass another --cache-dir")
        return self._error

    def _submit(self, job: Callable[[], None]) -> None:
        failed = self._failed()
        if failed is not None:
            raise failed
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
                    compression=None if name.rsplit("/", 1)[-1] in _RAW else "lzf",
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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._f is not None and self._thread is not None
        ok = exc_type is None
        try:
            if ok:
                self.flush()
            self._jobs.put(None)
            self._thread.join()
            if ok and self._failed() is None:
                self._f.attrs["complete"] = True
        finally:
            try:
                self._f.close()
                if ok:  # a file about to be deleted needs no fsync
                    self._file.sync()
            finally:
                self._file.close()
                try:
                    failed = self._failed()
                    if ok and failed is not None:
                        raise failed
                    if ok:
                        os.replace(self.tmp, self.path)
                finally:
                    self.tmp.unlink(missing_ok=True)  # gone after a rename; removed after any failure
