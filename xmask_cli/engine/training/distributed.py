"""Data-parallel training on PyTorch's own stack: ``torchrun`` + ``torch.distributed`` + DDP.

``torchrun --nproc_per_node=N -m xmask_cli train ...`` sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and the rendezvous (``MASTER_ADDR``/``MASTER_PORT``); :func:`session`
reads them and opens the process group (gloo on CPU, NCCL on CUDA). Without them
nothing here runs and training is the one-process loop it always was.

:func:`~xmask_cli.engine.training.loop.fit` sees one :class:`Strategy` (:func:`make_strategy`):
:class:`SingleProcess` or :class:`DDPStrategy`. It asks it for the epoch's batches, one batch's
gradients (under the run's :class:`~xmask_cli.engine.training.precision.Precision`), sums over processes
(``reduce``), the main process's values (``broadcast``, ``from_main``) and work for the main
process only (``on_main``: the run folder); the loop itself never asks for its rank.

The rules :class:`DDPStrategy` follows with ``world > 1``:

* Batches are dealt, not split: every rank builds the same global batch order of an
  epoch (a function of seed and epoch) and takes ``batches[rank::world]``. The last
  step is padded so every rank takes ``ceil(T / world)`` steps: a rank without a batch
  there repeats one with weight 0 (it adds nothing to the gradient). Every training
  item is seen exactly once per epoch, as in one process.
* One optimiser step is one global step over ``world`` batches. Each rank's mean
  loss is scaled by ``world * n_rank / n_all`` (``n`` = items, all-reduced), so
  after DDP's average over ranks the gradient is the mean over all items of the
  step: ``world`` ranks x batch ``B`` equal one process with batch ``world * B``.
* Evaluation (validation, final metrics) runs on rank 0 only over the full split;
  its value is broadcast, so early stopping decides the same on every rank.
* Only rank 0 touches the run folder; a resumed checkpoint is read by rank 0 and
  broadcast, so ``--resume`` works with any number of ranks.
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from xmask_cli.engine.training.precision import Precision
from xmask_cli.errors import PeerFailedError, UsageError

__all__ = ["World", "world", "env_rank", "session", "deal", "shard_batches", "timeout_seconds", "PeerFailedError",
           "DEFAULT_TIMEOUT_S", "TrainBatches", "Strategy", "SingleProcess", "DDPStrategy", "make_strategy"]

B = TypeVar("B")
T = TypeVar("T")
P = ParamSpec("P")

#: Seconds a collective waits for the other ranks before failing (``XMASK_DIST_TIMEOUT`` overrides). Covers rank 0
#: preparing a cache or evaluating while the others wait; a dead peer is usually detected at once by gloo / torchrun.
DEFAULT_TIMEOUT_S = 1800


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size`` (``size == 1``: no process group)."""

    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes files and logs."""
        return self.rank == 0


def world() -> World:
    """Rank and size of the open process group, or ``World()`` when there is none."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def env_world_size() -> int:
    """``WORLD_SIZE`` as torchrun sets it (1 without torchrun); readable before the group is open."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)
    except ValueError:
        return 1


def env_rank() -> int:
    """``RANK`` as torchrun sets it (0 without torchrun); readable before the group is open."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def timeout_seconds() -> float:
    """``XMASK_DIST_TIMEOUT`` (seconds, > 0) or :data:`DEFAULT_TIMEOUT_S`."""
    text = os.environ.get("XMASK_DIST_TIMEOUT")
    if not text:
        return float(DEFAULT_TIMEOUT_S)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or not math.isfinite(value):
        raise UsageError(f"XMASK_DIST_TIMEOUT must be a positive number of seconds, got {text!r}")
    return value


