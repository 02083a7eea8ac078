"""Whether the model is being traced by ``torch.export``: the few value-dependent shortcuts then step aside.

A shortcut that reads a tensor's values (an all-real padding mask, a memoised mask, a chunk count chosen
from sizes) cannot be traced for dynamic sizes; while exporting, the model takes the general form, which
gives the same numbers (tests/model and tests/export check both).
"""
from __future__ import annotations

import torch

__all__ = ["exporting"]


def exporting() -> bool:
    """True while ``torch.export`` traces the model (False on a torch without ``torch.compiler.is_exporting``)."""
    check = getattr(torch.compiler, "is_exporting", None)
    return bool(check()) if check is not None else False
