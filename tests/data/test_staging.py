"""Staging a read-only data root into the cache dir: planted manifests and links never reach outside it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmask_cli.data.load import graphs_fingerprint, load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.data.staging import STAGE_MANIFEST


def _load(cache: Path, shared_data: Path):
    return load_graphs(get_dataset("MUTAG"), data_root=shared_data, cache_dir=cache, offline=True)


@pytest.mark.parametrize("name", ["../../../../x/userlink", "/abs/userlink", "raw/../../userlink", "", ".", "a//b"])
def test_names_that_leave_their_folder_are_not_plain(name):
    from xmask_cli.data.staging import is_plain_relative

    assert not is_plain_relative(name)


def test_plain_relative_names():
    from xmask_cli.data.staging import is_plain_relative

    assert is_plain_relative("raw/MUTAG_A.txt") and is_plain_relative("RELEASE_v1.txt")


def test_a_planted_manifest_deletes_nothing_outside_the_cache_and_staging_starts_afresh(tmp_path, shared_data):
    cache = tmp_path / "cache"
    first = _load(cache, shared_data)
    dst = cache / "_pyg" / "MUTAG"
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "target.txt").write_text("mine")
    (outside / "userlink").symlink_to(outside / "target.txt")
    # A name that climbs from the staging folder (5 levels deep in tmp_path) to tmp_path/x/userlink.
    climb = "/".join([".."] * len(dst.relative_to(tmp_path).parts)) + "/x/userlink"
    assert (dst / climb).resolve() == (outside / "target.txt").resolve()
    planted = {"version": 1, "files": {climb: "0" * 64, "raw/MUTAG_A.txt": "0" * 64}}
    (dst / STAGE_MANIFEST).write_text(json.dumps(planted))
    (dst / "processed" / "marker").write_text("stale")
    again = _load(cache, shared_data)
    from xmask_cli.data.staging import is_plain_relative

    assert (outside / "userlink").is_symlink() and (outside / "target.txt").read_text() == "mine"
    # The invalid manifest was ignored: processed/ rebuilt, the manifest rewritten with plain names only.
    assert not (dst / "processed" / "marker").exists()
    manifest = json.loads((dst / STAGE_MANIFEST).read_text())
    assert all(is_plain_relative(k) for k in manifest["files"]) and climb not in manifest["files"]
    assert graphs_fingerprint(first.edge_index, first.num_nodes) == graphs_fingerprint(again.edge_index, again.num_nodes)


def test_a_symlinked_processed_folder_is_replaced_and_the_linked_folder_left_alone(tmp_path, shared_data):
    cache = tmp_path / "cache"
    first = _load(cache, shared_data)
    dst = cache / "_pyg" / "MUTAG"
    import shutil

    shutil.rmtree(dst / "processed")
    user = tmp_path / "user-folder"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    (dst / "processed").symlink_to(user, target_is_directory=True)
    again = _load(cache, shared_data)
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"]  # PyG wrote nothing there
    assert (dst / "processed").is_dir() and not (dst / "processed").is_symlink()
    assert graphs_fingerprint(first.edge_index, first.num_nodes) == graphs_fingerprint(again.edge_index, again.num_nodes)


def test_a_symlinked_raw_folder_in_the_staging_tree_is_replaced(tmp_path, shared_data):
    cache = tmp_path / "cache"
    _load(cache, shared_data)
    dst = cache / "_pyg" / "MUTAG"
    import shutil

    user = tmp_path / "user-raw"
    shutil.copytree(dst / "raw", user, symlinks=True)
    before = sorted(p.name for p in user.iterdir())
    shutil.rmtree(dst / "raw")
    (dst / "raw").symlink_to(user, target_is_directory=True)
    (dst / STAGE_MANIFEST).unlink()  # a changed manifest: staging relinks every file
    _load(cache, shared_data)
    assert sorted(p.name for p in user.iterdir()) == before
    assert (dst / "raw").is_dir() and not (dst / "raw").is_symlink()


def test_a_symlinked_staging_root_is_exit_2(tmp_path, shared_data):
    from xmask_cli.errors import UsageError

    cache = tmp_path / "cache"
    cache.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / "_pyg").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UsageError, match=f"{cache / '_pyg'} is a symbolic link"):
        _load(cache, shared_data)
    assert list(elsewhere.iterdir()) == []
