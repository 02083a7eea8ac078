"""benchmarks/peers_common.py: what every peer family shares reads seeds as ``xmask train`` does, batches
graphs on the split it is given, shuffled by the run's seed only, and selects under xmask's rule."""
from __future__ import annotations

import argparse

import pytest
import torch

from tests.benchmarks import load_script
from xmask_cli.engine.runs.plan import parse_seeds as xmask_seeds
from xmask_cli.engine.scoring.splits import Split


@pytest.fixture(scope="module")
def common():
    return load_script("peers_common")


@pytest.mark.parametrize("text", ["0-4", "0,2,5", "0-2,9", "7"])
def test_seeds_are_read_as_xmask_train_reads_them(common, text):
    assert common.parse_seeds(text) == xmask_seeds(text)


@pytest.mark.parametrize("text", ["3-1", "a", "1,1", "-2"])
def test_bad_seeds_are_an_argparse_error(common, text):
    with pytest.raises(argparse.ArgumentTypeError, match="--seeds"):
        common.parse_seeds(text)


def test_peers_cli_exits_2_on_bad_seeds(capsys):
    peers = load_script("peers")
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--seeds", "3-1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("range 3-1 is empty") and "error:" in err[-1]


def _graphs(n: int = 23) -> list:
    """``n`` one-node graphs, graph ``i`` carrying its id and label ``i % 3``."""
    from torch_geometric.data import Data

    return [Data(x=torch.ones(1, 2), edge_index=torch.zeros(2, 0, dtype=torch.long), y=torch.tensor([i % 3]),
                 gid=torch.tensor([i]), num_nodes=1) for i in range(n)]


def test_graph_loaders_hold_the_split_and_shuffle_by_seed_only(common):
    split = Split(train=list(range(0, 15)), val=list(range(15, 19)), test=list(range(19, 23)), name="hand")
    data = _graphs()

    def order(seed: int) -> tuple[list[int], dict[str, list[int]], int]:
        train, evals, classes = common.graph_loaders(data, split, ("train", "val", "test"), 4, seed)
        torch.manual_seed(1234)  # a later draw elsewhere must not change the order a seed gives
        got = [int(g) for b in train for g in b.gid]
        return got, {p: [int(g) for b in ld for g in b.gid] for p, ld in evals.items()}, classes

    a, evals, classes = order(0)
    assert sorted(a) == list(split.train) and classes == 3
    assert evals == {"train": list(split.train), "val": list(split.val), "test": list(split.test)}
    assert order(0)[0] == a and order(1)[0] != a


def test_fit_selected_applies_xmasks_rule_and_restores_that_state(common):
    """Hand-worked history: 0.7 first at epoch 1, a lower loss at 2, an equal (metric, loss) at 4 (a tie keeps
    the later epoch); patience 2 counts epochs 3 and 4 (a tie is no improvement): it stops after epoch 4, and
    epoch 6's 0.9 is never reached."""
    history = [(0.5, 1.0), (0.7, 0.9), (0.7, 0.8), (0.6, 0.5), (0.7, 0.8), (0.2, 0.1), (0.9, 0.1)]
    model = torch.nn.Linear(1, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    epoch = [-1]

    def train_epoch() -> None:
        epoch[0] += 1
        with torch.no_grad():
            model.weight.fill_(float(epoch[0]))  # the state records which epoch produced it

    res = common.fit_selected(model, opt, train_epoch, lambda part: history[epoch[0]], epochs=7, patience=2)
    assert res["best_epoch"] == 4 and res["epochs_run"] == 5
    assert float(model.weight) == 4.0
    assert len(res["epoch_seconds"]) == 5
