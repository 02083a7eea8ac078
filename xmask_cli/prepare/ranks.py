"""``torchrun ... -m xmask_cli prepare``: the units of a prepare dealt over the ranks of a gloo process group.

Every rank plans the same units (:func:`~xmask_cli.prepare.blocks.plan_units`, a function of the graphs and
the parameters). In round ``t`` rank ``r`` computes unit ``t * world + r``; rank 0 gathers the round's results
and writes them in unit order, so the file is the one a single process writes, value for value. Rank 0
alone reads and writes the cache folder (several nodes: the cache dir must be a shared file system, since
rank 0 writes it and every rank reads the dataset). The process group is torchrun's, opened by the CLI.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from xmask_cli.config import StructureSection
from xmask_cli.errors import PeerFailedError
from xmask_cli.prepare.blocks import DEFAULT_BUDGET, UnitRunner, plan_units

__all__ = ["RankWorld", "gathered_blocks", "rank0_first", "rank_world"]


class RankWorld:
    """This process's ``rank`` of ``size`` in the open process group (``size == 1``: none)."""

    def __init__(self, rank: int = 0, size: int = 1):
        self.rank, self.size = int(rank), int(size)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        self.collective(lambda: dist.broadcast_object_list(box, src=0))
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            self.collective(dist.barrier)

    def collective(self, call: Callable[[], Any]) -> Any:
        """Run a collective; a dead or stuck rank becomes one :class:`PeerFailedError` line (no file is written:
        rank 0 writes under a temp name and renames only at the end)."""
        try:
            return call()
        except (RuntimeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PeerFailedError(f"prepare rank {self.rank} of {self.size}: a collective failed, another rank died "
                                  f"or stopped answering ({first}); rerun the same command") from exc


def rank_world() -> RankWorld:
    """The open process group's rank and size, or a one-process world."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return RankWorld()
    if dist.is_available() and dist.is_initialized():
        return RankWorld(dist.get_rank(), dist.get_world_size())
    return RankWorld()


@contextlib.contextmanager
def rank0_first(w: RankWorld) -> Iterator[None]:
    """Rank 0 runs the block first (it downloads or stages the dataset), the other ranks after it."""
    if w.rank != 0:
        w.barrier()
    try:
        yield
    finally:
        if w.rank == 0:
            w.barrier()


def gathered_blocks(edges: list[np.ndarray], nn: np.ndarray, cfg: StructureSection, level: str, w: RankWorld,
                    check: Callable[[], None] = lambda: None,
                    budget_bytes: float | None = None) -> Iterator[tuple[int, Any]]:
    """Compute this rank's units; on rank 0 yield every unit's ``(graphs_done, result)`` in order.

    Other ranks yield nothing: they compute their share and hand it to rank 0 round by round.
    """
    import torch.distributed as dist

    units = plan_units(edges, nn, cfg, DEFAULT_BUDGET if budget_bytes is None else budget_bytes)
    run = UnitRunner(edges, nn, cfg, level)
    for t in range(0, len(units), w.size):
        if w.rank == 0:
            check()
        i = t + w.rank
        mine = run(units[i]) if i < len(units) else None
        out: list[Any] | None = [None] * w.size if w.rank == 0 else None
        w.collective(lambda: dist.gather_object(mine, out, dst=0))  # noqa: B023  (run at once, inside the loop)
        if w.rank == 0:
            for j, r in enumerate(out or []):
                if t + j < len(units):
                    yield units[t + j].done, r
