"""Compiled kernels are cached in the user's cache folder, never inside the package (a read-only install works)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _read_only(tree: Path) -> None:
    for folder, _dirs, files in os.walk(tree):
        for name in files:
            p = Path(folder) / name
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        Path(folder).chmod(Path(folder).stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def test_prepare_from_a_read_only_package_caches_kernels_under_the_user_cache(tmp_path):
    install = tmp_path / "site"
    shutil.copytree(REPO / "xmask_cli", install / "xmask_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    shutil.copytree(REPO / "presets", install / "presets")
    _read_only(install)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH")}
    env.update(HOME=str(home), PYTHONPATH=str(install), PYTHONDONTWRITEBYTECODE="1", XMASK_OFFLINE="1",
               OMP_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-m", "xmask_cli", "prepare", "mutag",
                            "--cache-dir", str(tmp_path / "cache")], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        in_package = [p for p in install.rglob("*") if p.suffix in (".nbi", ".nbc")]
        assert in_package == []
        cached = [p for p in (home / ".cache" / "xmask" / "numba").rglob("*.nbi")]
        assert cached, "no compiled kernel was cached under ~/.cache/xmask/numba"
    finally:
        for folder, _, _ in os.walk(install):  # let pytest clean up
            Path(folder).chmod(0o755)


def test_without_a_home_the_cache_is_a_private_temp_folder(tmp_path, monkeypatch):
    """numba loads pickled code from its cache: with no home folder the fallback under the temp dir is used
    only when it is this user's and nobody else can write it; a folder planted there first is passed over."""
    import tempfile

    from xmask_cli.structure import jit

    def no_home():
        raise RuntimeError("no home")

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    own = tmp_path / f"xmask-{os.getuid()}"
    assert jit.numba_cache_dir() == own / "xmask" / "numba"
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    own.chmod(0o777)  # as if someone else had made it writable for all
    other = jit.numba_cache_dir()
    assert other.parents[1] != own and other.parents[1].parent == tmp_path
    assert stat.S_IMODE(other.parents[1].stat().st_mode) == 0o700
