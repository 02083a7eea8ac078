"""The recorded dataset folder of a cache file is checked before it is read (a file the user controls)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.cache.inputs import BadRecord, _first_link, recorded_folder


@pytest.mark.parametrize("value", ["/data/mygraph", "/", "/a b/ü"])
def test_clean_absolute_paths_are_accepted(value: str) -> None:
    assert recorded_folder(value) == value


@pytest.mark.parametrize("value", ["", "mygraph", "./g", "../g", "/a/../g", "/a/./g", "/a//g", "/a/g/", "/a\0b",
                                   7, None, b"/a", np.asarray(["/a"])])
def test_anything_else_is_a_bad_record(value: object) -> None:
    with pytest.raises(BadRecord):
        recorded_folder(value)


def test_first_link_finds_a_link_anywhere_on_the_path(tmp_path: Path) -> None:
    real = tmp_path / "real" / "g"
    real.mkdir(parents=True)
    assert _first_link(str(real)) is None
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert _first_link(str(tmp_path / "alias" / "g")) == str(tmp_path / "alias")
    (tmp_path / "direct").symlink_to(real, target_is_directory=True)
    assert _first_link(str(tmp_path / "direct")) == str(tmp_path / "direct")
    assert os.path.realpath(tmp_path / "alias" / "g") == str(real)  # what a link-free record looks like
