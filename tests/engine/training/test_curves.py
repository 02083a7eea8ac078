"""``curves.png``'s series: which panel and series each metrics field goes to, what is skipped; the figure."""
from __future__ import annotations

import math

from xmask_cli.engine.training.curves import CURVES, curve_series, plot_curves, write_curves

ROWS = [
    {"epoch": 0, "loss": 1.5, "val_loss": 1.6, "train_acc": 0.5, "val_acc": 0.4, "train_s": 3.0, "epoch_s": 1.0,
     "input_stall": 0.1, "best_epoch": 0, "lr": 0.1},
    {"epoch": 1, "loss": 1.0, "val_loss": float("nan"), "train_acc": 0.6, "val_acc": 0.55, "val_mae": 2.0},
    {"epoch": 2, "loss": float("inf"), "val_loss": 0.9, "train_acc": True, "val_acc": "0.7", "val_mae": 1.5},
]


def test_each_field_goes_to_its_panel_and_series_and_non_numbers_are_skipped():
    got = curve_series(ROWS)
    # Worked by hand from ROWS: timing fields, best_epoch and lr are no curve; nan / inf / a bool / a string are
    # skipped points, not zeros.
    assert got == {
        "loss": {"train": ([0, 1], [1.5, 1.0]), "val": ([0, 2], [1.6, 0.9])},
        "acc": {"train": ([0, 1], [0.5, 0.6]), "val": ([0, 1], [0.4, 0.55])},
        "mae": {"val": ([1, 2], [2.0, 1.5])},
    }
    assert list(got) == ["loss", "acc", "mae"]  # loss first, then metrics in the order they appear


def test_no_rows_or_only_skipped_values_give_no_panel():
    assert curve_series([]) == {}
    assert curve_series([{"epoch": 0, "loss": math.nan, "train_s": 1.0}]) == {}


def test_the_figure_has_a_panel_per_series_and_marks_the_selected_epoch(tmp_path):
    fig = plot_curves(ROWS, best_epoch=1, title="t")
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["loss", "acc", "mae"]
    for ax in axes:
        marks = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == [1, 1]
    loss_train = [ln for ln in axes[0].get_lines() if ln.get_label() == "train"][0]
    assert list(loss_train.get_xdata()) == [0, 1] and list(loss_train.get_ydata()) == [1.5, 1.0]
    assert all(not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
               for ax in plot_curves(ROWS, best_epoch=None, title="t").get_axes())
    path = write_curves(tmp_path / CURVES, ROWS, 1, "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(tmp_path.glob(".*"))  # no temp file left
