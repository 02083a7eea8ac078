"""``xmask export`` through the CLI on tiny MUTAG runs: the program written and its JSON, and every refusal as
one ``error:`` line with exit 2 (6 for a folder that is not a run)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import one_error_line, run
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.sweep import train_seeds

TINY = ["data.dataset=MUTAG", "model.hidden=8", "model.heads=2", "model.head_powers=[1,2]", "structure.powers.k=2",
        "model.layers=1", "train.epochs=1", "train.warmup_epochs=0"]


def _train(root: Path, preset: str) -> tuple[Path, Path]:
    train_seeds(resolve(preset, TINY), [0], cache_dir=root / "cache", run_root=root / "runs", offline=True)
    (config,) = (root / "runs").rglob("config.json")
    return config.parent, root / "cache"


@pytest.fixture(scope="module")
def mutag(tmp_path_factory) -> tuple[Path, Path]:
    return _train(tmp_path_factory.mktemp("mutag"), "graph-level")


@pytest.fixture(scope="module")
def mutag_spd(tmp_path_factory) -> tuple[Path, Path]:
    return _train(tmp_path_factory.mktemp("spd"), "bias-spd")


def test_export_writes_the_program_beside_the_run_and_prints_it_as_json(mutag):
    folder, cache = mutag
    result = run("--format", "json", "export", str(folder), "--cache-dir", str(cache))
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["out"] == str(folder / "model.pt2") and printed["path"] == "dense" and printed["to"] == "torch"
    assert printed["size_bytes"] == (folder / "model.pt2").stat().st_size
    assert printed["max_abs_diff"] <= 1e-5 and printed["checked"] > 0
    x, powers, mask = torch.zeros(3, 5, printed["inputs"]["x"][2]), torch.zeros(3, 2, 5, 5), torch.ones(3, 5, dtype=torch.bool)
    assert torch.export.load(folder / "model.pt2").module()(x, powers, mask).shape == (3, 2)


def test_the_human_output_names_the_file_the_dynamic_sizes_and_the_check(mutag, tmp_path):
    folder, cache = mutag
    result = run("export", str(folder), "--cache-dir", str(cache), "--out", str(tmp_path / "m.pt2"))
    assert result.exit_code == 0, result.stderr
    assert "torch.export program" in result.stdout and "B graphs, N nodes any size" in result.stdout
    assert "[B, 2, N, N]" in result.stdout and "test items" in result.stdout


@pytest.mark.parametrize("args, needle", [
    (["--path", "pairs"], "graph-level runs export the dense path"),
    (["--path", "sideways"], "--path must be auto, dense or pairs"),
    (["--to", "tflite"], "--to must be torch or onnx"),
])
def test_options_that_have_no_program_are_refused(mutag, tmp_path, args, needle):
    folder, cache = mutag
    result = run("export", str(folder), "--cache-dir", str(cache), "--out", str(tmp_path / "m.pt2"), *args)
    assert result.exit_code == 2 and needle in one_error_line(result)
    assert not (tmp_path / "m.pt2").exists()


def test_a_model_with_learned_biases_is_refused_naming_why_and_what_exports(mutag_spd, tmp_path):
    folder, cache = mutag_spd
    result = run("export", str(folder), "--cache-dir", str(cache), "--out", str(tmp_path / "m.pt2"))
    line = one_error_line(result)
    assert result.exit_code == 2 and "learned biases (spd)" in line and "model.biases is empty" in line


def test_onnx_without_its_packages_is_refused_naming_the_extra(mutag, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed: `import onnx` raises ImportError
    folder, cache = mutag
    result = run("export", str(folder), "--cache-dir", str(cache), "--to", "onnx", "--out", str(tmp_path / "m.onnx"))
    line = one_error_line(result)
    assert result.exit_code == 2 and "[onnx]" in line and "pip install" in line and "--to torch" in line


def test_a_folder_or_a_link_at_the_output_name_is_refused(mutag, tmp_path):
    folder, cache = mutag
    (tmp_path / "dir.pt2").mkdir()
    target = tmp_path / "victim"
    target.write_text("keep me")
    (tmp_path / "link.pt2").symlink_to(target)
    for name, needle in (("dir.pt2", "is a folder"), ("link.pt2", "is a symbolic link")):
        result = run("export", str(folder), "--cache-dir", str(cache), "--out", str(tmp_path / name))
        assert result.exit_code == 2 and needle in one_error_line(result)
    assert target.read_text() == "keep me" and (tmp_path / "link.pt2").is_symlink()


def test_a_folder_that_is_not_a_run_exits_6(tmp_path):
    result = run("export", str(tmp_path), "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 6 and "not a run directory" in one_error_line(result)
