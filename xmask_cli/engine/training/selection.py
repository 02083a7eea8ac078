"""Which epoch (or trial) is the best one: the validation metric, ties broken by the validation loss.

One rule for ``train`` (the kept checkpoint), ``ablate`` (its runs are ``train``'s) and ``tune`` (the best
trial). On small validation sets the metric ties often (one MUTAG graph is 5.6 accuracy points): taking
the first epoch that reaches a value keeps an under-trained model; the loss separates such epochs.

Example::

    history = [(0.94, 0.41), (0.94, 0.30), (0.89, 0.25)]  # (val accuracy, val loss) per epoch
    assert best_index(history, higher=True) == 1
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from xmask_cli.errors import RunNotFoundError

__all__ = ["RULE", "TRIAL_RULE", "compare", "best_index", "Selection", "SelectionState"]

#: The rule as ``summary.json`` records it.
RULE = "best validation metric; ties: lower validation loss, then the later epoch"
#: ``tune``'s form of it over trials (mean over the search seeds).
TRIAL_RULE = "best mean validation metric; ties: lower mean validation loss, then the earlier trial"


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def compare(val: float, loss: float | None, best: float | None, best_loss: float | None, higher: bool) -> str | None:
    """Does a later candidate ``(val, loss)`` replace the best so far ``(best, best_loss)``, and why?

    Returns ``"metric"`` (a strictly better metric), ``"loss"`` (the same metric, a strictly lower loss),
    ``"tie"`` (the same metric and loss, or a loss that cannot be compared: the later one is kept), or
    None (keep the best so far). A non-finite metric never replaces a finite one; anything replaces nothing.
    Only ``"metric"`` and ``"loss"`` count as an improvement for early stopping: a run whose numbers no longer
    move still stops.
    """
    if best is None:
        return "metric"
    if not _finite(val):
        return None
    if not _finite(best) or (val > best if higher else val < best):
        return "metric"
    if val != best:
        return None
    if _finite(loss) and _finite(best_loss) and loss != best_loss:
        return "loss" if loss < best_loss else None  # type: ignore[operator]
    if _finite(loss) and not _finite(best_loss):
        return "loss"
    if not _finite(loss) and _finite(best_loss):
        return None
    return "tie"


def best_index(history: Sequence[tuple[float, float | None]], higher: bool) -> int:
    """Position of the best ``(val, loss)`` in ``history`` (epochs in order) under :data:`RULE`; -1 if empty."""
    best_i, best, best_loss = -1, None, None
    for i, (val, loss) in enumerate(history):
        if compare(val, loss, best, best_loss, higher) is not None:
            best_i, best, best_loss = i, val, loss
    return best_i


class SelectionState(TypedDict):
    """What ``last.pt`` keeps of a :class:`Selection` (the next epoch is the checkpoint's own ``epoch`` + 1)."""

    best: float | None
    best_loss: float | None
    best_epoch: int
    bad_epochs: int


@dataclass
class Selection:
    """Where a run stands: the next epoch, the best epoch so far by validation, and epochs without improvement."""

    start: int = 0
    best: float | None = None
    best_loss: float | None = None
    best_epoch: int = -1
    bad_epochs: int = 0

    @classmethod
    def from_checkpoint(cls, ckpt: Mapping[str, object] | None) -> Selection:
        """Where ``last.pt`` left selection (:meth:`state` and the checkpoint's ``epoch``); a fresh run's for None.

        Raises:
            RunNotFoundError: those fields are not of the types :meth:`state` writes (a damaged checkpoint).
        """
        if ckpt is None:
            return cls()
        epoch, best, best_loss = ckpt["epoch"], ckpt["best"], ckpt.get("best_loss")
        best_epoch, bad_epochs = ckpt["best_epoch"], ckpt["bad_epochs"]
        if not (isinstance(epoch, int) and isinstance(best_epoch, int) and isinstance(bad_epochs, int)
                and (best is None or isinstance(best, (int, float)))
                and (best_loss is None or isinstance(best_loss, (int, float)))):
            raise RunNotFoundError("the checkpoint's selection state (epoch, best, best_loss, best_epoch, bad_epochs) "
                                   "is damaged; train again with --overwrite")
        return cls(epoch + 1, best, best_loss, best_epoch, bad_epochs)

    def update(self, val: float, val_loss: float | None, epoch: int, higher: bool) -> bool:
        """Take ``epoch``'s validation into account (:func:`compare`); True if it is
        the new best epoch. A tie keeps the later epoch without counting as an improvement."""
        why = compare(val, val_loss, self.best, self.best_loss, higher)
        if why is None:
            self.bad_epochs += 1
            return False
        self.best, self.best_loss, self.best_epoch = val, val_loss, epoch
        self.bad_epochs = 0 if why != "tie" else self.bad_epochs + 1
        return True

    def state(self) -> SelectionState:
        """What ``last.pt`` keeps of it."""
        return {"best": self.best, "best_loss": self.best_loss, "best_epoch": self.best_epoch,
                "bad_epochs": self.bad_epochs}
