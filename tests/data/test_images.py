"""Image datasets: scikit-learn digits, CIFAR-10 python batches (synthetic, in the real layout), splits, statistics."""
from __future__ import annotations

import hashlib
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import xmask_cli.data.images as I
from xmask_cli.cli import app
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import DataNotFoundError


def test_digits_are_sklearns_images_with_a_fixed_test_set():
    from sklearn.datasets import load_digits

    ref = load_digits()
    ds = I.load_images(get_dataset("digits"))
    assert ds.images.shape == (1797, 1, 8, 8) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.images[:, 0].astype(np.float64), ref.images)
    np.testing.assert_array_equal(ds.labels, ref.target)
    assert len(ds.test) == 359 and len(np.intersect1d(ds.test, ds.pool)) == 0 and len(ds.pool) + 359 == 1797
    np.testing.assert_array_equal(I.load_images(get_dataset("digits")).test, ds.test)


def test_channel_stats_are_the_training_images_own():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(50, 3, 4, 5), dtype=np.uint8)
    x[:, 2] = 7  # a constant channel must not divide by zero
    idx = np.array([1, 4, 9, 20, 33])
    mean, std = I.channel_stats(x, idx)
    sub = x[idx].astype(np.float64)
    np.testing.assert_allclose(mean, [sub[:, c].mean() for c in range(3)])
    np.testing.assert_allclose(std[:2], [sub[:, c].std() for c in range(2)])
    assert std[2] == 1.0


# ----------------------------------------------------------------- CIFAR-10
def fake_cifar(root: Path, per_batch: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Write data_batch_1..5 and test_batch as the CIFAR python version lays them out; return (rows, labels)."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rows, labels = [], []
    for name in (*[f"data_batch_{i}" for i in range(1, 6)], "test_batch"):
        r = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        y = rng.integers(0, 10, size=per_batch)
        I.write_cifar_batch(folder / name, r.reshape(per_batch, 3, 32, 32), y, label=name)
        rows.append(r)
        labels.append(y)
    return np.concatenate(rows), np.concatenate(labels)


def test_cifar10_batches_are_read_in_their_pixel_order_with_the_official_test_set(tmp_path):
    rows, labels = fake_cifar(tmp_path / "root")
    ds = I.load_images(get_dataset("cifar10"), data_root=tmp_path / "root", offline=True)
    assert ds.images.shape == (24, 3, 32, 32)
    # The python batches store each image as 1024 red, 1024 green, 1024 blue values, rows of 32.
    i, c, r, col = 13, 2, 5, 30
    assert ds.images[i, c, r, col] == rows[i, c * 1024 + r * 32 + col]
    np.testing.assert_array_equal(ds.labels, labels)
    np.testing.assert_array_equal(ds.test, np.arange(20, 24))  # test_batch
    np.testing.assert_array_equal(ds.pool, np.arange(20))


def test_cifar10_missing_offline_says_where_it_looked(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match=f"{empty}/cifar-10-batches-py.*offline"):
        I.load_images(get_dataset("cifar10"), data_root=empty, offline=True)
    r = CliRunner().invoke(app, ["train", "--dataset", "cifar10", "--data-root", str(empty), "--offline",
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 3
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: CIFAR-10: batches not found in") and str(empty) in lines[0]


def test_a_pickle_that_names_anything_but_numpy_is_refused_not_run(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = tmp_path / "root" / "cifar-10-batches-py"
    fake_cifar(tmp_path / "root")
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}, protocol=2))
    with pytest.raises(DataNotFoundError, match=r"data_batch_3: not a readable CIFAR-10 batch \(refusing to load"):
        I.load_images(get_dataset("cifar10"), data_root=tmp_path / "root", offline=True)
    assert not marker.exists()


def test_a_truncated_batch_is_reported_with_its_path(tmp_path):
    fake_cifar(tmp_path / "root")
    p = tmp_path / "root" / "cifar-10-batches-py" / "test_batch"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(DataNotFoundError, match="test_batch: not a readable CIFAR-10 batch"):
        I.load_images(get_dataset("cifar10"), data_root=tmp_path / "root", offline=True)


def test_online_download_is_checked_extracted_and_reported_on_stderr(tmp_path, monkeypatch):
    # A local archive in the real layout stands in for the CIFAR page (file:// goes through the same urlopen).
    rows, _ = fake_cifar(tmp_path / "src", per_batch=2)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    monkeypatch.setattr(I, "CIFAR_URL", archive.as_uri())
    monkeypatch.setattr(I, "CIFAR_MD5", hashlib.md5(archive.read_bytes()).hexdigest())
    lines: list[str] = []
    ds = I.load_images(get_dataset("cifar10"), data_root=tmp_path / "root", offline=False, progress=lines.append)
    assert ds.images.shape == (12, 3, 32, 32) and ds.images[5, 1, 0, 3] == rows[5, 1024 + 3]
    assert any("downloading" in ln and "100%" in ln for ln in lines)
    assert not (tmp_path / "root" / "cifar-10-python.tar.gz").exists()  # the archive is removed after extraction
    # A corrupted download is refused by its checksum.
    monkeypatch.setattr(I, "CIFAR_MD5", "0" * 32)
    with pytest.raises(DataNotFoundError, match="MD5"):
        I.load_images(get_dataset("cifar10"), data_root=tmp_path / "other", offline=False, progress=lines.append)


def test_an_unwritable_data_root_is_refused_before_any_download(tmp_path, monkeypatch):
    """The data root is checked first (a file in the way): NotWritableError, and the URL is never opened."""
    from xmask_cli.errors import NotWritableError

    opened: list[str] = []
    monkeypatch.setattr(I.urllib.request, "urlopen", lambda url, **kw: opened.append(url))
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(NotWritableError, match="a-file is a file, not a folder; pass a writable --data-root"):
        I.load_images(get_dataset("cifar10"), data_root=tmp_path / "a-file" / "root", offline=False)
    assert opened == []
