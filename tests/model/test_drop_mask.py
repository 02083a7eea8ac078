"""keep_mask: the compiled keep mask against the torch expression it replaces, bit for bit."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.model.drop_mask import keep_mask
from xmask_cli.model.packing import DROP_LEVELS, row_dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.97])
def test_keep_mask_equals_the_torch_form(dtype: torch.dtype, p: float) -> None:
    gen = torch.Generator().manual_seed(int(p * 100))
    draws = torch.randint(-(1 << 15), 1 << 15, (37, 29), dtype=torch.int16, generator=gen)
    keep = round((1 - p) * DROP_LEVELS)
    threshold, scale = keep - DROP_LEVELS // 2, DROP_LEVELS / keep
    want = (draws < threshold).to(dtype).mul_(scale)
    got = keep_mask(draws, threshold, scale, dtype)
    assert got.dtype == dtype and got.shape == draws.shape and torch.equal(got, want)
    assert 0 < int((got == 0).sum()) < draws.numel()  # both kinds of element occur
    # The extremes of the 16-bit range: nothing and everything below the threshold.
    ends = torch.tensor([-(1 << 15), (1 << 15) - 1], dtype=torch.int16)
    assert torch.equal(keep_mask(ends, threshold, scale, dtype), (ends < threshold).to(dtype).mul_(scale))


def test_row_dropout_draws_the_masks_of_the_torch_form() -> None:
    # row_dropout through the kernel against the same draws taken and compared in torch: same masks, same
    # generator state after (the next draw agrees too).
    h = torch.randn(53, 24, dtype=torch.float64)
    torch.manual_seed(5)
    got = row_dropout(h, 0.2, True)
    after = torch.rand(3)
    torch.manual_seed(5)
    n = h.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    keep = round(0.8 * DROP_LEVELS)
    draws = words.view(torch.int16)[:n].view(h.shape)
    want = h * (draws < keep - DROP_LEVELS // 2).to(h.dtype).mul_(DROP_LEVELS / keep)
    assert torch.equal(got, want) and torch.equal(torch.rand(3), after)
