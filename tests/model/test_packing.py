"""Packing a padded batch (``model.graph_layout: packed``): the grouping is the cheapest partition (brute
force), packed and padded dropout draw the same real-row masks at the rate asked, real nodes must come first. The packed model against
the padded one: ``test_packed_path.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xmask_cli.model.packing import DROP_LEVELS, pack_graphs, padded_dropout, plan_groups, row_dropout


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
def test_packed_dropout_draws_the_padded_real_rows_mask(p, dtype) -> None:
    sizes = [3, 0, 7, 5]
    mask = torch.arange(7)[None, :] < torch.tensor(sizes)[:, None]
    h = torch.randn(4, 7, 16).to(dtype)
    packed = pack_graphs(mask)
    # The packed rows: graph 2 (7 nodes), then 3 (5), then 0 (3), each graph's nodes in order.
    assert packed.rows.tolist() == [14 + i for i in range(7)] + [21 + i for i in range(5)] + [0, 1, 2]
    torch.manual_seed(11)
    want = padded_dropout(mask)(h, p, True)
    after_padded = torch.rand(3)
    torch.manual_seed(11)
    got = packed.dropout(h.view(28, 16)[packed.rows], p, True)
    assert torch.equal(packed.unpack(got)[mask], want[mask])  # bit for bit: the same draws on the real rows
    assert torch.equal(want[~mask], h[~mask])  # padding neither drawn for nor changed
    assert torch.equal(torch.rand(3), after_padded)  # and the generator ends in the same state
    assert packed.unpack(got)[~mask].abs().sum() == 0


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_row_dropout_drops_at_the_rate_and_keeps_the_expectation(p) -> None:
    h = torch.rand(1000, 300, dtype=torch.float64) + 0.5
    torch.manual_seed(0)
    out = row_dropout(h, p, True)
    dropped = out == 0
    keep = round((1 - p) * 65536) / 65536  # the rate on a 16-bit grid (0.1 -> 0.1000061)
    assert abs(keep - (1 - p)) <= 2 ** -17
    n = h.numel()
    # Binomial: the dropped share within 5 standard deviations of 1 - keep.
    assert abs(float(dropped.double().mean()) - (1 - keep)) < 5 * np.sqrt(keep * (1 - keep) / n)
    torch.testing.assert_close(out[~dropped], h[~dropped] / keep, rtol=1e-15, atol=0)  # E[out] = h exactly
    # Every column and row drops independently: no lane of the 16-bit draws is stuck.
    per_lane = dropped.reshape(-1, 4).double().mean(0)
    assert float((per_lane - (1 - keep)).abs().max()) < 5 * np.sqrt(keep * (1 - keep) / (n / 4))
    # Neighbouring draws are uncorrelated (a lane copied or shifted would correlate them).
    flat = dropped.reshape(-1).double()
    corr = np.corrcoef(flat[:-1].numpy(), flat[1:].numpy())[0, 1]
    assert abs(corr) < 5 / np.sqrt(n)


def test_row_dropout_at_its_ends_and_outside_training() -> None:
    h = torch.randn(5, 7)
    state = torch.get_rng_state()
    assert row_dropout(h, 0.3, False) is h and row_dropout(h, 0.0, True) is h
    assert torch.equal(torch.get_rng_state(), state)  # nothing drawn: evaluation is untouched
    assert torch.equal(row_dropout(h, 1.0, True), torch.zeros_like(h))
    assert padded_dropout(torch.ones(5, dtype=torch.bool))(h, 0.3, False) is h
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        row_dropout(h, 1.5, True)


def test_pack_graphs_refuses_real_nodes_after_padding() -> None:
    mask = torch.tensor([[True, False, True]])
    with pytest.raises(ValueError, match="real nodes first"):
        pack_graphs(mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_row_dropout_draws_the_masks_of_the_boolean_form(dtype) -> None:
    # row_dropout against its draws taken and turned into the scaled mask by a bool-to-float conversion,
    # bit for bit, and the generator left where that leaves it (the next draw agrees too).
    h = torch.randn(53, 24).to(dtype)
    torch.manual_seed(5)
    got = row_dropout(h, 0.2, True)
    after = torch.rand(3)
    torch.manual_seed(5)
    words = torch.empty((h.numel() + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    keep = round(0.8 * DROP_LEVELS)
    draws = words.view(torch.int16)[:h.numel()].view(h.shape)
    want = h * (draws < keep - DROP_LEVELS // 2).to(dtype).mul_(DROP_LEVELS / keep)
    assert torch.equal(got, want) and torch.equal(torch.rand(3), after)
    assert 0 < int((got == 0).sum()) < h.numel() // 2
