"""Selection: the best validation metric, ties broken by the lower validation loss, then the later epoch."""
from __future__ import annotations

import json

import pytest
import torch

from tests.engine.training.test_loop import ToyTask
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.training import selection
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.errors import RunNotFoundError


def brute_force(history, higher):
    """The rule written out directly: sort by (metric, -loss, epoch) and take the largest."""
    def key(item):
        i, (val, loss) = item
        return ((val if higher else -val), -loss, i)
    return max(enumerate(history), key=key)[0]


@pytest.mark.parametrize("higher", [True, False])
def test_best_index_matches_the_rule_written_out(higher):
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(1, 12, (1,), generator=g))
        # Few distinct values, so that metric ties and loss ties are common.
        vals = (torch.randint(0, 3, (n,), generator=g) / 2).tolist()
        losses = (torch.randint(0, 3, (n,), generator=g) / 4).tolist()
        history = list(zip(vals, losses))
        assert selection.best_index(history, higher) == brute_force(history, higher), history


def test_a_constructed_history():
    # MUTAG's case: validation accuracy touches its ceiling early and stays; the loss keeps falling.
    history = [(0.61, 0.69), (0.94, 0.52), (0.94, 0.40), (0.89, 0.35), (0.94, 0.31), (0.94, 0.33), (0.94, 0.31)]
    assert selection.best_index(history, higher=True) == 6  # ties at 0.31: the later epoch
    assert selection.best_index(history[:6], higher=True) == 4
    assert selection.best_index([(0.5, 0.2), (0.4, 0.1)], higher=True) == 0  # a better metric wins over any loss
    assert selection.best_index([(0.3, 0.2), (0.3, 0.1)], higher=False) == 1  # lower-is-better metrics alike
    assert selection.best_index([], higher=True) == -1


def test_non_finite_values():
    nan = float("nan")
    assert selection.best_index([(0.5, 0.3), (nan, 0.1)], higher=True) == 0  # a NaN metric never wins
    assert selection.best_index([(0.5, nan), (0.5, 0.4)], higher=True) == 1  # a known loss beats an unknown one
    assert selection.best_index([(0.5, 0.4), (0.5, nan)], higher=True) == 0
    assert selection.best_index([(0.5, nan), (0.5, nan)], higher=True) == 1  # no loss: the later epoch
    assert selection.compare(0.5, 0.4, 0.5, 0.4, True) == "tie"  # kept, but not an improvement for patience


class ScriptedTask(ToyTask):
    """The toy task with its validation (metric, loss) per epoch given: what fit selects is then known."""

    metric = "accuracy"

    def __init__(self, script):
        super().__init__()
        self.script, self.calls = list(script), 0

    def evaluate(self, model, part):
        if part == "val" and self.calls < len(self.script):
            self.calls += 1
            return self.script[self.calls - 1]
        return 0.0, 0.0

    def score(self, model, part):
        return self.evaluate(model, part)[0]


def _fit(script, path, patience=10):
    torch.manual_seed(0)
    cfg = TrainConfig(epochs=len(script), lr=0.01, warmup_epochs=0, patience=patience)
    return fit(ScriptedTask(script), torch.nn.Linear(2, 1), cfg, path, model_config={"toy": 1}, parts=("val",))


def test_fit_keeps_the_epoch_the_rule_picks_and_records_both_values(tmp_path):
    script = [(0.61, 0.69), (0.94, 0.52), (0.94, 0.40), (0.89, 0.35), (0.94, 0.31), (0.94, 0.33)]
    summary = _fit(script, tmp_path / "r")
    assert summary["best_epoch"] == selection.best_index(script, True) == 4
    assert summary["selection"] == {"rule": selection.RULE, "val_accuracy": 0.94, "val_loss": 0.31}
    assert RunDir(tmp_path / "r").load_checkpoint(RunDir.BEST)["epoch"] == 4
    saved = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert saved["selection"]["val_loss"] == 0.31
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["val_loss"] for r in rows] == [loss for _, loss in script]


def test_a_loss_tie_break_resets_patience_and_a_full_tie_does_not(tmp_path):
    # Patience 2: the metric is flat from epoch 1; the falling loss keeps the run going until it stops falling.
    script = [(0.5, 0.9), (0.8, 0.8), (0.8, 0.7), (0.8, 0.6), (0.8, 0.6), (0.8, 0.6), (0.8, 0.5)]
    # Epochs 2 and 3 improve the loss (patience resets); 4 and 5 tie fully: kept as the later epoch, but they
    # count against patience, so the run stops after epoch 5 and never sees epoch 6's lower loss.
    summary = _fit(script, tmp_path / "r", patience=2)
    assert summary["epochs_run"] == 6 and summary["stopped_early"]
    assert summary["best_epoch"] == 5


def test_a_selection_comes_back_from_its_checkpoint_state():
    sel = selection.Selection(start=0, best=0.75, best_loss=0.4, best_epoch=3, bad_epochs=2)
    back = selection.Selection.from_checkpoint({"epoch": 5, **sel.state()})
    assert back == selection.Selection(start=6, best=0.75, best_loss=0.4, best_epoch=3, bad_epochs=2)
    assert selection.Selection.from_checkpoint(None) == selection.Selection()


def test_a_damaged_selection_state_is_refused_naming_it():
    state = {"epoch": 5, **selection.Selection(best=0.75, best_epoch=3).state()}
    with pytest.raises(RunNotFoundError, match="selection state"):
        selection.Selection.from_checkpoint({**state, "best_epoch": "3"})
    with pytest.raises(RunNotFoundError, match="selection state"):
        selection.Selection.from_checkpoint({**state, "best": [0.75]})
