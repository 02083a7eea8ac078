"""Reading a finished run back (one tiny MUTAG run): what makes a folder a run, the recomputed metrics against
the recorded ones and against accuracy computed here from the model's outputs, a checkpoint that does not fit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.evaluate import evaluate_run, read_run, rebuild_run, run_precision
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.errors import RunNotFoundError

TINY = ["data.dataset=MUTAG", "model.hidden=8", "model.heads=2", "model.head_powers=[1,2]", "structure.powers.k=2",
        "model.layers=1", "train.epochs=2", "train.warmup_epochs=1", "train.lr=1e-2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("eval")
    train_seeds(resolve("graph-level", TINY), [0], cache_dir=root / "cache", run_root=root / "runs", offline=True)
    (config,) = (root / "runs").rglob("config.json")
    return config.parent, root / "cache"


def test_eval_recomputes_the_recorded_metrics_and_the_accuracy_of_the_outputs(trained):
    folder, cache = trained
    got = evaluate_run(folder, parts=("val", "test"), cache_dir=cache, offline=True)
    summary = json.loads((folder / "summary.json").read_text())
    assert got["metrics"] == got["recorded"] == {p: summary["metrics"][p] for p in ("val", "test")}
    assert (got["dataset"], got["level"], got["seed"], got["run_dir"]) == ("MUTAG", "graph", 0, str(folder))
    run, saved = read_run(folder)
    _, task, model = rebuild_run(run, saved, cache_dir=cache, offline=True)
    assert not model.training
    with torch.no_grad():
        logits, labels = task.outputs(model, "test")
    accuracy = float((logits.argmax(-1) == labels).double().mean())
    assert got["metric"] == "accuracy" and got["metrics"]["test"] == pytest.approx(accuracy, abs=1e-12)
    assert logits.shape == (len(labels), 2) and len(labels) == task.split_sizes()["test"] > 0


def test_a_folder_is_a_run_only_with_its_config_and_best_checkpoint(trained, tmp_path):
    folder, _ = trained
    with pytest.raises(RunNotFoundError, match="not a run directory"):
        read_run(tmp_path / "nowhere")
    no_best = shutil.copytree(folder, tmp_path / "no-best")
    (no_best / "best.pt").unlink()
    with pytest.raises(RunNotFoundError, match="needs config.json and best.pt"):
        read_run(no_best)
    for name, edit, needle in (("no-preset", lambda c: c.pop("config"), "no resolved preset"),
                               ("no-seed", lambda c: c["train"].update(seed="0"), "is damaged")):
        copy = shutil.copytree(folder, tmp_path / name)
        saved = json.loads((copy / "config.json").read_text())
        edit(saved)
        (copy / "config.json").write_text(json.dumps(saved))
        with pytest.raises(RunNotFoundError, match=needle):
            read_run(copy)


def test_a_checkpoint_of_another_model_is_refused_naming_both_files(trained, tmp_path):
    folder, cache = trained
    copy = shutil.copytree(folder, tmp_path / "other")
    saved = json.loads((copy / "config.json").read_text())
    saved["model"]["hidden"] = 16  # best.pt holds hidden 8 weights
    (copy / "config.json").write_text(json.dumps(saved))
    run, saved = read_run(copy)
    with pytest.raises(RunNotFoundError, match=r"best\.pt does not fit the model in .*config\.json"):
        rebuild_run(run, saved, cache_dir=cache, offline=True)


def test_run_precision_is_the_saved_one_fp32_for_older_runs():
    assert run_precision({"train": {"precision": "bf16"}}) == "bf16"
    assert run_precision({"train": {}}) == "fp32"


def test_the_config_digest_leaves_the_software_record_out():
    """Two runs of one config on two machines share ``config_sha256``; another setting changes it."""
    import hashlib
    import json

    from xmask_cli.engine.evaluate import _config_digest

    saved = {"config": {"model": {"hidden": 16}}, "model": {"hidden": 16}, "train": {"seed": 0}}
    here = {**saved, "environment": {"versions": {"torch": "2.13.0"}, "threads": {"torch": 2}}}
    there = {**saved, "environment": {"versions": {"torch": "2.4.1"}, "threads": {"torch": 64}}}
    want = hashlib.sha256(json.dumps(saved, sort_keys=True).encode()).hexdigest()[:16]
    assert _config_digest(here) == _config_digest(there) == _config_digest(saved) == want
    assert _config_digest({**here, "train": {"seed": 1}}) != want
