"""engine.runs.compare (`xmask runs compare`): runs made with different versions (their config.json ``environment``)
are flagged, package by package, naming the runs; runs that agree, or recorded nothing, are not."""
from __future__ import annotations

import json

import pytest
import torch

from tests.cli_helpers import run
from tests.engine.training.test_loop import ToyTask
from xmask_cli.engine.runs.compare import compare_runs
from xmask_cli.engine.training.loop import TrainConfig, fit


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmpv")
    for name in ("same", "other", "old"):
        torch.manual_seed(0)
        fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=2, lr=0.05, warmup_epochs=0, seed=0),
            root / name / "0", model_config={"toy": 1})
    # "other" was made on another torch and numpy; "old" before runs recorded their software.
    path = root / "other" / "0" / "config.json"
    config = json.loads(path.read_text())
    config["environment"]["versions"].update(torch="2.4.0", numpy="1.26.0")
    path.write_text(json.dumps(config))
    path = root / "old" / "0" / "config.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "environment"}))
    return root


def test_runs_made_with_other_versions_are_flagged(runs):
    here = json.loads((runs / "same" / "0" / "config.json").read_text())["environment"]["versions"]
    result = compare_runs([runs / "same", runs / "other", runs / "old"], None)
    same, other = str(runs / "same" / "0"), str(runs / "other" / "0")
    assert result.version_differences == {"numpy": {here["numpy"]: [same], "1.26.0": [other]},
                                          "torch": {here["torch"]: [same], "2.4.0": [other]}}
    assert compare_runs([runs / "same", runs / "old"], None).version_differences == {}
    r = run("runs", "compare", str(runs / "same"), str(runs / "other"), "--format", "json", "--no-plot")
    assert r.exit_code == 0 and json.loads(r.stdout)["version_differences"] == result.to_json()["version_differences"]
    human = run("runs", "compare", str(runs / "same"), str(runs / "other"), "--no-plot", terminal_width=400)
    assert f"note: these runs were made with different torch versions ({here['torch']}: {same}; 2.4.0: {other})" \
        in human.stdout
