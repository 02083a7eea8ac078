"""Shared set-up of the engine tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    # Small models gain nothing from intra-op threads, and on a busy 2-core box
    # spinning OpenMP workers slow these runs down several-fold.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
