"""fs.ensure_writable_dir: creates a missing folder, refuses a file in the way, names the folder and the fix."""
from __future__ import annotations

import pytest

from xmask_cli.errors import NotWritableError, UsageError
from xmask_cli.fs import check_writable, ensure_writable_dir, refuse_links


def test_creates_nested_folders_and_refuses_a_file_in_the_way(tmp_path):
    made = ensure_writable_dir(tmp_path / "a" / "b", "output folder", "pass another --out")
    assert made == tmp_path / "a" / "b" and made.is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotWritableError, match=r"^output folder .*/f/sub: .*/f is a file, not a folder; pass another --out$"):
        ensure_writable_dir(tmp_path / "f" / "sub", "output folder", "pass another --out")
    assert not (tmp_path / "f" / "sub").exists()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_gives_the_mode_a_plain_open_would(tmp_path, umask):
    """The temp file behind an atomic write is created 0600; the file it becomes follows the umask like open()."""
    import os
    import stat

    from xmask_cli.fs import atomic_write

    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.json", lambda f: f.write(b"{}"))
        with open(tmp_path / "b.json", "wb") as f:
            f.write(b"{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "a.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o666 & ~umask
    assert (tmp_path / "a.json").read_bytes() == b"{}"


def test_sha256_of_streams_a_file_larger_than_its_block(tmp_path):
    import hashlib
    import os

    from xmask_cli.fs import sha256_of

    data = os.urandom((1 << 20) * 2 + 123)  # two whole 1 MiB blocks and a tail
    (tmp_path / "f").write_bytes(data)
    with open(tmp_path / "f", "rb") as fh:
        assert sha256_of(fh) == hashlib.sha256(data).hexdigest()


def test_check_writable_refuses_a_file_and_a_read_only_mount_and_creates_nothing(tmp_path, read_only_tmpfs):
    (tmp_path / "f").write_text("x")
    for path in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(NotWritableError, match="is a file, not a folder; hint"):
            check_writable(path, "runs folder", "hint")
    check_writable(tmp_path / "new" / "deeper", "runs folder", "hint")  # missing folders are fine: made later
    assert not (tmp_path / "new").exists()
    ro = read_only_tmpfs(lambda p: (p / "runs").mkdir())
    for path in (ro, ro / "runs", ro / "runs" / "new"):
        with pytest.raises(NotWritableError, match=r"is on a read-only file system.*; hint") as info:
            check_writable(path, "runs folder", "hint")
        assert info.value.exit_code == 5 and str(path) in str(info.value)


def test_refuse_links_refuses_a_folder_or_fifo_under_a_file_s_name(tmp_path):
    import os

    (tmp_path / "summary.json").mkdir()
    os.mkfifo(tmp_path / "best.pt")
    (tmp_path / "config.json").write_text("{}")
    refuse_links(tmp_path, ["config.json", "missing.json"])  # a plain file, and nothing, pass
    for name, kind in (("summary.json", "a folder"), ("best.pt", "a FIFO")):
        with pytest.raises(UsageError, match=f"{name} is {kind}, not a file"):
            refuse_links(tmp_path, ["config.json", name])
