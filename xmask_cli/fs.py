"""Filesystem checks every layer uses (a leaf: imports nothing of xmask but its errors)."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from xmask_cli.errors import NotWritableError, UsageError

__all__ = ["ensure_writable_dir", "write_failed", "DISK_FULL", "refuse_file_as_dir", "atomic_write", "refuse_links", "open_nofollow",
           "NotRegularFile", "open_regular_fd", "check_writable"]


def ensure_writable_dir(path: Path, what: str = "cache dir", hint: str = "pass --cache-dir or set XMASK_CACHE") -> Path:
    """Create ``path`` if needed; fail with :class:`NotWritableError` if it cannot take files.

    Args:
        what, hint: how the message names the folder and what to do (``"output folder"``, ``"pass another --out"``).

    Raises:
        NotWritableError: ``path`` (or a parent) is a file, or it cannot be created or written.
    """
    path = Path(path)
    refuse_file_as_dir(path, what, hint)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritableError(f"cannot create {what} {path}: {exc.strerror}; {hint}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise NotWritableError(f"{what} {path} is not writable; {hint}")
    return path


def check_writable(path: Path, what: str, hint: str) -> None:
    """Fail with :class:`NotWritableError` (exit 5) when ``path`` could not take files; creates nothing.

    ``path`` (or its nearest existing parent) is a file, or the nearest existing folder is on a read-only file
    system or not writable by this process: what a command checks of every folder it will write before any
    work, so a sweep never trains for an hour to fail at its first checkpoint.
    """
    path = Path(path)
    refuse_file_as_dir(path, what, hint)
    folder = next((p for p in (path, *path.parents) if p.exists()), None)
    if folder is None:
        return
    where = "" if folder == path else f" ({folder})"
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise NotWritableError(f"{what} {path} is on a read-only file system{where}; {hint}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NotWritableError(f"{what} {path} is not writable{where}; {hint}")


def refuse_file_as_dir(path: Path, what: str = "cache dir", hint: str = "pass --cache-dir or set XMASK_CACHE") -> None:
    """Fail with :class:`NotWritableError` (exit 5) when ``path`` or its nearest existing parent is a file.

    Commands that only read a folder (``cache ls``) say what ``prepare`` would say of it.
    """
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                where = f"{what} {path}" + ("" if p == path else f": {p}")
                raise NotWritableError(f"{where} is a file, not a folder; {hint}")
            break


def refuse_links(folder: Path, names: Iterable[str], what: str = "run folder") -> None:
    """Refuse (UsageError, exit 2) a folder in which any of ``names`` is a symbolic link, or anything else
    but a regular file (a folder, a FIFO, a socket, a device).

    xmask writes these files itself; a link there was planted by someone else, and
    writing through it would truncate whatever it points at; a folder or FIFO under the name would make the
    write fail, or block, only once the work that produces the file is done.
    """
    for name in names:
        path = Path(folder) / name
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(mode):
            raise UsageError(f"{path} is a symbolic link, which xmask never writes through; remove it "
                             f"(the {what} {folder} must hold plain files only)")
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
            raise UsageError(f"{path} is {kind}, not a file; xmask writes a file under that name: remove it "
                             f"(the {what} {folder} must hold plain files only)")


def sha256_of(fh: BinaryIO) -> str:
    """sha256 of what is left to read in the open binary file ``fh``, streamed in 1 MiB blocks (any size)."""
    h = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def open_nofollow(path: Path, flags: int, what: str = "run folder") -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a link planted at ``path`` is refused (UsageError), never followed."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path} is a symbolic link, which xmask never writes through; remove it "
                             f"(the {what} {Path(path).parent} must hold plain files only)") from None
        raise


class NotRegularFile(OSError):
    """:func:`open_regular_fd` found something other than a regular file; ``mode`` is its ``st_mode``."""

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        super().__init__(f"{path}: not a regular file")
        self.mode = mode


def open_regular_fd(path: str | os.PathLike[str], *, follow_links: bool = False) -> int:
    """A read-only descriptor of ``path`` if it is a regular file; by default never through a symbolic link.

    Opened with ``O_NONBLOCK``, so a FIFO planted under a file's name is refused, not waited on; the
    descriptor is left non-blocking (a regular file reads the same either way).

    Raises:
        FileNotFoundError: nothing at ``path``.
        NotRegularFile: a FIFO, device or folder at ``path``.
        OSError: any other failure of the open (``ELOOP`` for a link not followed, ``ENXIO`` for a socket).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(path, mode)
    return fd


#: errno values of a write that failed for want of room: reported as :class:`NotWritableError` (exit 5).
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def atomic_write(path: Path, write: Callable[[BinaryIO], Any], hint: str = "") -> None:
    """Call ``write(file_object)`` on a temp file beside ``path``, then rename it over ``path``.

    A failed write leaves ``path`` as it was and no temp file; a full disk (or quota) raises
    :func:`write_failed`'s :class:`NotWritableError` (exit 5, ``hint`` appended).
    """
    path = Path(path)
    # Same folder: os.replace is only atomic within one file system.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; the result gets the mode a plain open() would (a shared cache or runs
        # folder stays readable by the group the umask allows).
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        # A failed write must not leave a stray temp file behind.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            raise write_failed(exc, path, hint) from None
        raise


def _umask() -> int:
    """The process's umask (read by setting it and setting it back: there is no plain getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_failed(exc: OSError, path: Path, hint: str = "") -> NotWritableError:
    """The one-line error (exit 5) for a write that failed: ``no space left on device writing <path>``.

    Args:
        exc: the ``OSError`` of the failed write (its ``strerror`` says why: no space, quota, I/O error).
        path: the file being written, as the user knows it (not its temp name).
        hint: what to do, appended after ``; ``.
    """
    reason = (exc.strerror or os.strerror(exc.errno or errno.EIO)).lower()
    return NotWritableError(f"{reason} writing {path}{_disk(Path(path))}" + (f"; {hint}" if hint else ""))


def _disk(path: Path) -> str:
    """`` (file system at <mount point>, <free> free)`` for ``path``'s disk, or ``""`` when it cannot be told."""
    try:
        folder = Path(os.path.abspath(path)).parent
        while not folder.exists():
            folder = folder.parent
        mount = folder
        while not os.path.ismount(mount):
            mount = mount.parent
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    size = next(f"{free / 1024 ** i:.1f} {unit}" for i, unit in enumerate(("B", "KB", "MB", "GB", "TB"))
                if free < 1024 ** (i + 1) or unit == "TB")
    return f" (file system at {mount}, {size} free)"
