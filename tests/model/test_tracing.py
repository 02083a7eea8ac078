"""``exporting()``: False when the model runs, True while torch.export traces it (what the shortcuts read)."""
from __future__ import annotations

import torch

from xmask_cli.model.tracing import exporting

SEEN: list[bool] = []  # outside the module: export does not keep a traced module's own attribute changes


class _Spy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append(exporting())
        return x * 2


def test_exporting_is_true_only_while_torch_export_traces():
    spy, x = _Spy(), torch.ones(3)
    SEEN.clear()
    assert torch.equal(spy(x), 2 * x) and SEEN == [False]
    torch.export.export(spy, (x,), strict=False)
    assert len(SEEN) > 1 and all(SEEN[1:])
    spy(x)
    assert SEEN[-1] is False
