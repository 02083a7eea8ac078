"""Train/val/test splits for node-, graph- and link-level tasks, seeded and recordable.

Every split is plain int64 numpy index arrays so that it can be written into the
run config (:meth:`Split.to_dict`) and a run can be reproduced from the config
alone. Split names follow :attr:`xmask_cli.data.spec.DatasetSpec.split`:

* ``public``          Planetoid's fixed masks (``data.train_mask`` ...);
* ``files``           the masks a user's folder gave (``data.train_mask`` ..., :mod:`xmask_cli.data.folder`);
* ``random-60-20-20`` a seeded 60/20/20 split of the labelled nodes (Amazon, Coauthor: every node;
  a folder: the nodes whose label is not -1);
* ``official-0``      WikiCS's first of its 20 official splits;
* ``ogb-official``    an OGB node set's official split (``dataset.get_idx_split()``: arxiv by year,
  products by sales rank);
* ``random-8-1-1``    a seeded 80/10/10 split of the graphs (TU);
* ``scaffold``        OGB's scaffold split (``dataset.get_idx_split()``).

Example::

    split = node_split(spec.split, data, seed=0)
    train_idx = torch.from_numpy(split.train)
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from xmask_cli.config import LinkSection
from xmask_cli.data.pyg import safe_torch_load
from xmask_cli.engine.scoring.metrics import ArrayInput
from xmask_cli.errors import UsageError

if TYPE_CHECKING:
    from torch_geometric.data import Data, Dataset

#: The parts every task scores, in reporting order.
PARTS = ("train", "val", "test")

__all__ = ["Split", "EdgeSplit", "random_split", "random_split_sizes", "node_split", "graph_split", "edge_split",
           "edge_pair_keys", "check_parts", "split_name", "index_batches", "SplitRecord"]


def _as_numpy(x: ArrayInput) -> np.ndarray:
    """Tensor or array-like -> numpy array (torch tensors may live on any device)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _index(x: ArrayInput) -> np.ndarray:
    return np.ascontiguousarray(_as_numpy(x), dtype=np.int64).reshape(-1)


def _mask_index(mask: ArrayInput) -> np.ndarray:
    """Positions where a boolean mask is set, as sorted int64 indices."""
    return np.flatnonzero(_as_numpy(mask).astype(bool)).astype(np.int64)


class SplitRecord(TypedDict):
    """A :class:`Split` as the run config records it (:meth:`Split.to_dict`)."""

    name: str
    seed: int | None
    train: list[int]
    val: list[int]
    test: list[int]


@dataclass(frozen=True, eq=False)
class Split:
    """One train/val/test split as int64 index arrays.

    Attributes:
        train, val, test: indices of nodes or graphs.
        name: split name, as the run config records it (``public``, ``random-8-1-1``, ...).
        seed: seed that drew the split; None for fixed splits that ignore the seed.
    """

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    name: str
    seed: int | None = None

    def __post_init__(self) -> None:
        # Normalise once so that every consumer can rely on int64 1-D arrays.
        for part in ("train", "val", "test"):
            object.__setattr__(self, part, _index(getattr(self, part)))

    def sizes(self) -> tuple[int, int, int]:
        """``(len(train), len(val), len(test))``."""
        return len(self.train), len(self.val), len(self.test)

    def to_dict(self) -> SplitRecord:
        """Plain-Python form (lists of ints) for saving in the run config."""
        return {"name": self.name, "seed": self.seed, "train": self.train.tolist(),
                "val": self.val.tolist(), "test": self.test.tolist()}

    @classmethod
    def from_dict(cls, d: SplitRecord) -> Split:
        """Inverse of :meth:`to_dict`."""
        return cls(train=np.asarray(d["train"], dtype=np.int64), val=np.asarray(d["val"], dtype=np.int64),
                   test=np.asarray(d["test"], dtype=np.int64), name=str(d["name"]), seed=d.get("seed"))


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {tuple(fractions)}")
    return float(fractions[0]), float(fractions[1]), float(fractions[2])


