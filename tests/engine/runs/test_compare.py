"""engine.runs.compare (`xmask runs compare`): the table equals the runs' summaries and metrics.jsonl, the plot
draws each run's validation curve, the CLI's JSON equals the library call."""
from __future__ import annotations

import json

import pytest
import torch

from tests.cli_helpers import one_error_line, run
from tests.engine.training.test_loop import ToyTask
from xmask_cli.engine.runs.compare import compare_runs, find_runs, plot_compare, run_row
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.errors import RunNotFoundError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    for name, seeds, lr in (("toy-a", (1, 0), 0.05), ("toy-b", (0,), 0.01)):
        for seed in seeds:
            torch.manual_seed(seed)
            fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=3 + seed, lr=lr, warmup_epochs=0, seed=seed),
                root / name / str(seed), model_config={"toy": 1})
    (root / "toy-a" / "junk").mkdir()  # no summary: not a run, skipped inside a folder of runs
    return root


def test_rows_equal_the_summaries(runs):
    found = find_runs([runs / "toy-a", runs / "toy-b" / "0"])
    assert found == [runs / "toy-a" / "0", runs / "toy-a" / "1", runs / "toy-b" / "0"]  # seed order
    result = compare_runs([runs / "toy-a", runs / "toy-b" / "0"], runs / "plots" / "cmp.png")
    assert (runs / "plots" / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    for row, path in zip(result["runs"], found):
        summary = json.loads((path / "summary.json").read_text())
        metrics = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        assert row["name"] == path.parent.name and row["seed"] == summary["seed"] == int(path.name)
        assert row["best_epoch"] == summary["best_epoch"] and row["epochs_run"] == summary["epochs_run"]
        assert (row["train"], row["val"], row["test"]) == tuple(summary["metrics"][p] for p in ("train", "val", "test"))
        assert row["wall_s"] == pytest.approx(sum(m["epoch_s"] for m in metrics), abs=1e-3)
        assert row["metric"] == "mae" and "curve" not in row
    rows = result.runs  # read by attribute: the curve is the metrics' validation column
    assert [list(p) for p in rows[0].curve] == rows[0].to_json()["curve"] and rows[0].curve[0][0] == 0


def test_fold_runs_are_found_in_numeric_order_and_named(runs, tmp_path):
    """A ``--folds`` run keeps its runs in ``<name>/<seed>/fold-<i>/``: the name's folder and a seed folder both
    list them, fold 2 before fold 10, each row naming its fold."""
    import shutil

    for i in (10, 2):
        dst = tmp_path / "toy-f" / "0" / f"fold-{i}"
        shutil.copytree(runs / "toy-a" / "0", dst)
        summary = json.loads((dst / "summary.json").read_text())
        (dst / "summary.json").write_text(json.dumps({**summary, "fold": i, "folds": 11}))
    (tmp_path / "toy-f" / "0" / "folds").mkdir()  # the fold index files' folder: not a run
    want = [tmp_path / "toy-f" / "0" / "fold-2", tmp_path / "toy-f" / "0" / "fold-10"]
    assert find_runs([tmp_path / "toy-f"]) == find_runs([tmp_path / "toy-f" / "0"]) == want
    rows = [run_row(p) for p in want]
    assert [(r["name"], r["seed"], r["fold"]) for r in rows] == [("toy-f", 0, 2), ("toy-f", 0, 10)]
    assert run_row(runs / "toy-a" / "0")["fold"] is None


def test_plot_draws_each_validation_curve(runs):
    rows = [run_row(p) for p in find_runs([runs / "toy-a", runs / "toy-b"])]
    fig = plot_compare(rows)
    curves = [ln for ln in fig.axes[0].lines if len(ln.get_xdata()) > 1]
    for line, path in zip(curves, find_runs([runs / "toy-a", runs / "toy-b"])):
        metrics = RunDir(path).read_metrics()
        assert list(line.get_xdata()) == [m["epoch"] for m in metrics]
        assert list(line.get_ydata()) == [m["val_mae"] for m in metrics]
    assert len(curves) == 3


def test_cli_json_equals_the_library_and_refusals(runs, tmp_path):
    r = run("runs", "compare", str(runs / "toy-a"), str(runs / "toy-b"), "--format", "json", "--out",
            str(tmp_path / "c.png"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == compare_runs([runs / "toy-a", runs / "toy-b"], tmp_path / "c.png").to_json()
    human = run("runs", "compare", str(runs / "toy-a"), "--no-plot")
    assert human.exit_code == 0 and "toy-a/0" in human.stdout and "toy-a/1" in human.stdout
    r = run("runs", "compare", str(tmp_path / "nothing"))
    assert r.exit_code == RunNotFoundError.exit_code == 6 and "no finished run" in one_error_line(r)
    assert "Examples" in run("runs", "compare", "--help").stdout


@pytest.mark.parametrize("text", ["1e999", "NaN", "-Infinity"])
def test_non_finite_metrics_are_damaged_not_shown(runs, tmp_path, text):
    """A summary.json metric of 1e999 or NaN (json reads both as floats) is refused as damaged, exit 6, naming
    the file and the metric; so is a non-finite epoch time, which the wall column would sum."""
    import shutil

    dst = tmp_path / "toy-x" / "0"
    shutil.copytree(runs / "toy-a" / "0", dst)
    summary = json.loads((dst / "summary.json").read_text())
    summary["metrics"]["val"] = 123456.5
    (dst / "summary.json").write_text(json.dumps(summary).replace("123456.5", text))
    assert text in (dst / "summary.json").read_text()
    with pytest.raises(RunNotFoundError, match="metrics.val"):
        compare_runs([dst], None)
    r = run("runs", "compare", str(tmp_path / "toy-x"), "--no-plot")
    line = one_error_line(r)
    assert r.exit_code == 6 and str(dst / "summary.json") in line and "not a finite number" in line
    assert sorted(p.name for p in tmp_path.glob("**/*.png")) == ["curves.png"]  # the run's own, no plot
    shutil.copy(runs / "toy-a" / "0" / "summary.json", dst / "summary.json")  # metrics fine, an epoch time not
    rows = (dst / "metrics.jsonl").read_text().splitlines()
    rows[1] = json.dumps({**json.loads(rows[1]), "epoch_s": 1e999}).replace("Infinity", text)
    (dst / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(RunNotFoundError, match="row 2's epoch time"):
        compare_runs([dst], None)


def test_a_folder_at_the_plot_s_name_is_exit_2_before_drawing(runs, tmp_path):
    (tmp_path / "c.png").mkdir()
    r = run("runs", "compare", str(runs / "toy-a"), "--out", str(tmp_path / "c.png"))
    assert r.exit_code == 2 and f"{tmp_path / 'c.png'} is a folder, not a file" in one_error_line(r)
    assert (tmp_path / "c.png").is_dir() and not list((tmp_path / "c.png").iterdir())
