"""What the public layers check before any arithmetic: their inputs, their size, and the state dicts they load.

Every failure is a :class:`~xmask_cli.errors.UsageError` whose message starts with the argument's name
(``logsmask_index: ...``), so a caller's wrong input never becomes a silently different output or a raw
``RuntimeError`` from deep inside the attention.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xmask_cli.errors import UsageError, first_line

__all__ = ["graph_inputs", "fits_in_memory", "dense_fits", "check_state", "compare_switches"]

def _shape(t: Any) -> str:
    if not isinstance(t, Tensor):
        return type(t).__name__
    layout = "" if t.layout == torch.strided else f" {str(t.layout).replace('torch.', '')}"
    return f"{str(t.dtype).replace('torch.', '')}{layout} {list(t.shape)}"


def _integer(t: Any) -> bool:
    return isinstance(t, Tensor) and t.layout == torch.strided and not t.is_floating_point() and \
        not t.is_complex() and t.dtype != torch.bool


def _pairs(index: Any, values: Any, n: int, max_power: int) -> tuple[Tensor, Tensor]:
    """``logsmask_index`` ``[2, P]`` (integers in ``[0, n)``, unique) and ``logsmask_values`` ``[P, K >= max_power]``."""
    if not _integer(index) or index.dim() != 2 or index.size(0) != 2:
        raise UsageError(f"logsmask_index: expected an integer tensor [2, P] of (query, key) node pairs; "
                         f"got {_shape(index)}")
    pairs = index.size(1)
    if pairs:
        low, high = int(index.min()), int(index.max())
        if low < 0 or high >= n:
            bad = low if low < 0 else high
            raise UsageError(f"logsmask_index: expected node ids in [0, {n}) (x has {n} rows); got {bad}")
        key = index[0].long() * n + index[1].long()
        if torch.unique(key).numel() != pairs:
            raise UsageError("logsmask_index: a pair is listed twice; each (query, key) pair must appear once "
                             "(AddLogSMask lists each once)")
    if not isinstance(values, Tensor) or values.layout != torch.strided or not values.is_floating_point() \
            or values.dim() != 2 or values.size(0) != pairs:
        raise UsageError(f"logsmask_values: expected a float tensor [P={pairs}, K], one row per pair of "
                         f"logsmask_index; got {_shape(values)}")
    if values.size(1) < max_power:
        raise UsageError(f"logsmask_values: expected at least {max_power} powers per pair (the largest head "
                         f"power); got {values.size(1)}")
    return index.long(), values


def _batch(batch: Any, index: Tensor, n: int) -> Tensor | None:
    """``batch`` ``[N]``: graph ids, sorted as PyG batches them, with no pair across two graphs."""
    if batch is None:
        return None
    if not _integer(batch) or batch.dim() != 1 or batch.numel() != n:
        raise UsageError(f"batch: expected an integer tensor [N={n}], the graph of each node; got {_shape(batch)}")
    batch = batch.long()
    if n and (int(batch[0]) < 0 or bool((batch[1:] < batch[:-1]).any())):
        raise UsageError("batch: expected graph ids >= 0 in ascending order (as a PyG batch holds them)")
    if index.numel():
        across = batch[index[0]] != batch[index[1]]
        if bool(across.any()):
            p = int(across.nonzero()[0, 0])
            raise UsageError(f"logsmask_index: pair ({int(index[0, p])}, {int(index[1, p])}) joins two graphs of "
                             f"batch; pairs must stay inside their graph")
    return batch


def graph_inputs(x: Any, index: Any, values: Any, batch: Any, in_channels: int,
                 max_power: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The forward's inputs checked (each failure names its argument), the structure moved to ``x``'s device.

    Returns ``(x, index as int64, values, batch as int64 or None)``.
    """
    if not isinstance(x, Tensor) or x.layout != torch.strided or not x.is_floating_point() or x.dim() != 2:
        raise UsageError(f"x: expected a dense float tensor [N, {in_channels}]; got {_shape(x)}")
    if x.size(1) != in_channels:
        raise UsageError(f"x: expected {in_channels} features per node (in_channels); got {x.size(1)}")
    n = x.size(0)
    index = index.to(x.device) if isinstance(index, Tensor) else index
    values = values.to(x.device) if isinstance(values, Tensor) else values
    index, values = _pairs(index, values, n, max_power)
    batch = _batch(batch.to(x.device) if isinstance(batch, Tensor) else batch, index, n)
    return x, index, values, batch


def _memory_bytes() -> int:
    """Physical memory of this machine (0 where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return 0


def fits_in_memory(sizes: Mapping[str, tuple[Any, int]], build: Any) -> Any:
    """``build()``, after checking that its parameters fit in memory; an allocation failure names the setting.

    ``sizes``: argument name -> (its value, the parameters it sizes). The largest share is named.
    """
    name, (value, _) = max(sizes.items(), key=lambda kv: kv[1][1])
    total = sum(count for _, count in sizes.values())
    limit = _memory_bytes()
    if limit and 4 * total > limit:
        raise UsageError(f"{name}: the layer's {total:.3g} float32 weights need {4 * total / 2**30:.3g} GiB, more "
                         f"than this machine's {limit / 2**30:.3g} GiB; got {name}={value}")
    try:
        return build()
    except (RuntimeError, MemoryError, OverflowError) as exc:
        raise UsageError(f"{name}: the layer's weights ({total:.3g}) could not be allocated "
                         f"({first_line(exc)[:120]}); got {name}={value}") from None


def dense_fits(num_graphs: int, largest: int, heads: int, powers: int) -> None:
    """Refuse a dense path whose padded grids (powers, log mask, logits: float32) exceed this machine's memory."""
    need = 4 * num_graphs * largest * largest * (powers + 2 * heads)
    limit = _memory_bytes()
    if limit and need > limit:
        raise UsageError(f"attention: the dense path pads {num_graphs} graph(s) to {largest} nodes, {need / 2**30:.3g} "
                         f"GiB of grids, more than this machine's {limit / 2**30:.3g} GiB; use attention='sparse'")


def check_state(module: torch.nn.Module, state_dict: Mapping[str, Any], prefix: str) -> None:
    """Refuse, before any weight is copied, a state dict of another shape or switch set than ``module``'s.

    ``module`` records its switches as its extra state (``<prefix>_extra_state``): weights without that
    record (a trained model's block, or another layer's) are refused. A state dict holding nothing of
    ``module`` (a partial load of the rest of a network) passes.
    """
    given = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    if not given:
        return
    own = module.state_dict()
    record = given.get("_extra_state")
    if record is None:
        raise UsageError(f"state_dict: {prefix}_extra_state, the record of the switches the weights were trained "
                         f"under, is missing (a trained run's block: use XLogSMaskBlock.from_run(run, layer))")
    compare_switches(record, own["_extra_state"])
    for key, want in own.items():
        got = given.get(key)
        if isinstance(want, Tensor) and isinstance(got, Tensor) and got.shape != want.shape:
            raise UsageError(f"state_dict: {prefix}{key} is {list(got.shape)}, this layer's is {list(want.shape)}")


def compare_switches(recorded: Any, own: Mapping[str, Any]) -> None:
    """Raise naming every switch whose recorded value differs from ``own``."""
    if not isinstance(recorded, Mapping):
        raise UsageError(f"state_dict: _extra_state is not a switch record; got {type(recorded).__name__}")
    differ = [f"{k} {recorded.get(k)!r} (this layer: {v!r})" for k, v in own.items() if recorded.get(k) != v]
    if differ:
        raise UsageError(f"state_dict: recorded under other switches than this layer's: {'; '.join(differ)}")
