"""The Python API: the documented examples run, equal the CLI's numbers, and stay cheap to import.

The examples are read from docs/python-api.md (and the README's "Use from Python" block must be the
first of them), so what a reader copies is what runs here.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import xmask_cli
from tests.cli_helpers import run
from xmask_cli.engine.metrics import METRICS
from xmask_cli.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: The CLI call the first example stands for (docs/python-api.md says so in words).
CLI_ARGS = ["--preset", "graph-level", "--seeds", "0-1", "--name", "mutag-api", "--set", "model.hidden=16", "--set", "model.layers=1",
            "--set", "train.epochs=5"]


def _examples() -> list[str]:
    return BLOCK.findall((ROOT / "docs" / "python-api.md").read_text())


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> dict:
    """The first example run in a fresh folder (its runs in ./runs, its cache in ./cache), and its namespace."""
    import os

    folder = tmp_path_factory.mktemp("example")
    here = os.getcwd()
    os.chdir(folder)
    try:
        namespace: dict = {"__name__": "example"}
        exec(compile(_examples()[0], "docs/python-api.md", "exec"), namespace)
    finally:
        os.chdir(here)
    namespace["folder"] = folder
    return namespace


def test_the_readme_example_is_the_documented_one():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use from Python"):]
    assert BLOCK.findall(section)[0] == _examples()[0]


def test_the_example_equals_the_clis_numbers(example, tmp_path):
    folder = example["folder"]
    r = run("--format", "json", "train", *CLI_ARGS, "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(folder / "cache"))
    assert r.exit_code == 0, r.stderr
    cli, api = json.loads(r.stdout), example["result"].to_json()
    assert [x["metrics"] for x in api["runs"]] == [x["metrics"] for x in cli["runs"]]  # exactly, every part
    assert [x["best_epoch"] for x in api["runs"]] == [x["best_epoch"] for x in cli["runs"]]
    assert api["aggregate"] == cli["aggregate"]
    assert {k: v for k, v in api.items() if k not in ("runs", "run_root")} == \
        {k: v for k, v in cli.items() if k not in ("runs", "run_root")}


def test_load_run_predicts_what_xmask_eval_prints(example):
    folder, loaded = example["folder"], example["run"]
    run_dir = example["result"].runs[0].run_dir
    r = run("--format", "json", "eval", str(folder / run_dir), "--split", "all", "--device", "cpu",
            "--cache-dir", str(folder / "cache"))
    assert r.exit_code == 0, r.stderr
    ev = json.loads(r.stdout)
    assert loaded.level == "graph" and loaded.metric == "accuracy" and loaded.seed == 0
    assert loaded.config.model.hidden == 16 and loaded.config.train.epochs == 5
    for part in ("train", "val", "test"):
        outputs, targets = loaded.predict(part)
        assert outputs.shape == (targets.numel(), 2)
        assert METRICS["accuracy"](outputs, targets) == ev["metrics"][part] == loaded.score(part)
    evaluated = loaded.evaluate(("train", "val", "test"))
    assert evaluated.metrics == ev["metrics"] and evaluated.config_sha256 == ev["config_sha256"]
    assert evaluated["metrics"] == ev["metrics"]  # dict access: compatibility
    with pytest.raises(UsageError, match="^part: expected one of 'train', 'val', 'test'; got 'all'"):
        loaded.predict("all")
    # The test graphs are the split's test graphs, in its order: their labels are the dataset's.
    split = json.loads((folder / run_dir / "config.json").read_text())["split"]
    assert example["labels"].tolist() == [int(loaded._exp.graphs.dataset[i].y) for i in split["test"]]


def test_the_model_example_runs():
    namespace: dict = {"__name__": "example"}
    exec(compile(_examples()[1], "docs/python-api.md", "exec"), namespace)
    out = namespace["GraphClassifier"](in_dim=7, classes=2)(namespace["batch"])
    assert out.shape == (3, 2) and torch.isfinite(out).all()


def test_the_block_recipe_rebuilds_the_runs_block(example, capsys):
    from torch_geometric.utils import to_dense_adj

    from xmask_cli.model.logsmask import DenseStructure

    run = example["run"]
    recipe = next(e for e in _examples() if "from_run" in e)
    namespace: dict = {"__name__": "example", "run": run}
    exec(compile(recipe, "docs/python-api.md", "exec"), namespace)
    assert capsys.readouterr().out.strip() == recipe.rsplit("# ", 1)[1].strip()  # the comment is the output
    graph, h, out = namespace["graph"], namespace["h"], namespace["out"]
    # The run's own block, on the dense path, with the run's log mask.
    powers = to_dense_adj(graph.logsmask_index, edge_attr=graph.logsmask_values, max_num_nodes=4).permute(0, 3, 1, 2)
    mask = torch.ones(1, 4, dtype=torch.bool)
    with torch.no_grad():
        want = run.model.blocks[0](h[None], run.model.bias(DenseStructure(powers=powers, mask=mask)), mask)[0]
    torch.testing.assert_close(out.detach(), want, rtol=1e-5, atol=1e-6)


def test_override_forms_resolve_alike_and_errors_are_the_clis(tmp_path):
    from xmask_cli.api import _overrides
    from xmask_cli.config_resolve import resolve

    forms = [_overrides(["model.heads=2", "run.name=007"], {}),
             _overrides({"model.heads": 2, "run.name": "007"}, {}),
             _overrides(None, {"model__heads": 2, "run__name": "007"})]
    configs = [resolve("graph-level", steps) for steps in forms]
    assert configs[1] == configs[2] and configs[1].model.heads == 2
    # A Python string stays a string (the --set text 007 is YAML's 7); nothing else differs.
    assert configs[1].run.name == "007" and configs[0].run.name == "7"
    with pytest.raises(ConfigError, match="unknown key 'model.hiden'") as bad:
        xmask_cli.train("graph-level", model__hiden=16, cache_dir=tmp_path, runs_dir=tmp_path)
    assert bad.value.exit_code == 2  # what `xmask train --set model.hiden=16` exits with
    with pytest.raises(UsageError, match="range 4-2 is empty"):
        xmask_cli.train("graph-level", seeds="4-2", cache_dir=tmp_path, runs_dir=tmp_path)


def test_python_values_pass_through_unparsed(monkeypatch):
    from xmask_cli import config_resolve
    from xmask_cli.api import _overrides, _resolve_config

    def no_text(text):
        raise AssertionError(f"a Python value was written as --set text and parsed back: {text}")

    monkeypatch.setattr(config_resolve, "parse_override", no_text)
    biases = [{"type": "spd", "max_distance": 3}]
    cfg, _ = _resolve_config("graph-level", None, "a=b: c", _overrides(
        {"model.biases": biases, "structure.spd.enabled": True, "train.lr": np.float32(0.5)},
        {"model__head_powers": (1, 2, 3, 4), "model__hidden": np.int64(16), "edge__file": Path("x.csv")}))
    assert cfg.run.name == "a=b: c" and cfg.model.hidden == 16 and cfg.model.head_powers == [1, 2, 3, 4]
    assert [b.type for b in cfg.model.biases] == ["spd"] and cfg.model.biases[0].max_distance == 3
    assert cfg.train.lr == 0.5 and cfg.edge.file == "x.csv" and cfg.structure.spd.enabled is True
    biases[0]["type"] = "rrwp"  # the caller's list is not the config's
    assert cfg.model.biases[0].type == "spd"


@pytest.mark.parametrize("key, value, text", [
    ("model.hidden", "wide", "model.hidden=wide"),
    ("model.hiden", 16, "model.hiden=16"),
    ("train.epochs", 2.5, "train.epochs=2.5"),
    ("model.heads", True, "model.heads=true"),
    ("train.lr", float("nan"), "train.lr=.nan"),
    ("model.norm", "mid", "model.norm=mid"),
])
def test_a_python_value_fails_as_its_set_text_does(key, value, text):
    from xmask_cli.config_resolve import resolve

    with pytest.raises(ConfigError) as as_text:
        resolve("graph-level", [text])
    with pytest.raises(ConfigError) as as_value:
        resolve("graph-level", [(key, value)])
    assert str(as_value.value).split(", got")[0] == str(as_text.value).split(", got")[0]
    assert as_value.value.exit_code == as_text.value.exit_code == 2


def test_text_and_values_apply_in_order():
    from xmask_cli.config_resolve import resolve

    assert resolve("graph-level", ["model.hidden=16", ("model.hidden", 32)]).model.hidden == 32
    assert resolve("graph-level", [("model.hidden", 32), "model.hidden=16"]).model.hidden == 16


def test_import_is_cheap_and_all_names_resolve():
    code = ("import sys, xmask_cli; heavy = [m for m in ('torch', 'torch_geometric', 'h5py') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    for name in xmask_cli.__all__:
        assert getattr(xmask_cli, name) is not None, name
    assert xmask_cli.AddLogSMask is xmask_cli.transforms.AddLogSMask
    with pytest.raises(AttributeError):
        xmask_cli.no_such_name  # noqa: B018


@pytest.mark.parametrize("folder", [False, True])
def test_one_train_looks_its_dataset_up_once_and_checks_its_run_rules_once(tmp_path, monkeypatch, folder):
    """The plan is made once and handed down: ``--dataset`` (picking the preset), the level, metric, run name,
    folder reference, the loader and the run-stage rules all read the one lookup."""
    from tests.data.test_folder import write_folder
    from tests.engine.test_plan import count_lookups
    from xmask_cli.engine import plan

    dataset = str(write_folder(tmp_path / "g")) if folder else "mutag"
    real, levels = plan.check_rules, []
    monkeypatch.setattr(plan, "check_rules", lambda cfg, level=None, **kw: levels.append(level) or real(cfg, level, **kw))
    lookups = count_lookups(monkeypatch)
    result = xmask_cli.train(dataset=dataset, seeds="0-1", cache_dir=tmp_path / "cache", runs_dir=tmp_path / "runs",
                             train__epochs=1, train__warmup_epochs=0, model__hidden=8, model__layers=1)
    assert lookups == [dataset]
    assert levels == [result.level] == ["node" if folder else "graph"]
    assert [r.seed for r in result.runs] == [0, 1] and result.name == ("g-node" if folder else "mutag-graph")


def test_a_seed_list_is_checked_as_a_list_never_written_as_text(tmp_path, monkeypatch):
    from xmask_cli.engine import plan

    monkeypatch.setattr(plan, "parse_seeds", lambda text: pytest.fail(f"seeds went through text: {text!r}"))
    planned = xmask_cli.dry_run("graph-level", seeds=[3, 1], runs_dir=tmp_path / "runs", cache_dir=tmp_path / "c")
    assert [(r.seed, Path(r.path).name) for r in planned.runs] == [(3, "3"), (1, "1")]
    with pytest.raises(UsageError, match=r"^seeds: '1,1': a seed appears twice"):
        xmask_cli.train("graph-level", seeds=[1, 1], cache_dir=tmp_path, runs_dir=tmp_path)
    with pytest.raises(UsageError, match=r"^seeds: '4294967296': seeds must lie in 0..4294967295"):
        xmask_cli.train("graph-level", seeds=[2**32], cache_dir=tmp_path, runs_dir=tmp_path)
