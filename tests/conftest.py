"""Shared fixtures: the read-only benchmark datasets, an offline environment, a temp cache."""
from __future__ import annotations

import os
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
