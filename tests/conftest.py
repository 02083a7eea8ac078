"""Shared fixtures: the read-only benchmark datasets, an offline environment, a temp cache."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_datasets_dir() -> Path:
    """``../shared/datasets`` beside the checkout (``XMASK_TEST_DATA`` overrides)."""
    return Path(os.environ.get("XMASK_TEST_DATA") or REPO.parent / "shared" / "datasets")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_datasets_dir()
    # Fail, never skip: a missing data folder must not pass unnoticed.
    assert (path / "PROTEINS" / "raw").is_dir(), f"benchmark datasets not found at {path}; set XMASK_TEST_DATA"
    return path


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test runs offline, with no data root or cache dir inherited from the shell."""
    monkeypatch.setenv("XMASK_OFFLINE", "1")
    for var in ("XMASK_DATA_ROOT", "XMASK_CACHE", "XMASK_PRESETS", "XMASK_FORMAT", "XMASK_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mount a tmpfs of a given size (a real full disk); unmounted after the test.

    Mounting needs root in a container that allows it; elsewhere the test is reported as skipped, with the
    reason and the simulated test that covers the same code.
    """
    mounted: list[Path] = []

    def mount(size: str, covered_by: str) -> Path:
        path = tmp_path / "full"
        path.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); {covered_by}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], check=True)


@pytest.fixture
def read_only_tmpfs(small_tmpfs: Callable[[str, str], Path]) -> Callable[[Callable[[Path], object]], Path]:
    """A tmpfs filled by ``populate(path)``, then remounted read-only: a read-only file system even for root
    (the tests run as root, where ``chmod`` stops no write)."""

    def make(populate: Callable[[Path], object] = lambda path: None) -> Path:
        path = small_tmpfs("16m", "nothing else makes a read-only file system for root")
        populate(path)
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        return path

    return make