@contextlib.contextmanager
def session(device: str) -> Iterator[tuple[World, str]]:
    """Open the process group torchrun describes (if any) for the ``with`` block.

    Yields the :class:`World` and the device this rank trains on: ``cuda`` becomes
    ``cuda:<LOCAL_RANK>`` (one GPU per process, NCCL); anything else uses gloo.
    A group opened by the caller (tests) is used as is and left open.
    """
    size = env_world_size()
    if size <= 1 or not dist.is_available() or dist.is_initialized():
        yield world(), device
        return
    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    timeout = datetime.timedelta(seconds=timeout_seconds())
    try:
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    except (RuntimeError, ValueError) as exc:
        raise PeerFailedError(f"cannot join the torchrun process group: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    try:
        yield world(), device
    finally:
        dist.destroy_process_group()


def deal(total: int, rank: int, size: int) -> list[tuple[int, bool]]:
    """Positions of the ``total`` batches of an epoch that ``rank`` takes, with ``real=False`` for padding.

    Round robin (``rank, rank + size, ...``); every rank gets ``ceil(total / size)``
    entries, a missing last one padded with the rank's first position (or 0) and
    ``real=False`` (trained with weight 0, so the step still has every rank in it).
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} of {size}")
    mine = [(i, True) for i in range(rank, total, size)]
    steps = -(-total // size)
    pad = mine[0][0] if mine else 0
    return mine + [(pad, False)] * (steps - len(mine))


class TrainBatches(Protocol[B]):
    """What a strategy needs of a task (the :class:`~xmask_cli.engine.tasks.base.Task` contract's training side):
    the epoch's training batches, a rank's share of them and one batch's loss."""

    def train_batches(self, epoch: int) -> Iterable[B]:
        """The training batches of ``epoch`` (a function of seed and epoch)."""

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[B, bool]]:
        """Rank ``rank``'s ``(batch, real)`` of ``epoch`` among ``size`` ranks (``Task.train_shard``)."""

    def loss(self, model: torch.nn.Module, batch: B) -> tuple[Tensor, int]:
        """Mean loss of ``batch`` and how many items it averaged."""


def shard_batches(task: TrainBatches[B], epoch: int, w: World) -> Iterator[tuple[B, bool]]:
    """This rank's ``(batch, real)`` of ``epoch``: the task's ``train_shard`` (by default every rank builds the
    epoch's batches and keeps its share, :func:`deal`; tasks whose batches are costly to build deal ids first)."""
    yield from task.train_shard(epoch, w.rank, w.size)


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """Torch seed of ``rank`` in ``epoch`` (dropout differs between ranks; any world size resumes exactly)."""
    return int(np.random.SeedSequence([int(seed), int(epoch), int(rank)]).generate_state(1)[0])


class _LossCall(torch.nn.Module):
    """The model under DDP, whose forward runs a whole ``task.loss``.

    Tasks call the network in their own ways (``model(batch)``, ``forward_sparse``,
    query encoders calling sub-modules); running the loss inside one DDP forward
    lets DDP prepare its gradient all-reduce for any of them.
    """

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, fn: Callable[[torch.nn.Module], T]) -> T:
        return fn(self.net)


def wrap(model: torch.nn.Module, device: torch.device | str) -> torch.nn.parallel.DistributedDataParallel:
    """``model`` under :class:`~torch.nn.parallel.DistributedDataParallel`; call it with ``fn(net) -> (loss, n)``.

    DDP broadcasts rank 0's parameters here. ``static_graph``: the set of parameters
    a step uses is found in the first step and fixed after (some task levels leave a
    parameter out, e.g. a bias their mode does not read), without the per-step graph
    walk of ``find_unused_parameters``. Buffers are constants of the model (index
    tables), so they are not re-broadcast at every forward.
    """
    device = torch.device(device)
    ids = [device] if device.type == "cuda" else None
    with warnings.catch_warnings():
        # torch >= 2.x deprecates the name broadcast_buffers; its replacement would still sync at init (harmless
        # here, but not yet available on every supported version).
        warnings.simplefilter("ignore", FutureWarning)
        return torch.nn.parallel.DistributedDataParallel(_LossCall(model), device_ids=ids, broadcast_buffers=False,
                                                         static_graph=True)


def all_sum(values: Iterable[float], device: torch.device | str) -> list[float]:
    """Sum of ``values`` over all ranks (float64)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast(obj: T, device: torch.device | str) -> T:
    """Rank 0's ``obj`` on every rank (pickled; small things: a metric, a checkpoint)."""
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=torch.device(device) if torch.device(device).type == "cuda" else None)
    return box[0]


def barrier(w: World) -> None:
    """Wait for every rank (a lost peer or the timeout raises :class:`PeerFailedError`)."""
    try:
        dist.barrier()
    except (RuntimeError, ValueError) as exc:
        raise peer_failed(exc, w) from exc


