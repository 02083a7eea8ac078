"""Packing a padded batch (``model.graph_layout: packed``): the grouping is the cheapest partition (brute
force), the packed dropout draws the padded layout's mask, real nodes must come first. The packed model against
the padded one: ``test_packed_path.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xmask_cli.model.packing import pack_graphs, plan_groups


def _cost(groups: list[list[int]], sizes: list[int], call: int) -> int:
    return sum(call + len(g) * max(sizes[b] for b in g) ** 2 for g in groups)


def _set_partitions(items: list[int]):
    """Every partition of ``items`` into non-empty sets."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def test_plan_groups_is_the_cheapest_partition_by_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        sizes = [int(s) for s in rng.integers(0, 60, size=int(rng.integers(1, 8)))]
        call = int(rng.choice([0, 100, 1000, 10**6]))
        groups = plan_groups(sizes, call)
        real = [b for b, n in enumerate(sizes) if n > 0]
        assert sorted(b for g in groups for b in g) == real  # each non-empty graph once, no empty one
        # Brute force over every set partition of the non-empty graphs (not only runs of the sorted order).
        best = min(_cost(p, sizes, call) for p in _set_partitions(real))
        assert _cost(groups, sizes, call) == best, (sizes, call)


@pytest.mark.parametrize("p, dtype", [(0.3, torch.float32), (0.1, torch.float32), (0.5, torch.bfloat16)])
def test_packed_dropout_draws_the_padded_mask(p, dtype) -> None:
    sizes = [3, 0, 7, 5]
    mask = torch.arange(7)[None, :] < torch.tensor(sizes)[:, None]
    h = torch.randn(4, 7, 16).to(dtype)
    packed = pack_graphs(mask)
    packed.dropout(h[mask], p, True)  # a second call reuses the scratch buffer: must not matter
    torch.manual_seed(11)
    want = torch.nn.functional.dropout(h, p, True)[mask]
    after_padded = torch.rand(3)
    torch.manual_seed(11)
    got = packed.dropout(h[mask], p, True)
    assert torch.equal(got, want)  # bit for bit: the same draws, kept on the real rows
    assert torch.equal(torch.rand(3), after_padded)  # and the generator ends in the same state
    assert torch.equal(packed.unpack(got)[mask], got) and packed.unpack(got)[~mask].abs().sum() == 0


def test_pack_graphs_refuses_real_nodes_after_padding() -> None:
    mask = torch.tensor([[True, False, True]])
    with pytest.raises(ValueError, match="real nodes first"):
        pack_graphs(mask)
