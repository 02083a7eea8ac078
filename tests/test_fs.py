"""fs.ensure_writable_dir: creates a missing folder, refuses a file in the way, names the folder and the fix."""
from __future__ import annotations

import pytest

from xmask_cli.errors import NotWritableError
from xmask_cli.fs import ensure_writable_dir


def test_creates_nested_folders_and_refuses_a_file_in_the_way(tmp_path):
    made = ensure_writable_dir(tmp_path / "a" / "b", "output folder", "pass another --out")
    assert made == tmp_path / "a" / "b" and made.is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotWritableError, match=r"^output folder .*/f/sub: .*/f is a file, not a folder; pass another --out$"):
        ensure_writable_dir(tmp_path / "f" / "sub", "output folder", "pass another --out")
    assert not (tmp_path / "f" / "sub").exists()