def random_split_sizes(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> tuple[int, int, int]:
    """``(train, val, test)`` sizes :func:`random_split` gives ``range(n)``, whatever the seed."""
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    _, f_val, f_test = _check_fractions(fractions)
    # The epsilon keeps e.g. 100 * 0.29 = 28.999... from flooring to 28.
    n_val = math.floor(n * f_val + 1e-9)
    n_test = math.floor(n * f_test + 1e-9)
    return n - n_val - n_test, n_val, n_test


def check_parts(sizes: tuple[int, int, int], *, split: str, items: str, source: str,
                required: Sequence[str] = PARTS) -> None:
    """Refuse a split that leaves a required part empty, before any structure is computed or run folder made.

    Training needs a train part, selection a val part and the report a test part: an empty one would end
    a run in "metric of an empty set" after prepare. ``items`` names what is split (``nodes``, ``graphs``,
    ``edges``), ``source`` the dataset.

    Raises:
        UsageError: a required part is empty; the message names it and gives every part's size.
    """
    empty = [part for part, size in zip(PARTS, sizes) if size == 0 and part in required]
    if empty:
        shown = ", ".join(f"{part} {size}" for part, size in zip(PARTS, sizes))
        total = f"{sum(sizes)} {items[:-1] if sum(sizes) == 1 else items}"
        raise UsageError(f"{source}: the {split} split of {total} leaves no {' and no '.join(empty)} "
                         f"{items} ({shown}); add {items}, or give a split that puts at least one in each part")


def random_split(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                 name: str | None = None) -> Split:
    """Seeded random split of ``range(n)`` into train/val/test.

    Val and test get ``floor(n * fraction)`` items each and train the remainder,
    so rounding never starves the training set. The permutation comes from
    ``numpy.random.default_rng(seed)``: the same ``(n, fractions, seed)`` always
    gives the same split, on any machine.
    """
    n_train, n_val, _ = random_split_sizes(n, fractions)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    if name is None:
        name = "random-" + "-".join(f"{f:g}" for f in fractions)
    return Split(train=perm[:n_train], val=perm[n_train:n_train + n_val], test=perm[n_train + n_val:],
                 name=name, seed=seed)


def node_split(spec_split_name: str, data: Data, seed: int = 0, dataset: Dataset | None = None) -> Split:
    """Node split of one PyG ``Data`` object by the registry's split name.

    ``public`` (Planetoid) and ``files`` (a folder's split files) read the
    masks, ``official-0`` reads column 0 of WikiCS's ``[N, 20]`` train/val masks
    (its test mask is shared, 1-D), and ``random-60-20-20`` draws a seeded split
    of the labelled nodes (label -1 marks an unlabelled node; with every node
    labelled, the split of all nodes). ``ogb-official`` asks ``dataset`` (the OGB
    dataset object) for its ``get_idx_split()``.
    """
    if spec_split_name == "ogb-official":
        if dataset is None:
            raise ValueError("the ogb-official split is the OGB dataset's own: pass dataset")
        with safe_torch_load():  # OGB reads split_dict.pt with torch.load when the file exists
            idx = dataset.get_idx_split()
        return Split(idx["train"], idx["valid"], idx["test"], name="ogb-official", seed=None)
    if spec_split_name in ("public", "files"):
        return Split(_mask_index(data.train_mask), _mask_index(data.val_mask), _mask_index(data.test_mask),
                     name=spec_split_name, seed=None)
    if spec_split_name == "official-0":
        train, val, test = (_as_numpy(m) for m in (data.train_mask, data.val_mask, data.test_mask))
        return Split(_mask_index(train[:, 0] if train.ndim == 2 else train),
                     _mask_index(val[:, 0] if val.ndim == 2 else val),
                     _mask_index(test[:, 0] if test.ndim == 2 else test), name="official-0", seed=None)
    if spec_split_name == "random-60-20-20":
        y = getattr(data, "y", None)
        labelled = None if y is None else np.flatnonzero(_as_numpy(y).reshape(int(data.num_nodes), -1)[:, 0] >= 0)
        if labelled is None or len(labelled) == int(data.num_nodes):
            return random_split(int(data.num_nodes), (0.6, 0.2, 0.2), seed=seed, name="random-60-20-20")
        s = random_split(len(labelled), (0.6, 0.2, 0.2), seed=seed, name="random-60-20-20")
        return Split(labelled[s.train], labelled[s.val], labelled[s.test], name=s.name, seed=seed)
    raise ValueError(f"unknown node split '{spec_split_name}': expected public, files, random-60-20-20, official-0 "
                     f"or ogb-official")


def graph_split(spec_split_name: str, dataset: Dataset, seed: int = 0) -> Split:
    """Graph split of a PyG / OGB dataset by the registry's split name.

    ``random-8-1-1`` draws a seeded 80/10/10 split of the graphs; ``scaffold``
    takes OGB's fixed ``get_idx_split()`` (keys ``train``/``valid``/``test``).
    """
    if spec_split_name == "random-8-1-1":
        return random_split(len(dataset), (0.8, 0.1, 0.1), seed=seed, name="random-8-1-1")
    if spec_split_name == "fixed-8-1-1":  # generated sets: one split whatever the training seed
        return random_split(len(dataset), (0.8, 0.1, 0.1), seed=0, name="fixed-8-1-1")
    if spec_split_name == "scaffold":
        with safe_torch_load():  # OGB reads split_dict.pt with torch.load when the file exists
            idx = dataset.get_idx_split()
        return Split(idx["train"], idx["valid"], idx["test"], name="scaffold", seed=None)
    raise ValueError(f"unknown graph split '{spec_split_name}': expected random-8-1-1, fixed-8-1-1 or scaffold")


@dataclass(frozen=True, eq=False)
class EdgeSplit:
    """Link-prediction split of one undirected graph (see :func:`edge_split`).

    Attributes:
        train_edge_index: ``[2, 2*T]`` training edges in both directions (the
            structure the model may see); also the training positives.
        val_pos, test_pos: ``[2, V]`` / ``[2, T']`` held-out positive pairs, ``u < v``.
        val_neg, test_neg: ``[2, V*M]`` / ``[2, T'*M]`` fixed negative pairs, ``u < v``;
            columns ``i*M .. (i+1)*M-1`` belong to positive ``i``, so scores
            reshaped to ``[P, M]`` feed :func:`xmask_cli.engine.scoring.metrics.mrr` directly.
        num_nodes, seed, num_neg_per_pos: the inputs that reproduce the split.
    """

    train_edge_index: np.ndarray
    val_pos: np.ndarray
    val_neg: np.ndarray
    test_pos: np.ndarray
    test_neg: np.ndarray
    num_nodes: int
    seed: int
    num_neg_per_pos: int

    @property
    def train_pos(self) -> np.ndarray:
        """``[2, T]`` training pairs, one column per undirected edge (``u < v``)."""
        ei = self.train_edge_index
        return ei[:, ei[0] < ei[1]]


def pair_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Unique int64 key of the unordered pair ``{u, v}``."""
    keys: np.ndarray = np.minimum(u, v) * n + np.maximum(u, v)
    return keys


def sample_negatives(count: int, n: int, forbidden: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct unordered non-edge pairs ``u < v`` by rejection, in draw order.

    ``forbidden`` holds the keys of every graph edge and of negatives already
    drawn for another part, so val and test negatives never overlap.
    """
    out = np.empty(0, dtype=np.int64)
    while len(out) < count:
        # Oversample so that one or two rounds usually suffice on sparse graphs.
        k = 2 * (count - len(out)) + 16
        u = rng.integers(0, n, size=k, dtype=np.int64)
        v = rng.integers(0, n, size=k, dtype=np.int64)
        keys = pair_keys(u, v, n)[u != v]
        keys = keys[~np.isin(keys, forbidden) & ~np.isin(keys, out)]
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]  # drop repeats, keep the draw order (deterministic)
        out = np.concatenate([out, keys[:count - len(out)]])
    return out


