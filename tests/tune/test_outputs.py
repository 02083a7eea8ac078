"""What a study leaves in its folder: best.yaml resolves back to the best configuration, trials.csv rows by
hand, write_all's files and summary, plots written or skipped with their reason."""
from __future__ import annotations

import csv
import datetime
import io
import json
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from xmask_cli.config_resolve import resolve
from xmask_cli.tune.outputs import PLOTS, best_yaml, trials_csv, write_all, write_plots
from xmask_cli.tune.space import Param

PARAMS = [Param("model.head_powers", "choice", choices=([1, 2], [2, 0])), Param("model.hidden", "int", low=16, high=64),
          Param("train.lr", "float", low=0.1, high=0.5, step=0.1)]
DISTS = {"model.head_powers": CategoricalDistribution(["[1, 2]", "[2, 0]"]), "model.hidden": IntDistribution(16, 64),
         "train.lr": FloatDistribution(0.1, 0.5, step=0.1)}
START = datetime.datetime(2024, 1, 1, 12, 0, 0)


def _study(values: list[float | None]) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for i, v in enumerate(values):
        params = {"model.head_powers": ["[1, 2]", "[2, 0]"][i % 2], "model.hidden": 16 + 8 * i,
                  "train.lr": 0.1 + 0.1 * i}  # 0.30000000000000004 at i = 2: stored as 0.3
        if v is None:
            t = create_trial(params=params, distributions=DISTS, state=TrialState.FAIL,
                             user_attrs={"fail_reason": "diverged"})
        else:
            t = create_trial(params=params, distributions=DISTS, value=v,
                             user_attrs={"val_std": 0.01, "val_values": [v - 0.01, v + 0.01],
                                         "best_epochs": [3, 4], "val_loss_mean": 1.0 - v, "epoch_s": 0.25 * (i + 1)})
        t.datetime_start = START
        t.datetime_complete = START + datetime.timedelta(seconds=2.5 + i)  # trial i took 2.5 + i seconds
        study.add_trial(t)
    return study


def test_best_yaml_is_a_preset_that_resolves_to_the_best_configuration(tmp_path):
    cfg = resolve("graph-level", ["model.hidden=32", "train.lr=0.003", "model.head_powers=[2,0,1,3]"])
    text = best_yaml(cfg, study="s1", trial=3, value=0.91236, metric="acc", seeds=[0, 2])
    assert text.splitlines()[:2] == ["# Written by `xmask tune` (study 's1', trial 3). Reproduce the trial's "
                                     "validation score:", "#   xmask train --preset best.yaml --seeds 0,2"]
    (tmp_path / "best.yaml").write_text(text)
    again = resolve(str(tmp_path / "best.yaml"))
    assert again.description == "Best of study 's1': trial 3, mean val acc 0.9124 over seeds 0,2"
    want, got = cfg.to_dict(), again.to_dict()
    for d in (want, got):
        d.pop("description")
        d.pop("tune")
    assert got == want and again.tune == {}


def test_trials_csv_has_one_row_per_trial_with_decoded_values():
    rows = list(csv.reader(io.StringIO(trials_csv(_study([0.8, None, 0.9]), PARAMS))))
    assert rows[0] == ["number", "state", "value", "val_std", "duration_s", "epoch_s", "model.head_powers",
                       "model.hidden", "train.lr", "val_values", "best_epochs", "fail_reason"]
    assert rows[1] == ["0", "COMPLETE", "0.8", "0.01", "2.50", "0.25", "[1, 2]", "16", "0.1", "[0.79, 0.81]", "[3, 4]",
                       ""]
    assert rows[2] == ["1", "FAIL", "", "", "3.50", "", "[2, 0]", "24", "0.2", "", "", "diverged"]
    assert rows[3][:9] == ["2", "COMPLETE", "0.9", "0.01", "4.50", "0.75", "[1, 2]", "32", "0.3"]  # grid point tidied
    assert len(rows) == 4


def test_write_all_writes_every_file_and_a_summary_naming_the_best_trial(tmp_path):
    study = _study([0.8, None, 0.9, 0.85])
    cfg = resolve("graph-level", ["model.hidden=32"])
    opts = SimpleNamespace(seeds=[0, 1], sampler_seed=7, pruner="median")
    s = write_all(study, tmp_path / "out", name="s1", url="sqlite:///x.db", dataset="MUTAG", level="graph",
                  metric="acc", params=PARAMS, opts=opts, ran=2, best_cfg=cfg, final=None, plots=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["best.yaml", "summary.json", "trials.csv"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == json.loads(json.dumps(s.to_json()))
    assert s.best is not None and s.best.number == 2 and s.trials.complete == 3  # read by attribute
    assert s["trials"] == {"total": 4, "ran_now": 2, "complete": 3, "pruned": 0, "fail": 1, "running": 0}
    assert s["best"]["number"] == 2 and s["best"]["value"] == 0.9
    assert s["best"]["params"] == {"model.head_powers": [1, 2], "model.hidden": 32, "train.lr": 0.3}
    assert s["direction"] == "maximize" and s["space"]["train.lr"] == {"float": [0.1, 0.5], "step": 0.1}
    assert s["files"] == {"best.yaml": True, "trials.csv": True, "summary.json": True,
                          **{f: "skipped: not asked for" for f in PLOTS}}
    assert "trial 2, mean val acc 0.9000" in (tmp_path / "out" / "best.yaml").read_text()
    empty = write_all(_study([None]), tmp_path / "none", name="s2", url="u", dataset="MUTAG", level="graph",
                      metric="acc", params=PARAMS, opts=opts, ran=1, best_cfg=None, final=None, plots=False)
    assert empty["best"] is None and not (tmp_path / "none" / "best.yaml").exists()


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_plots_need_enough_completed_trials_and_stale_ones_go(tmp_path):
    (tmp_path / "param_importances.png").write_bytes(b"stale")
    logs: list[str] = []
    status = write_plots(_study([0.8, None]), tmp_path, logs.append)
    assert status == {"optimization_history.png": "written",
                      "param_importances.png": "skipped: needs 2 completed trial(s), the study has 1",
                      "parallel_coordinate.png": "skipped: needs 2 completed trial(s), the study has 1"}
    assert (tmp_path / "optimization_history.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optimization_history.png"]  # stale one removed, no temp
    assert logs == [f"plot {f} {status[f]}" for f in ("param_importances.png", "parallel_coordinate.png")]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_plots_and_files_are_written_with_the_mode_a_plain_open_gives(tmp_path):
    """PNGs go through the shared atomic writer like every other file: 0644 under umask 022, 0640 under 027
    (a temp file of their own would stay 0600)."""
    import os

    cfg = resolve("graph-level", ["model.hidden=32"])
    opts = SimpleNamespace(seeds=[0, 1], sampler_seed=7, pruner="median")
    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        before = os.umask(umask)
        try:
            out = tmp_path / f"u{umask:o}"
            write_all(_study([0.8, 0.9, 0.85]), out, name="s", url="u", dataset="MUTAG", level="graph", metric="acc",
                      params=PARAMS, opts=opts, ran=3, best_cfg=cfg, final=None, plots=True)
        finally:
            os.umask(before)
        modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
        assert set(modes) == {"best.yaml", "trials.csv", "summary.json", *PLOTS}
        assert set(modes.values()) == {mode}, modes
