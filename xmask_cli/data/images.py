"""Image datasets for the ViT level: scikit-learn's 8x8 digits (offline) and CIFAR-10.

Images are kept as ``uint8 [N, C, H, W]`` (what the files hold, a quarter of
float32) and normalised per batch with per-channel statistics of the
training split (:func:`channel_stats`), so the validation and test images
never inform the normalisation.

Splits (:func:`xmask_cli.engine.tasks.image.image_split`): the test set is fixed — CIFAR-10's
``test_batch``; for digits a 20 % subset drawn once with seed 0 — and the
validation set is carved from the remaining training images by the run's
seed (CIFAR-10: 5,000 images; digits: 10 % of all images).

CIFAR-10 is read from the standard python-pickle batches
(``cifar-10-batches-py/data_batch_1..5``, ``test_batch``) under the data root
(``--data-root``, else ``XMASK_DATA_ROOT``, else the preset's ``data.root``,
then ``~/.cache/xmask/datasets``), through an unpickler that only rebuilds
numpy arrays (a pickle can run code; these files come from the network). When
the files are absent and the session is online, the archive is downloaded from
the CIFAR page into the data root, its MD5 checked, and extracted.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
import tarfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.data.load import DEFAULT_DATA_ROOT, has_raw_files, is_offline
from xmask_cli.data.spec import DatasetSpec
from xmask_cli.errors import DataNotFoundError, UsageError, first_line
from xmask_cli.fs import ensure_writable_dir

__all__ = ["ImageInfo", "IMAGE_INFO", "ImageSet", "image_info", "load_images", "channel_stats",
           "read_cifar_batch", "CIFAR_URL", "CIFAR_MD5"]

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_MD5 = "c58f30108f718f92721af3b95e74349a"  # published on the CIFAR page
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@dataclass(frozen=True)
class ImageInfo:
    """What is known about an image dataset before loading it (enough to prepare its grid).

    Attributes:
        shape: ``(channels, height, width)`` of every image.
        classes: class names.
        val: validation images carved from the training pool (int), or a fraction of all images (float).
        test_fraction: digits: the fixed test share; None when the dataset ships a test set.
    """

    shape: tuple[int, int, int]
    classes: tuple[str, ...]
    val: int | float
    test_fraction: float | None = None


IMAGE_INFO: dict[str, ImageInfo] = {
    "digits": ImageInfo((1, 8, 8), tuple(str(d) for d in range(10)), val=0.10, test_fraction=0.20),
    "cifar10": ImageInfo((3, 32, 32), CIFAR_CLASSES, val=5000),
}


def image_info(spec: DatasetSpec) -> ImageInfo:
    """The :class:`ImageInfo` of an image dataset of the registry."""
    try:
        return IMAGE_INFO[spec.key]
    except KeyError:
        raise UsageError(f"{spec.name} is not an image dataset") from None


@dataclass
class ImageSet:
    """An image dataset in memory.

    Attributes:
        spec: registry entry.
        images: ``uint8 [N, C, H, W]``.
        labels: ``int64 [N]``.
        test: indices of the fixed test images.
        pool: indices the training and validation images are drawn from.
        source: where the images were read from.
    """

    spec: DatasetSpec
    images: np.ndarray
    labels: np.ndarray
    test: np.ndarray
    pool: np.ndarray
    source: str

    @property
    def info(self) -> ImageInfo:
        return image_info(self.spec)

    @property
    def num_classes(self) -> int:
        return len(self.info.classes)


# --------------------------------------------------------------- statistics
def channel_stats(images: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (population) over the images ``index``, as float64 ``[C]`` each.

    Accumulated channel by channel in float64, so CIFAR's training split is
    never copied to float whole. A constant channel gets std 1 (no division by 0).
    """
    sub = images[np.asarray(index, dtype=np.int64)]
    mean = np.array([sub[:, c].mean(dtype=np.float64) for c in range(sub.shape[1])])
    var = np.array([np.square(sub[:, c] - mean[c], dtype=np.float64).mean() for c in range(sub.shape[1])])
    std = np.sqrt(var)
    return mean, np.where(std > 0, std, 1.0)


# ------------------------------------------------------------------ loaders
def _load_digits(spec: DatasetSpec) -> ImageSet:
    from sklearn.datasets import load_digits

    d = load_digits()  # ships inside scikit-learn: no file, no network
    images = np.asarray(d.images, dtype=np.float64).round().clip(0, 255).astype(np.uint8)[:, None]
    labels = np.asarray(d.target, dtype=np.int64)
    info = IMAGE_INFO["digits"]
    order = np.random.default_rng(0).permutation(len(labels))  # seed 0: the same test set for every run
    n_test = int(round((info.test_fraction or 0.0) * len(labels)))  # digits has one (IMAGE_INFO)
    return ImageSet(spec, images, labels, test=np.sort(order[:n_test]), pool=np.sort(order[n_test:]),
                    source="sklearn.datasets.load_digits")


