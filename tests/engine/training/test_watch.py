"""engine.training.watch and engine.training.curves: curves.png at the end and on interrupt, TensorBoard events equal to
metrics.jsonl, the install hint when tensorboard is missing."""
from __future__ import annotations

import builtins
import json

import pytest
import torch

from tests.engine.training.test_loop import ToyTask
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training.curves import curve_series, plot_curves
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.engine.training.watch import scalar_tag
from xmask_cli.errors import DivergedError, UsageError


def _fit(task, path, epochs=4, **kw):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cfg = TrainConfig(epochs=epochs, lr=0.05, warmup_epochs=0, patience=10, **kw)
    return fit(task, model, cfg, path, model_config={"toy": 1})


class Interrupted(ToyTask):
    """Ctrl-C during the training pass of epoch ``at``."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def loss(self, model, batch):
        if batch == (self.at, 1):
            raise KeyboardInterrupt
        return super().loss(model, batch)


def _png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curves_png_after_a_finished_run_draws_metrics_jsonl(tmp_path):
    summary = _fit(ToyTask(), tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert _png(run.path / RunDir.CURVES)
    rows = run.read_metrics()
    # The figure's lines are the rows' values, and the marker sits at the summary's selected epoch.
    fig = plot_curves(rows, summary["best_epoch"], "t")
    loss_ax, mae_ax = fig.axes
    (train_loss, loss_mark), (val_mae, mae_mark) = loss_ax.lines, mae_ax.lines
    assert list(train_loss.get_xdata()) == [r["epoch"] for r in rows]
    assert list(train_loss.get_ydata()) == [r["loss"] for r in rows]
    assert list(val_mae.get_ydata()) == [r["val_mae"] for r in rows]
    assert list(loss_mark.get_xdata()) == [summary["best_epoch"]] * 2 == list(mae_mark.get_xdata())


def test_curve_series_pairs_train_and_val_and_skips_timing_and_non_finite():
    rows = [{"epoch": 0, "loss": 1.0, "val_loss": 1.5, "train_acc": 0.5, "val_acc": 0.4, "lr": 0.1, "train_s": 2.0,
             "epoch_s": 3.0, "input_stall": 0.1, "best_epoch": 0},
            {"epoch": 1, "loss": float("nan"), "val_loss": 1.2, "train_acc": 0.7, "val_acc": 0.6, "best_epoch": 1}]
    assert curve_series(rows) == {
        "loss": {"train": ([0], [1.0]), "val": ([0, 1], [1.5, 1.2])},
        "acc": {"train": ([0, 1], [0.5, 0.7]), "val": ([0, 1], [0.4, 0.6])},
    }


def test_curves_png_after_ctrl_c_and_after_divergence(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _fit(Interrupted(at=2), tmp_path / "int")
    run = RunDir(tmp_path / "int")
    assert [r["epoch"] for r in run.read_metrics()] == [0, 1]
    assert _png(run.path / RunDir.CURVES) and not (run.path / RunDir.SUMMARY).exists()
    with pytest.raises(DivergedError):
        _fit(ToyTask({(1, 1): "loss"}), tmp_path / "div")
    assert _png(tmp_path / "div" / RunDir.CURVES)


def test_a_refused_run_folder_is_left_as_it_was(tmp_path):
    _fit(ToyTask(), tmp_path / "run")
    (tmp_path / "run" / RunDir.CURVES).unlink()
    with pytest.raises(UsageError, match="exists"):
        _fit(ToyTask(), tmp_path / "run")
    assert not (tmp_path / "run" / RunDir.CURVES).exists()


#: A resolved config as train writes it into config.json (``config``), small and by hand.
TOY_CONFIG = {"description": "a toy", "run": {"root": "runs", "name": None}, "tune": {"trials": 3},
              "data": {"dataset": "toy", "fold": None}, "model": {"hidden": 16, "head_powers": [1, 2]},
              "train": {"lr": 0.05, "amsgrad": False, "loggers": ["tensorboard"]}}


def test_tensorboard_scalars_equal_metrics_jsonl_under_grouped_tags(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torch.manual_seed(0)
    cfg = TrainConfig(epochs=4, lr=0.05, warmup_epochs=0, patience=10, loggers=["tensorboard"], seed=3)
    summary = fit(ToyTask(), torch.nn.Linear(2, 1), cfg, tmp_path / "run", model_config={"toy": 1},
                  extra_config={"config": TOY_CONFIG})
    run = RunDir(tmp_path / "run")
    rows = run.read_metrics()
    events = sorted(run.path.glob(RunDir.EVENTS))
    assert len(events) == 1  # the HParams record too: no subfolder, no second file
    acc = EventAccumulator(str(run.path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # (The toy task has no validation loss: its rows hold None there, which is no scalar.)
    groups = {"loss": "train/loss", "lr": "train/lr", "val_mae": "val/mae", "train_s": "time/train_s", "epoch_s": "time/epoch_s", "input_stall": "time/input_stall"}
    finals = {f"final/{part}_mae" for part in summary["metrics"]}
    assert tags == set(groups.values()) | finals, tags
    for key, tag in groups.items():
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == [r["epoch"] for r in rows]
        assert [v for _, v in got] == pytest.approx([r[key] for r in rows], rel=1e-6)  # stored as float32
    for part, value in summary["metrics"].items():
        (event,) = acc.Scalars(f"final/{part}_mae")
        assert (event.step, event.value) == (summary["best_epoch"], pytest.approx(value, rel=1e-6))
    texts = {t: acc.Tensors(t) for t in acc.Tags()["tensors"] if t.startswith(("config", "summary"))}
    config_text = texts["config/text_summary"][0].tensor_proto.string_val[0].decode()
    assert json.loads(config_text.strip("`\n")) == run.load_config()
    summary_text = texts["summary/text_summary"][0].tensor_proto.string_val[0].decode()
    assert json.loads(summary_text.strip("`\n"))["metrics"] == summary["metrics"]
    _check_hparams(acc, summary)
    # --overwrite takes the old events with the old run.
    torch.manual_seed(0)
    fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=1, lr=0.05, warmup_epochs=0), run.path,
        model_config={"toy": 1}, overwrite=True)
    assert list(run.path.glob(RunDir.EVENTS)) == []


def _without_tensorboard(monkeypatch):
    real = builtins.__import__

    def fake(name, *args, **kw):
        if name == "tensorboard" or name.startswith(("tensorboard.", "torch.utils.tensorboard")):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_tensorboard_missing_is_exit_2_with_the_install_hint(tmp_path, monkeypatch):
    from tests.cli_helpers import one_error_line, run

    _without_tensorboard(monkeypatch)
    with pytest.raises(UsageError, match=r'pip install "xmask-cli\[tensorboard\]"'):
        _fit(ToyTask(), tmp_path / "lib", loggers=["tensorboard"])
    r = run("train", "--preset", "graph-level", "--logger", "tensorboard", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"), "--device", "cpu")
    assert r.exit_code == 2
    assert 'pip install "xmask-cli[tensorboard]"' in one_error_line(r)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()  # refused before any work


def test_a_run_resumes_under_another_logger(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def go(epochs, loggers, resume):
        torch.manual_seed(0)
        cfg = TrainConfig(epochs=epochs, lr=0.05, warmup_epochs=0, patience=10, loggers=loggers)
        return fit(ToyTask(), torch.nn.Linear(2, 1), cfg, tmp_path / "run", model_config={"toy": 1},
                   extra_config={"config": {"train": {"epochs": epochs, "loggers": loggers}}}, resume=resume)

    go(2, [], False)
    go(4, ["tensorboard"], True)  # accepted: a logger is no difference in what the run trains
    acc = EventAccumulator(str(tmp_path / "run"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 3]  # the epochs this process trained
    assert [r["epoch"] for r in RunDir(tmp_path / "run").read_metrics()] == [0, 1, 2, 3]


def _check_hparams(acc, summary) -> None:
    """The HParams record: the config's hyper-parameters (flattened by hand here) and the final metrics."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = {tag: plugin_data_pb2.HParamsPluginData.FromString(raw)
               for tag, raw in acc.PluginTagToContent("hparams").items()}
    start = content["_hparams_/session_start_info"].session_start_info.hparams
    got = {k: (v.string_value if v.HasField("string_value") else v.number_value) for k, v in start.items()}
    assert got == {"data.dataset": "toy", "model.hidden": 16.0, "model.head_powers": "[1, 2]", "train.lr": 0.05,
                   "train.amsgrad": "false", "train.loggers": '["tensorboard"]', "seed": 3.0}
    experiment = content["_hparams_/experiment"].experiment
    assert {m.name.tag for m in experiment.metric_infos} == {f"final/{p}_mae" for p in summary["metrics"]}
    assert content["_hparams_/session_end_info"].session_end_info.status == 1  # STATUS_SUCCESS


@pytest.mark.parametrize("key, tag", [("loss", "train/loss"), ("lr", "train/lr"), ("train_acc", "train/acc"),
                                      ("skipped_batches", "train/skipped_batches"), ("val_accuracy", "val/accuracy"),
                                      ("val_loss", "val/loss"), ("train_s", "time/train_s"),
                                      ("epoch_s", "time/epoch_s"), ("input_stall", "time/input_stall")])
def test_scalar_tags_group_train_val_and_time(key, tag):
    assert scalar_tag(key) == tag


def test_a_stopped_run_has_curves_but_no_hparams_record(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with pytest.raises(KeyboardInterrupt):
        _fit(Interrupted(at=2), tmp_path / "run", loggers=["tensorboard"])
    acc = EventAccumulator(str(tmp_path / "run"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/mae")] == [0, 1]
    with pytest.raises(KeyError, match="hparams"):
        acc.PluginTagToContent("hparams")
    assert not [t for t in acc.Tags()["scalars"] if t.startswith("final/")]
