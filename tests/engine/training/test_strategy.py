"""The training strategies: one process, and DDP over two gloo ranks (batches dealt, sums, the main process's values)."""
from __future__ import annotations

import datetime
import gc
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.engine.ranks import spawn_ranks
from xmask_cli.engine.tasks.base import Task
from xmask_cli.engine.training.distributed import DDPStrategy, SingleProcess, make_strategy
from xmask_cli.engine.training.precision import Precision


class Lines(Task[int]):
    """Batches ``0 .. count-1`` of 2 items each; the loss of batch ``b`` is ``(w - b)²`` (NaN for ``bad``)."""

    metric = "mae"

    def __init__(self, count: int, bad: int | None = None):
        self.count, self.bad = count, bad

    def describe(self) -> dict[str, int]:
        return {"count": self.count}

    def split_sizes(self) -> dict[str, int]:
        return {"train": 2 * self.count, "val": 0, "test": 0}

    def score(self, model: torch.nn.Module, part: str) -> float:
        return 0.0

    def train_batches(self, epoch: int) -> list[int]:
        return list(range(self.count))

    def loss(self, model: torch.nn.Module, batch: int) -> tuple[torch.Tensor, int]:
        loss = (model.weight.sum() - batch) ** 2
        return (loss * float("nan") if batch == self.bad else loss), 2


def _line() -> torch.nn.Linear:
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model


def test_one_process_strategy_is_the_plain_loop() -> None:
    strategy = make_strategy(Precision("fp32", "cpu"), torch.device("cpu"))  # no process group is open
    assert isinstance(strategy, SingleProcess) and strategy.is_main and strategy.world.size == 1
    assert list(strategy.batches(Lines(3), epoch=0, seed=0)) == [(0, True), (1, True), (2, True)]
    assert strategy.reduce([1.5, 2.0]) == [1.5, 2.0] and strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.on_main(len, "abc") == 3 and strategy.from_main(max, 2, 5) == 5
    model = _line()
    strategy.setup(model)
    loss, n, bad = strategy.backward(Lines(3), model, 3, True)
    assert (float(loss.detach()), n, bad) == (4.0, 2, None)
    assert float(model.weight.grad) == 2 * (1.0 - 3)  # d(w - 3)²/dw at w = 1
    model.weight.grad = None
    loss, n, bad = strategy.backward(Lines(3, bad=1), model, 1, True)
    assert bad == "loss" and model.weight.grad is None  # no backward through a non-finite loss


def _rank_main(rank: int, size: int, init_file: str, payload: None, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        _exercise(rank, out)
    finally:
        # The DDP wrapper is gone with _exercise's frame, while the group is still registered: freed later,
        # its reducer would run the gloo group's destructor holding the GIL, which joins a gloo thread that
        # waits for the GIL (a teardown deadlock of torch's, pytorch/pytorch#56297).
        gc.collect()
        dist.destroy_process_group()


def _exercise(rank: int, out: str) -> None:
    """Every strategy call on this rank; writes what it saw to ``out/rank<r>.json``."""
    strategy = make_strategy(Precision("fp32", "cpu"), torch.device("cpu"))
    calls: list[int] = []
    got = {
        "ddp": isinstance(strategy, DDPStrategy), "main": strategy.is_main,
        "batches": list(strategy.batches(Lines(3), epoch=0, seed=0)),
        "reduce": strategy.reduce([rank + 0.5, 1.0]),
        "broadcast": strategy.broadcast(f"from {rank}"),
        "on_main": strategy.on_main(calls.append, rank),
        "from_main": strategy.from_main(lambda: calls.append(rank) or f"rank {rank}'s"),
    }
    model = _line()
    strategy.setup(model)
    steps = []
    for batch, real in strategy.batches(Lines(3), epoch=0, seed=0):
        model.weight.grad = None
        loss, n, bad = strategy.backward(Lines(3), model, batch, real)
        steps.append([float(loss.detach()), n, bad, float(model.weight.grad)])
    _, _, bad = strategy.backward(Lines(3, bad=0), model, 0 if rank == 0 else 1, True)
    got.update(calls=calls, steps=steps, bad=bad)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(got))


@pytest.mark.slow
def test_ddp_strategy_deals_sums_and_takes_the_main_process_values(tmp_path: Path) -> None:
    out = spawn_ranks(_rank_main, None, tmp_path)
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["ddp"] and r1["ddp"] and r0["main"] and not r1["main"]
    # Three batches on two ranks: rank 1 pads its second step with its first batch, weight 0.
    assert r0["batches"] == [[0, True], [2, True]] and r1["batches"] == [[1, True], [1, False]]
    assert r0["reduce"] == r1["reduce"] == [2.0, 2.0]
    assert r0["broadcast"] == r1["broadcast"] == "from 0"
    assert r0["on_main"] is None and r1["on_main"] is None  # list.append's None, and nothing run on rank 1
    assert r0["from_main"] == r1["from_main"] == "rank 0's"
    assert r0["calls"] == [0, 0] and r1["calls"] == []  # fn ran on the main process only
    # Step 1: batches 0 and 1 (2 items each): the gradient is the mean of 2(w - b) over both, on both ranks.
    # Step 2: batch 2 alone (rank 1's padding counts no item): 2(w - 2).
    for r in (r0, r1):
        assert [s[3] for s in r["steps"]] == [(2 * (1 - 0) + 2 * (1 - 1)) / 2, 2 * (1 - 2)]
    assert [s[1] for s in r1["steps"]] == [2, 0]
    assert r0["bad"] == r1["bad"] == "loss"  # rank 0's NaN loss flags the step on every rank
