"""Reading a finished run back (one tiny MUTAG run): what makes a folder a run, the recomputed metrics against
the recorded ones and against accuracy computed here from the model's outputs, a checkpoint that does not fit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.evaluate import evaluate_run, read_run, rebuild_run, run_precision
from xmask_cli.engine.runs.sweep import train_seeds
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
    with pytest.raises(RunNotFoundError, match=r"best\.pt is not this run's checkpoint: .*model\.hidden = 8, "
                                               r".*config\.json says 16"):
        rebuild_run(run, saved, cache_dir=cache, offline=True)
    best = torch.load(copy / "best.pt", weights_only=True)
    del best["config"]  # a checkpoint of an older xmask: no record, so the weights' shapes are what is checked
    torch.save(best, copy / "best.pt")
    warned: list[str] = []
    with pytest.raises(RunNotFoundError, match=r"best\.pt does not fit the model in .*config\.json"):
        rebuild_run(run, saved, cache_dir=cache, offline=True, log=warned.append)
    assert warned == []  # a refusal is one line: the warning comes only with a model that loads
    shutil.copy(folder / "config.json", copy / "config.json")  # the run's own config: loads, with the warning
    rebuild_run(*read_run(copy), cache_dir=cache, offline=True, log=warned.append)
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "records no config" in warned[0]


@pytest.fixture(scope="module")
def other_run(tmp_path_factory) -> Path:
    """A run of the same shape (its best.pt loads into the first run's model) with other head powers and seed."""
    root = tmp_path_factory.mktemp("other")
    train_seeds(resolve("graph-level", [*TINY, "model.head_powers=[2,1]"]), [1], cache_dir=root / "cache",
                run_root=root / "runs", offline=True)
    (config,) = (root / "runs").rglob("config.json")
    return config.parent


def test_a_best_checkpoint_copied_from_another_run_is_refused_everywhere(trained, other_run, tmp_path):
    """best.pt records the config it was trained with; eval, load_run (and explain, through rebuild_run) refuse
    one whose record is not the run's config.json: exit 6, one line naming the setting and both values, and the
    folder is left as it was."""
    from tests.cli_helpers import one_error_line, run
    from xmask_cli import load_run

    folder, cache = trained
    recorded = json.loads(torch.load(folder / "best.pt", weights_only=True)["config"])
    saved = json.loads((folder / "config.json").read_text())
    saved.pop("environment")  # the session's software record lives in config.json only
    assert recorded == saved  # the record is the run's config
    copy = shutil.copytree(folder, tmp_path / "swapped")
    shutil.copy(other_run / "best.pt", copy / "best.pt")
    r = run("eval", str(copy), "--cache-dir", str(cache), "--device", "cpu")
    line = one_error_line(r)
    assert r.exit_code == RunNotFoundError.exit_code == 6
    assert f"{copy / 'best.pt'} is not this run's checkpoint" in line
    assert "model.head_powers = [2, 1]" in line and "says [1, 2]" in line and str(copy / "config.json") in line
    with pytest.raises(RunNotFoundError, match="head_powers"):
        load_run(copy, cache_dir=cache, offline=True)
    before = sorted(p.name for p in copy.iterdir())
    r = run("explain", str(copy), "--graph", "0", "--cache-dir", str(cache), "--device", "cpu", "--out",
            str(tmp_path / "maps"))
    assert r.exit_code == 6 and "head_powers" in one_error_line(r)
    assert sorted(p.name for p in copy.iterdir()) == before
    shutil.copy(folder / "best.pt", copy / "best.pt")  # its own checkpoint back: evaluates again
    assert run("eval", str(copy), "--cache-dir", str(cache), "--device", "cpu").exit_code == 0


def test_run_precision_is_the_saved_one_fp32_for_older_runs():
    assert run_precision({"train": {"precision": "bf16"}}) == "bf16"
    assert run_precision({"train": {}}) == "fp32"


def test_the_config_digest_leaves_the_software_record_out():
    """Two runs of one config on two machines share ``config_sha256``; another setting changes it."""
    import hashlib
    import json

    from xmask_cli.engine.runs.evaluate import _config_digest

    saved = {"config": {"model": {"hidden": 16}}, "model": {"hidden": 16}, "train": {"seed": 0}}
    here = {**saved, "environment": {"versions": {"torch": "2.13.0"}, "threads": {"torch": 2}}}
    there = {**saved, "environment": {"versions": {"torch": "2.4.1"}, "threads": {"torch": 64}}}
    want = hashlib.sha256(json.dumps(saved, sort_keys=True).encode()).hexdigest()[:16]
    assert _config_digest(here) == _config_digest(there) == _config_digest(saved) == want
    assert _config_digest({**here, "train": {"seed": 1}}) != want