def peer_failed(exc: BaseException, w: World) -> PeerFailedError:
    """The one-line error of a failed collective (a dead or stuck peer)."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return PeerFailedError(f"rank {w.rank} of {w.size}: a collective failed, another training process died or stopped "
                           f"answering ({first}); the run folder keeps its last finished epoch: rerun the same "
                           f"`xmask train` with --resume (with any number of processes)")


class Strategy(ABC):
    """How :func:`~xmask_cli.engine.training.loop.fit` trains on this process, whatever the number of processes.

    ``precision`` runs the forwards and scales the backward; ``world`` is this process's place in the job.
    The loop asks for batches and gradients here, and meets the other processes only through
    :meth:`reduce`, :meth:`broadcast`, :meth:`on_main` and :meth:`from_main`.
    """

    def __init__(self, precision: Precision, world: World):
        self.precision = precision
        self.world = world

    @property
    def is_main(self) -> bool:
        """The process that reads and writes the run folder, scores, and logs."""
        return self.world.main

    @abstractmethod
    def setup(self, model: torch.nn.Module) -> None:
        """Get ``model`` ready to train (after its checkpoint is loaded): DDP wraps it here."""

    @abstractmethod
    def batches(self, task: TrainBatches[B], epoch: int, seed: int) -> Iterable[tuple[B, bool]]:
        """This process's ``(batch, real)`` of ``epoch``; a batch that is not real is padding of weight 0."""

    @abstractmethod
    def backward(self, task: TrainBatches[B], model: torch.nn.Module, batch: B,
                 real: bool) -> tuple[Tensor, int, str | None]:
        """Loss and gradients of one batch: ``(mean loss, items, "loss" if a loss was non-finite else None)``.

        With ``"loss"`` no process has gradients to step on; every process gets the same flag.
        """

    @abstractmethod
    def reduce(self, values: Sequence[float]) -> list[float]:
        """``values`` summed over every process."""

    @abstractmethod
    def broadcast(self, obj: T) -> T:
        """The main process's ``obj``, on every process."""

    def on_main(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
        """``fn(*args, **kwargs)`` on the main process only (files, logs); None elsewhere."""
        return fn(*args, **kwargs) if self.is_main else None

    def from_main(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` computed on the main process only, its value given to every process."""
        # Elsewhere on_main's None is only a placeholder: broadcast replaces it by the main process's value.
        return cast(T, self.broadcast(self.on_main(fn, *args, **kwargs)))


class SingleProcess(Strategy):
    """One process: the task's batches, a plain backward, and collectives that return what they are given."""

    def __init__(self, precision: Precision):
        super().__init__(precision, World())

    def setup(self, model: torch.nn.Module) -> None:
        """Nothing to do."""

    def batches(self, task: TrainBatches[B], epoch: int, seed: int) -> Iterable[tuple[B, bool]]:
        return ((b, True) for b in task.train_batches(epoch))

    def backward(self, task: TrainBatches[B], model: torch.nn.Module, batch: B,
                 real: bool) -> tuple[Tensor, int, str | None]:
        with self.precision.autocast():
            loss, n = task.loss(model, batch)
        if not bool(torch.isfinite(loss.detach()).all()):
            return loss, n, "loss"
        self.precision.backward(loss)
        return loss, n, None

    def reduce(self, values: Sequence[float]) -> list[float]:
        return list(values)

    def broadcast(self, obj: T) -> T:
        return obj


class DDPStrategy(Strategy):
    """Data-parallel training over the open process group (the rules in the module docstring).

    Args:
        device: where collectives put their tensors (the model's device: CPU for gloo, this rank's GPU for NCCL).
    """

    def __init__(self, precision: Precision, world: World, device: torch.device):
        super().__init__(precision, world)
        self.device = device
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None

    def _collective(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a collective; a dead or stuck peer becomes one clear :class:`PeerFailedError`."""
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError) as exc:  # gloo/NCCL report a lost peer or a timeout as RuntimeError
            raise peer_failed(exc, self.world) from exc

    def setup(self, model: torch.nn.Module) -> None:
        """Wrap ``model`` in DDP (which broadcasts rank 0's parameters: every rank starts alike)."""
        self.ddp = self._collective(wrap, model, self.device)

    def batches(self, task: TrainBatches[B], epoch: int, seed: int) -> Iterable[tuple[B, bool]]:
        """This rank's share of the epoch (:func:`shard_batches`); dropout seeded by rank and epoch."""
        torch.manual_seed(epoch_seed(seed, epoch, self.world.rank))
        return shard_batches(task, epoch, self.world)

    def backward(self, task: TrainBatches[B], model: torch.nn.Module, batch: B,
                 real: bool) -> tuple[Tensor, int, str | None]:
        """This rank's share of a global step: loss, backward through DDP, weighted to the step's item mean.

        Returns the rank's mean loss, its item count (0 for padding) and ``"loss"`` when any rank's loss is
        non-finite (every rank then sees the same flag and acts alike).
        """
        ddp = self.ddp
        if ddp is None:
            raise RuntimeError("DDPStrategy.setup(model) must run before the first backward")
        with self.precision.autocast():
            loss, n = ddp(lambda net: task.loss(net, batch))
        weight = float(n) if real else 0.0
        finite = bool(torch.isfinite(loss.detach()).all())
        items, bad_ranks = self.reduce([weight, 0.0 if finite else 1.0])
        # DDP averages over ranks: scaled by size * n / N, the average is the mean over the step's N items.
        scale = self.world.size * weight / items if items > 0 and bad_ranks == 0 else 0.0
        weighted = torch.nan_to_num(loss) * scale
        # Always a backward (DDP expects one per forward); a zero scale trains nothing.
        self._collective(self.precision.backward, weighted)
        return loss, int(n) if real else 0, ("loss" if bad_ranks else None)

    def reduce(self, values: Sequence[float]) -> list[float]:
        return self._collective(all_sum, values, self.device)

    def broadcast(self, obj: T) -> T:
        return self._collective(broadcast, obj, self.device)


def make_strategy(precision: Precision, device: torch.device) -> Strategy:
    """The strategy of this process: :class:`DDPStrategy` over the open process group, else :class:`SingleProcess`.

    ``device``: the model's device, where collectives put their tensors.
    """
    w = world()
    return DDPStrategy(precision, w, device) if w.distributed else SingleProcess(precision)
