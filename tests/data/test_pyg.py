"""The PyG / OGB dataset classes constructed offline-safe: torch.load takes plain tensors and PyG data only (a
planted pickle never runs), no stdin prompt, a rejected processed file is re-made from the raw files once."""
from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import fsspec
import pytest
import torch
from torch_geometric.data import Data

from xmask_cli.data import pyg
from xmask_cli.data.pyg import ProcessedFileRejected, _construct_safely, _no_prompt, safe_torch_load
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import CacheError, DataNotFoundError


class Planted:
    """A pickle that would create a file when loaded by plain unpickling."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_plain_tensors_and_pyg_data_load_and_a_planted_pickle_is_refused(tmp_path):
    data = Data(x=torch.arange(6.0).reshape(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    torch.save({"t": torch.ones(2), "d": data.to_dict()}, tmp_path / "ok.pt")
    marker = tmp_path / "program-ran"
    torch.save(Planted(marker), tmp_path / "data.pt")
    original = torch.load
    with safe_torch_load():
        got = torch.load(tmp_path / "ok.pt", weights_only=False)  # asking for unpickling changes nothing
        assert torch.equal(got["t"], torch.ones(2)) and torch.equal(got["d"]["x"], data.x)
        # As PyG's fs.torch_load calls it: an fsspec file object, then its retry with weights_only=False.
        with pytest.raises(ProcessedFileRejected) as err, fsspec.open(str(tmp_path / "data.pt"), "rb") as f:
            torch.load(f, None, weights_only=False)
    assert not marker.exists() and torch.load is original
    assert err.value.path == str(tmp_path / "data.pt")
    assert str(err.value) == f"refusing to load {tmp_path / 'data.pt'}: it holds objects other than tensors and " \
                             f"PyG data classes"
    assert isinstance(err.value, CacheError) and err.value.exit_code == 4


def test_an_update_prompt_is_an_error_not_a_wait():
    original = builtins.input
    with _no_prompt(get_dataset("MUTAG")):
        with pytest.raises(DataNotFoundError, match=r"MUTAG: the loader asked to re-download \(Update\? \[y/N\]\)"):
            input("Update? [y/N] ")
    assert builtins.input is original


def test_a_planted_processed_file_is_removed_and_the_dataset_processed_again(tmp_path, shared_data):
    root = tmp_path / "pyg"
    shutil.copytree(shared_data / "MUTAG", root / "MUTAG", ignore=shutil.ignore_patterns("processed"))
    spec = get_dataset("MUTAG")
    first = _construct_safely(spec, root, notes := [])
    assert len(first) == 188 and notes == []
    marker = tmp_path / "program-ran"
    (processed,) = [p for p in (root / "MUTAG").rglob("data.pt")]
    torch.save(Planted(marker), processed)
    again = _construct_safely(spec, root, notes)
    assert not marker.exists() and len(again) == 188
    assert torch.equal(again[187].edge_index, first[187].edge_index)
    assert len(notes) == 1 and "processed file rejected" in notes[0] and "re-processed from the raw files" in notes[0]


def test_a_second_rejection_or_one_outside_processed_is_a_cache_error(tmp_path, monkeypatch):
    spec = get_dataset("MUTAG")
    (tmp_path / "MUTAG" / "processed").mkdir(parents=True)
    calls = []

    def always_bad(spec, root):
        calls.append(1)
        (root / "MUTAG" / "processed").mkdir(parents=True, exist_ok=True)
        raise ProcessedFileRejected(str(root / "MUTAG" / "processed" / "data.pt"), ValueError("truncated"))

    monkeypatch.setattr(pyg, "_construct", always_bad)
    notes: list[str] = []
    with pytest.raises(CacheError, match="delete that file"):
        _construct_safely(spec, tmp_path, notes)
    assert len(calls) == 2 and len(notes) == 1  # one re-process, then the error

    def bad_elsewhere(spec, root):
        raise ProcessedFileRejected(str(root / "other" / "x.pt"), ValueError("truncated"))

    monkeypatch.setattr(pyg, "_construct", bad_elsewhere)
    (tmp_path / "other").mkdir()
    with pytest.raises(CacheError, match="refusing to load"):
        _construct_safely(spec, tmp_path, [])
    assert (tmp_path / "other").is_dir()  # nothing outside a processed/ folder is deleted
