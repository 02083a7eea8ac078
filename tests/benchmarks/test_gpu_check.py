"""benchmarks/gpu_check.py: refuses clearly without CUDA; its CPU half runs.

The GPU half cannot run here (no GPU); these check the exit code without one
and that the CPU half trains Cora through the engine and reports its figures.
"""
from __future__ import annotations

import json

import pytest
import torch

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def gpu_check():
    return load_script("gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the no-CUDA exit is not reachable")
def test_without_cuda_exits_3_with_a_clear_message(gpu_check, tmp_path, capsys) -> None:
    code = gpu_check.main(["--out", str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "c")])
    assert code == gpu_check.EXIT_NO_CUDA == 3
    err = capsys.readouterr().err
    assert "error: no CUDA device" in err and "--cpu-only" in err
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3


def test_cpu_half_trains_cora_and_reports(gpu_check, tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    code = gpu_check.main(["--cpu-only", "--datasets", "cora", "--epochs", "1", "--skip-backends", "--out", str(out),
                           "--cache-dir", str(tmp_path / "c"), "--format", "json"])
    report = json.loads(out.read_text())
    assert code == 0, report["errors"]
    assert json.loads(capsys.readouterr().out) == report
    (run,) = report["training"]
    assert run["device"] == "cpu" and run["epochs"] == 1 and 0.0 <= run["input_stall"] <= 1.0
    assert 0.0 <= run["val"] <= 1.0 and run["epoch_s"] > 0


def test_unknown_dataset_is_one_error_line(gpu_check, tmp_path, capsys) -> None:
    assert gpu_check.main(["--cpu-only", "--datasets", "mnist", "--out", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: unknown dataset 'mnist' for --datasets; choose among cora, proteins"]


def test_flex_forward_matches_sdpa_on_cora_on_cpu(gpu_check, tmp_path) -> None:
    """FlexAttention with the X-LogSMask term as score_mod = SDPA with it as a float mask (forward; no CPU backward)."""
    from xmask_cli.engine.runs.experiment import Experiment

    cfg = gpu_check._config("cora", ["node.attention=dense"])
    exp = Experiment.load(cfg, cache_dir=tmp_path / "c", data_root=gpu_check.DEFAULT_DATA_ROOT, offline=True)
    r = gpu_check.flex_check(exp, "cpu", 1, 1e-3)
    assert r["backward"] is False and r["grad_rel"] is None
    assert r["pass"] and r["out_rel"] < 1e-5, r