def edge_pair_keys(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """Sorted unique keys of the unordered pairs ``{u, v}``, ``u != v``, of ``edge_index`` ``[2, E]``: what
    :func:`edge_split` splits (self loops are never prediction targets)."""
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    # sorted: the split depends on the edge set only, not its storage order
    return np.unique(pair_keys(ei[0], ei[1], int(num_nodes))[ei[0] != ei[1]])


def edge_split(edge_index: ArrayInput, num_nodes: int, seed: int = 0,
               fractions: Sequence[float] = tuple(LinkSection().fractions),
               num_neg_per_pos: int = LinkSection.num_neg_per_pos) -> EdgeSplit:
    """Seeded link-prediction split of an undirected graph.

    Protocol:

    1. ``edge_index`` ``[2, E]`` stores each undirected edge in both directions;
       it is reduced to unique unordered pairs ``u < v`` (sorted), and self
       loops are dropped: they are never prediction targets.
    2. Those pairs are split with :func:`random_split` ``(fractions, seed)``: val
       and test get ``floor(P * fraction)`` pairs, train the rest. Training pairs
       are returned in both directions as the message-passing structure; val and
       test pairs never appear in it, in either direction.
    3. Val then test negatives are drawn once, from a generator seeded by
       ``(seed, 1)``: ``num_neg_per_pos`` per positive, uniformly among unordered
       pairs ``u != v`` that are not edges of the *full* graph, without
       repeats across val and test (rejection sampling). They are fixed for a
       seed, so every epoch and every model is scored on the same pairs.

    Raises:
        ValueError: the graph has too few non-edges for the requested negatives.
    """
    ei = np.ascontiguousarray(_as_numpy(edge_index), dtype=np.int64).reshape(2, -1)
    n = int(num_nodes)
    if num_neg_per_pos < 1:
        raise ValueError(f"num_neg_per_pos must be at least 1, got {num_neg_per_pos}")
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"edge_index holds node ids outside [0, {n})")
    keys = edge_pair_keys(ei, n)
    split = random_split(len(keys), fractions, seed=seed)

    def pairs(k: np.ndarray) -> np.ndarray:
        return np.stack([k // n, k % n]).astype(np.int64)

    train = pairs(keys[split.train])
    val_pos, test_pos = pairs(keys[split.val]), pairs(keys[split.test])
    n_val, n_test = val_pos.shape[1] * num_neg_per_pos, test_pos.shape[1] * num_neg_per_pos
    free = n * (n - 1) // 2 - len(keys)
    if n_val + n_test > free:
        raise ValueError(f"need {n_val + n_test} negative pairs but the graph has only {free} non-edges")
    rng = np.random.default_rng((seed, 1))
    val_neg = sample_negatives(n_val, n, keys, rng)
    test_neg = sample_negatives(n_test, n, np.concatenate([keys, val_neg]), rng)
    return EdgeSplit(train_edge_index=np.concatenate([train, train[::-1]], axis=1),
                     val_pos=val_pos, val_neg=pairs(val_neg), test_pos=test_pos, test_neg=pairs(test_neg),
                     num_nodes=n, seed=seed, num_neg_per_pos=num_neg_per_pos)


def split_name(prefix: str, fractions: Sequence[float]) -> str:
    """``prefix`` + fractions in percent, e.g. ``split_name("edge-", (0.85, 0.05, 0.1))`` -> ``edge-85-5-10``."""
    return prefix + "-".join(f"{100 * f:g}" for f in fractions)


def index_batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled chunks of ``range(n)``; one unshuffled chunk for ``batch_size <= 0``.

    Used by the pair tasks to batch training pairs or rows; ``rng`` comes from
    ``(seed, epoch)`` so a resumed run draws the same batches.
    """
    if batch_size <= 0 or batch_size >= n:
        return [np.arange(n, dtype=np.int64)] if batch_size <= 0 else [rng.permutation(n).astype(np.int64)]
    perm = rng.permutation(n).astype(np.int64)
    return [perm[s:s + batch_size] for s in range(0, n, batch_size)]
