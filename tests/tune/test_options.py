"""``--timeout`` durations and the study's name and folder."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.tune.conftest import TINY
from xmask_cli import config_resolve as R
from xmask_cli.errors import UsageError
from xmask_cli.tune.options import TuneOptions, parse_duration, study_dir


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                           ("0.5h", 1800)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "2d", "0", "h"])
def test_parse_duration_refuses(text):
    with pytest.raises(UsageError, match="--timeout"):
        parse_duration(text)


def test_study_dir_defaults_to_dataset_and_level_and_refuses_paths(tmp_path):
    cfg = R.resolve("mutag", TINY)
    assert study_dir(cfg, TuneOptions(trials=1, runs_dir=tmp_path)) == ("mutag-graph-tune", tmp_path / "mutag-graph-tune")
    assert study_dir(cfg, TuneOptions(trials=1, study="s")) == ("s", Path(cfg.run.root) / "s")
    for bad in ("..", "a/b", "/abs"):
        with pytest.raises(UsageError, match="one folder name"):
            study_dir(cfg, TuneOptions(trials=1, study=bad))
