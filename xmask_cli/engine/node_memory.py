"""What ``node.mode: auto`` picks: full-graph steps while one fits ``node.memory_gb``, batches beyond it.

One full-graph step per epoch (every stored pair in one forward and backward) is the fastest way
through an epoch: on Computers 0.5 s against 3.8 s for 16 query batches, at the same accuracy. Query
and partition batches bound memory, at the price of many steps and a whole-graph validation pass per
epoch. ``auto`` therefore estimates the bytes a full-graph training step holds at its peak
(:func:`full_step_memory`, from the cache's stored pairs and the model's shape) and takes ``full``
while the estimate is within ``node.memory_gb`` GiB (:func:`auto_mode`); beyond it, query batches
(partition batches when the model has learned pair biases, which the query path does not carry).

The estimate, in bytes, on a graph of ``N`` nodes with ``E`` stored pairs (the union over the cached
powers ``Â^1..Â^K``) and ``H`` heads:

* **pairs**: the batch's ``E x (16 + 4K)`` (int64 row and column, float32 powers) and the X-LogSMask
  term ``E x 4H`` (float32, made once per forward), plus per attention layer ``E x (16 + H)`` (its CSR
  plan's copy of the pairs and which of them are finite per head): :data:`PAIR_BYTES`;
* **attention**: per attention layer, its entries times :data:`ENTRY_BYTES` (sparse path) or
  :data:`DENSE_ENTRY_BYTES` (dense path). On the sparse path head ``h`` has one entry per stored pair
  where ``Â^{k_h} > 0`` (its own support) and a plain head (``k_h = 0``) one per node pair (``N^2``:
  it attends over every node); on the dense path every head has ``N^2``, and the ``[K, N, N]`` powers
  come on top;
* **activations**: ``N x 4`` bytes times the float32 widths the layers keep for the backward
  (:data:`LAYER_WIDTHS` hidden widths per block plus :data:`FFN_WIDTHS` feed-forward widths, the
  encoder's and the head's), the features' input-dropout copy and mask (:data:`DROPOUT_BYTES` per dense
  entry, ``N x F``, or per stored entry of sparse features), and the parameters with their gradients and
  Adam moments (16 bytes each).

The constants are counted from the code the step runs (:mod:`~xmask_cli.model.attention.csr`, the fused
CPU kernels, the blocks); a measured Computers step is in docs/training.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from xmask_cli.config import ModelSection
from xmask_cli.config_arch import has_ffn

__all__ = ["ENTRY_BYTES", "DENSE_ENTRY_BYTES", "PAIR_BYTES", "LAYER_WIDTHS", "FFN_WIDTHS", "DROPOUT_BYTES", "GIB", "StepShape",
           "FullStepMemory", "step_shape", "pairs_per_power", "full_step_memory", "auto_mode"]

#: Bytes per attention entry of a sparse layer: the CSR plan's int64 entry index, column and row, and the
#: transposed order and column the backward makes (5 x 8), plus the float32 logit term, the attention
#: weight saved for the backward and its gradient (3 x 4).
ENTRY_BYTES = 52
#: Bytes per attention entry of a dense layer (float32 X-LogSMask term, logits, softmax weights and their gradient).
DENSE_ENTRY_BYTES = 16
#: Bytes per stored pair, ``(fixed, per power K, per head H, per attention layer, per head per layer)``:
#: the batch's int64 row and column (16) and float32 powers (4 K), the float32 X-LogSMask term (4 H), and
#: per layer the CSR plan's int64 copy of the pairs (16) and one finiteness byte per head (1 H).
PAIR_BYTES = (16, 4, 4, 16, 1)
#: float32 hidden widths a block keeps per node for the backward: the layer input and its dropout, q, k,
#: v and their per-head stacked copies, the aggregate, the output projection, its dropout, the residual
#: sums and the LayerNorms, with the backward's gradients of the widest of them.
LAYER_WIDTHS = 16
#: float32 feed-forward widths a block keeps per node: the first linear map, its activation and dropout.
FFN_WIDTHS = 4
#: Bytes per feature entry under input dropout: the dropped float32 copy and the float32 mask it was
#: multiplied by (dropout on the CPU keeps its mask as floats).
DROPOUT_BYTES = 8
#: Bytes in one GiB (``node.memory_gb`` counts in GiB, as ``prepare.memory_gb``).
GIB = 1 << 30


@dataclass(frozen=True)
class StepShape:
    """What of the model sets a full-graph step's memory.

    Attributes:
        heads: per attention layer (the blocks, then an attention output layer), the power ``k_h`` of
            each head (0: a plain head, over every node).
        hidden: the blocks' width.
        ffn_width: the feed-forward layer's width (0: attention-only blocks).
        out_dim: the outputs per node.
        input_dropout: dropout on the raw features (a dense feature matrix is then copied with its mask).
        encoder: whether a linear encoder maps the features to ``hidden`` (``model.encoder: none``: the
            first attention's q, k, v read them).
    """

    heads: tuple[tuple[int, ...], ...]
    hidden: int
    ffn_width: int
    out_dim: int
    input_dropout: float = 0.0
    encoder: bool = True

    @property
    def num_heads(self) -> int:
        """``H``: the most heads of any attention layer (the width of the X-LogSMask term)."""
        return max(len(h) for h in self.heads)


def step_shape(model: ModelSection, out_dim: int) -> StepShape:
    """The :class:`StepShape` of the config's ``model`` section with ``out_dim`` outputs per node."""
    powers = tuple(int(k) for k in (model.head_powers or range(1, model.heads + 1)))
    if not model.use_bias:
        powers = (0,) * model.heads
    layers = [powers] * model.layers
    if model.output == "attention":
        out_powers = tuple(int(k) for k in (model.output_powers or [1] * model.output_heads))
        layers.append(out_powers if model.use_bias else (0,) * model.output_heads)
    return StepShape(tuple(layers), model.hidden, model.hidden * model.ffn_mult if has_ffn(model) else 0, out_dim,
                     model.input_dropout, model.encoder != "none")


def pairs_per_power(values: np.ndarray, powers: Sequence[int]) -> dict[int, int]:
    """Stored pairs where ``Â^k > 0``, for each ``k >= 1`` of ``powers`` (``values``: ``[E, K]`` at the pairs).

    A power past the stored ``K`` (a head of the attention experts, whose masks are not powers) counts the
    pairs of ``Â^K``, the widest support stored.
    """
    last = values.shape[1]
    return {k: int(np.count_nonzero(values[:, min(k, last) - 1] > 0)) for k in sorted(set(powers)) if k >= 1}


@dataclass(frozen=True)
class FullStepMemory:
    """The estimated peak bytes of one full-graph training step (see the module docstring).

    Attributes:
        num_nodes: ``N``; stored_pairs: ``E``, the cached pairs (the union over the powers).
        entries: per attention layer, its attention entries (pairs summed over heads; ``H N^2`` dense).
        attention: ``dense`` or ``sparse``, the path the estimate is for.
        pairs, attention_bytes, activations: the three parts, in bytes.
    """

    num_nodes: int
    stored_pairs: int
    entries: tuple[int, ...]
    attention: str
    pairs: int
    attention_bytes: int
    activations: int

    @property
    def total(self) -> int:
        """Bytes of the whole estimate."""
        return self.pairs + self.attention_bytes + self.activations

    def fits(self, memory_gb: float) -> bool:
        """Whether the estimate is within ``memory_gb`` GiB."""
        return self.total <= memory_gb * GIB

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields plus ``total`` (config.json, logs)."""
        return {**asdict(self), "entries": list(self.entries), "total": self.total}


def full_step_memory(num_nodes: int, stored_pairs: int, per_power: Mapping[int, int], num_powers: int,
                     shape: StepShape, in_dim: int, attention: str = "sparse",
                     feature_entries: int | None = None) -> FullStepMemory:
    """Estimated peak bytes of one full-graph training step (the formula of the module docstring).

    Args:
        num_nodes: ``N``. stored_pairs: ``E``. per_power: stored pairs where ``Â^k > 0``, per ``k`` a head
            reads (:func:`pairs_per_power`). num_powers: ``K``, the powers the batch carries.
        shape: the model (:func:`step_shape`). in_dim: ``F``, the feature width.
        attention: ``sparse`` (each head over its own support) or ``dense`` (``N x N`` grids).
        feature_entries: the stored entries when the features are held sparse; None: dense features.
    """
    if attention not in ("sparse", "dense"):
        raise ValueError(f"attention must be 'sparse' or 'dense', got {attention!r}")
    n, e, h, n_layers = int(num_nodes), int(stored_pairs), shape.num_heads, len(shape.heads)
    grid = n * n
    if attention == "dense":
        entries = tuple(len(heads) * grid for heads in shape.heads)
        att = sum(entries) * DENSE_ENTRY_BYTES + num_powers * grid * 4
        pairs = 0
    else:
        entries = tuple(sum(per_power[k] if k >= 1 else grid for k in heads) for heads in shape.heads)
        att = sum(entries) * ENTRY_BYTES
        fixed, per_k, per_h, per_layer, per_layer_head = PAIR_BYTES
        pairs = e * (fixed + per_k * num_powers + per_h * h + n_layers * (per_layer + per_layer_head * h))
    activations = n * 4 * (n_layers * (LAYER_WIDTHS * shape.hidden + FFN_WIDTHS * shape.ffn_width)
                           + 3 * shape.hidden + 2 * shape.out_dim)
    if shape.input_dropout > 0:
        activations += DROPOUT_BYTES * (n * in_dim if feature_entries is None else int(feature_entries))
    first = in_dim * shape.hidden * (1 if shape.encoder else 3)  # encoder none: the first q, k, v read F
    params = first + n_layers * (4 * shape.hidden ** 2 + 2 * shape.hidden * shape.ffn_width)
    activations += 16 * params  # weights, gradients, two Adam moments
    return FullStepMemory(n, e, entries, attention, int(pairs), int(att), int(activations))


def auto_mode(memory: FullStepMemory | None, memory_gb: float, learned_biases: bool) -> str:
    """What ``node.mode: auto`` trains with: ``full`` when ``memory`` fits ``memory_gb`` GiB; beyond it
    ``query`` batches, or ``partition`` with learned pair biases (the query path does not carry them).
    ``memory`` None: no full-graph step is possible (a model refused the sparse path on a large graph)."""
    if memory is not None and memory.fits(memory_gb):
        return "full"
    return "partition" if learned_biases else "query"
