"""The pair tasks' structure: only the training edges reach the cache, and a wrong cache is refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.engine.pair_graphs import FULL, SPD_MAX, adjacency, check_no_leak, dense_spd, laplacian_eigvals, random_graph
from xmask_cli.engine.batching.pair_structure import PairStructure, prepare_pair_structure
from xmask_cli.engine.scoring.splits import edge_split
from xmask_cli.engine.tasks.link import LinkTask


def test_link_structure_sees_training_edges_only(tmp_path: Path) -> None:
    n = 40
    full = random_graph(n, 0.12, seed=1)
    split = edge_split(full, n, seed=0, fractions=(0.7, 0.1, 0.2))
    lines: list[str] = []
    path = prepare_pair_structure("toy", split.train_edge_index, n, FULL, tmp_path, log=lines.append)
    assert path.parent.name == "toy-train-edges" and any("preparing" in m for m in lines)
    held_out = np.concatenate([split.val_pos, split.test_pos], axis=1)
    check_no_leak(path, split.train_edge_index, full, held_out, n)

    # Same training edges (any order): the same cache, reused without preparing again.
    lines.clear()
    assert prepare_pair_structure("toy", split.train_edge_index[:, ::-1], n, FULL, tmp_path, log=lines.append) == path
    assert not any("preparing" in m for m in lines)

    # A cache of the full graph is refused: the guard against leaking through the wrong file.
    full_path = prepare_pair_structure("toy-full", full, n, FULL, tmp_path)
    x = torch.randn(n, 4)
    with pytest.raises(ValueError, match="not prepared from this split's training edges"):
        LinkTask(full_path, x, split, dataset="toy", fractions=(0.7, 0.1, 0.2))
    LinkTask(path, x, split, dataset="toy", fractions=(0.7, 0.1, 0.2))


@pytest.mark.parametrize("attention", ["dense", "sparse"])
def test_link_bias_inputs_see_training_edges_only(tmp_path: Path, attention: str) -> None:
    """What the learned biases read (SPD, RRWP, spectrum) is the training graph's; held-out edges are not adjacent."""
    from dataclasses import replace

    from xmask_cli.config import RrwpSection

    n = 30
    full = random_graph(n, 0.15, seed=3)
    split = edge_split(full, n, seed=0, fractions=(0.7, 0.1, 0.2))
    cfg = replace(FULL, rrwp=RrwpSection(enabled=True, steps=3))
    path = prepare_pair_structure("toy", split.train_edge_index, n, cfg, tmp_path)
    s = PairStructure(path, split.train_edge_index, n, dense_max_nodes=1000, device=torch.device("cpu"),
                      attention=attention, needs={"spd", "rrwp", "spectrum"})
    want_spd = dense_spd(split.train_edge_index, n, SPD_MAX)
    a = adjacency(split.train_edge_index, n)
    deg = a.sum(1, keepdims=True)
    p1 = np.divide(a, deg, out=np.zeros_like(a), where=deg > 0)  # P = D^-1 A of the training graph
    held = np.concatenate([split.val_pos, split.test_pos], axis=1)
    if attention == "dense":
        spd, rrwp = s.extras["spd"][0].numpy(), s.extras["rrwp"][0].numpy()
        np.testing.assert_array_equal(spd, want_spd)
        np.testing.assert_allclose(rrwp[1], p1, atol=1e-6)
        assert (spd[held[0], held[1]] != 1).all() and (rrwp[1][held[0], held[1]] == 0).all()
    else:
        r, c = s.pairs.numpy()
        np.testing.assert_array_equal(s.extras["spd"].numpy(), want_spd[r, c])
        np.testing.assert_allclose(s.extras["rrwp"][:, 1].numpy(), p1[r, c], atol=1e-6)
    lam = s.extras["eig_vals"].numpy().reshape(-1, s.extras["eig_vals"].shape[-1])[0]
    np.testing.assert_allclose(np.sort(lam), laplacian_eigvals(split.train_edge_index, n), atol=1e-5)