class _NumpyOnly(pickle.Unpickler):
    """Unpickler that rebuilds numpy arrays, dtypes and plain Python values, and refuses any other callable.

    The CIFAR batches are pickled dicts of a ``uint8`` array and lists; a
    pickle that names anything else (``os.system``, ``builtins.eval``...) is
    not a CIFAR batch and is refused instead of run.
    """

    ALLOWED = frozenset({
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),  # how Python 3 protocol-2 pickles store bytes
    })

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays are allowed)")


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch -> ``(uint8 [n, 3, 32, 32], int64 [n])``.

    Raises:
        DataNotFoundError: the file is not a readable CIFAR-10 batch (truncated,
            another format, or a pickle naming anything but numpy arrays).
    """
    try:
        with open(path, "rb") as f:
            d = _NumpyOnly(f, encoding="bytes").load()
        data, labels = d[b"data"], d[b"labels"]
        data = np.asarray(data, dtype=np.uint8)
        labels = np.asarray(labels, dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
            raise ValueError(f"data {data.shape} / {len(labels)} labels, expected [n, 3072] and n labels")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError("labels outside 0..9")
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError, ValueError, AttributeError) as exc:
        first = first_line(exc)
        raise DataNotFoundError(f"{path}: not a readable CIFAR-10 batch ({first}); remove it and re-download, "
                                f"or put the original cifar-10-batches-py/ there") from exc
    return data.reshape(-1, 3, 32, 32), labels


def _download(url: str, dest: Path, progress: Callable[[str], None]) -> None:
    """Fetch ``url`` to ``dest`` (temp name, then rename) with a progress line every 10 %."""
    tmp = dest.with_name(f".{dest.name}.part{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as f:
            total = int(resp.headers.get("Content-Length") or 0)
            done, shown = 0, -10
            while chunk := resp.read(1 << 20):
                f.write(chunk)
                done += len(chunk)
                pct = int(100 * done / total) if total else 0
                if total and pct >= shown + 10:
                    shown = pct - pct % 10
                    progress(f"downloading {url}: {pct}% of {total / 1e6:.0f} MB")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def _fetch_cifar(spec: DatasetSpec, root: Path, progress: Callable[[str], None]) -> None:
    """Download, check and extract the CIFAR-10 archive into ``root`` (its batches land in ``root/<spec.folder>``)."""
    ensure_writable_dir(root, "data root for the CIFAR-10 download", "pass a writable --data-root")
    archive = root / "cifar-10-python.tar.gz"
    try:
        _download(CIFAR_URL, archive, progress)
    except OSError as exc:  # URLError is an OSError: no network, DNS, refused, timeout
        raise DataNotFoundError(f"CIFAR-10: files not under {root / spec.folder} and the download from {CIFAR_URL} "
                                f"failed ({exc}); put cifar-10-batches-py/ under --data-root, or retry online") from exc
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    if md5 != CIFAR_MD5:
        archive.unlink()
        raise DataNotFoundError(f"CIFAR-10: the downloaded archive has MD5 {md5}, expected {CIFAR_MD5}; retry")
    with tarfile.open(archive, "r:gz") as tar:
        # Only the batch folder's regular files; the 'data' filter refuses links and paths leaving root.
        members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(f"{spec.folder}/")
                   and ".." not in Path(m.name).parts]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # Python < 3.10.12 lacks filters
            tar.extractall(root, members=members)
    archive.unlink()
    progress(f"CIFAR-10 extracted to {root / spec.folder}")


def _load_cifar10(spec: DatasetSpec, data_root: Path | None, offline: bool,
                  progress: Callable[[str], None]) -> ImageSet:
    looked = [r for r in (data_root, DEFAULT_DATA_ROOT) if r is not None]
    source = next((r for r in looked if has_raw_files(spec, r)), None)
    if source is None:
        where = ", ".join(str(r / spec.folder) for r in looked)
        if offline:
            raise DataNotFoundError(
                f"CIFAR-10: batches not found in {where} (offline, so no download was tried); put "
                f"{spec.folder}/data_batch_1..5 and test_batch (the python version from "
                f"https://www.cs.toronto.edu/~kriz/cifar.html) under a root and pass --data-root <root> "
                f"(or set XMASK_DATA_ROOT), or go online without --offline/XMASK_OFFLINE to download")
        source = data_root or DEFAULT_DATA_ROOT
        _fetch_cifar(spec, source, progress)
    # The registry lists the five training batches, then test_batch (the fixed test set, read last).
    parts = [read_cifar_batch(source / spec.folder / f) for f in spec.raw_files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    n_test = len(parts[-1][1])
    n = len(labels)
    return ImageSet(spec, images, labels, test=np.arange(n - n_test, n), pool=np.arange(n - n_test),
                    source=str(source / spec.folder))


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def load_images(spec: DatasetSpec, *, data_root: Path | None = None, offline: bool | None = None,
                progress: Callable[[str], None] = _stderr) -> ImageSet:
    """Load an image dataset of the registry (see the module docstring for where files are looked for).

    Raises:
        DataNotFoundError: CIFAR-10 files missing and offline, the download failed, or a batch is unreadable.
        NotWritableError: the data root cannot take the download.
    """
    if spec.key == "digits":
        return _load_digits(spec)
    if spec.key == "cifar10":
        return _load_cifar10(spec, data_root, is_offline(offline), progress)
    raise UsageError(f"{spec.name} is not an image dataset")


def write_cifar_batch(path: Path, images: np.ndarray, labels: np.ndarray, label: str = "batch") -> None:
    """Write ``uint8 [n, 3, 32, 32]`` images as a CIFAR-10 python batch (the original's layout; for tests)."""
    d = {b"batch_label": label.encode(), b"labels": [int(v) for v in labels],
         b"data": np.ascontiguousarray(images, dtype=np.uint8).reshape(len(images), -1),
         b"filenames": [f"img_{i}.png".encode() for i in range(len(images))]}
    buf = io.BytesIO()
    pickle.dump(d, buf, protocol=2)
    path.write_bytes(buf.getvalue())
