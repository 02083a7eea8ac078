"""Reading a user's files: regular files only, CSV line numbers as the file counts them."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.tables import file_digest, open_regular, read_csv_columns
from xmask_cli.errors import DataNotFoundError, UsageError


def test_csv_columns_and_line_numbers(tmp_path: Path) -> None:
    p = tmp_path / "e.csv"
    # A BOM, a comment above the header, blank and comment lines between rows: line numbers are the file's.
    p.write_text("\ufeff# made by hand\nsrc,dst,weight\n0,1,0.5\n\n# note\n2,3,1e1\n4,5,nan\n", encoding="utf-8")
    with pytest.raises(UsageError, match=rf"^{p}:7: weight is not finite"):
        read_csv_columns(p, ["src", "dst", "weight"], ["id", "id", "float"])
    p.write_text("\ufeff# made by hand\nsrc,dst,weight\n0,1,0.5\n\n# note\n2,3,1e1\n", encoding="utf-8")
    (src, dst, w), rows = read_csv_columns(p, ["SRC", "dst", "weight"], ["id", "id", "float"])
    assert src.tolist() == [0, 2] and dst.tolist() == [1, 3] and w.tolist() == [0.5, 10.0]
    assert src.dtype == np.int64 and rows.at(1) == f"{p}:6"


@pytest.mark.parametrize("body, why", [("0,1\n1\n", ":3: expected 2 values"), ("0,1\n1,2,3\n", ":3: expected 2 values"),
                                       ("0,1\n1,2.5\n", ":3: dst '2.5' is not an integer"),
                                       # numpy refuses a line of spaces or an indented comment: the line is named
                                       ("0,1\n   \n1,2\n", ":3: expected 2 values"),
                                       ("0,1\n  # note\n1,2\n", ":3: expected 2 values"),
                                       ("0,1\n99999999999999999999,2\n", ":3: src 99999999999999999999 does not fit")])
def test_csv_rows_that_do_not_fit(tmp_path: Path, body: str, why: str) -> None:
    p = tmp_path / "e.csv"
    p.write_text("src,dst\n" + body)
    with pytest.raises(UsageError, match=f"^{p}{why}"):
        read_csv_columns(p, ["src", "dst"], ["id"])


def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    real = tmp_path / "real.npy"
    np.save(real, np.arange(3))
    (tmp_path / "link.npy").symlink_to(real)
    with pytest.raises(UsageError, match="a symbolic link"):
        open_regular(tmp_path / "link.npy")
    with pytest.raises(UsageError, match="a symbolic link"):
        file_digest(tmp_path / "link.npy")
    os.mkfifo(tmp_path / "fifo.npy")
    with pytest.raises(UsageError, match="not a regular file"):
        open_regular(tmp_path / "fifo.npy")
    with pytest.raises(DataNotFoundError):
        open_regular(tmp_path / "absent.npy")
    import hashlib

    assert file_digest(real) == hashlib.sha256(real.read_bytes()).hexdigest()


def test_sockets_and_devices_are_named_never_read(tmp_path: Path) -> None:
    """Each kind of special file is refused by what it is, by the stat check and by the non-blocking open."""
    import socket

    from xmask_cli.data.tables import check_regular

    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.npy"))
        for special, what in ((tmp_path / "s.npy", "a socket"), (Path("/dev/null"), "a character device"),
                              (tmp_path, "a folder")):
            expected = rf"^{special}: {what}, not a regular file"
            with pytest.raises(UsageError, match=expected):
                check_regular(special)
            with pytest.raises(UsageError, match=expected):
                open_regular(special, follow_links=True)
    finally:
        sock.close()
    with pytest.raises(DataNotFoundError):
        check_regular(tmp_path / "absent")
