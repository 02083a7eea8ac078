"""The full graph transformer: input encoder, X-LogSMask blocks, task head.

Dense path: a padded batch (``x [B, N, F]``, ``powers [B, K, N, N]``, ``mask [B, N]``). Sparse path: one graph or a
disjoint union of graphs given as attended pairs (``edge_index [2, E]``, ``values [E, K]``) plus an optional
PyG-style ``batch`` vector. Given the same structure both compute the same numbers to float rounding under
``outside_support='hard'`` (pairs outside a head's stored support weigh 0 on both; plain heads attend over the whole
graph on both). ``outside_support='eps'`` is the literal dense formula and only the dense path computes it: the
sparse path refuses it, as it refuses a learned bias on a plain head (see :func:`sparse_refusal`). The packed graph
path (``model/packed_path.py``), the M3Dphormer token path (``model/token_path.py``) and the memoised masks
(``model/mask_memo.py``) are parts it holds, each called with what it runs.
:meth:`XMaskNet.forward` takes the typed batches of ``model/batches.py``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor

from xmask_cli.model.archs import get_arch
from xmask_cli.model.attention.ops import complete_pairs, feature_dropout
from xmask_cli.model.batches import DenseBatch, LogPairs, ModelBatch, PackedBatch, SparseBatch, TokenBatch
from xmask_cli.model.biases.stack import BiasSpec, BiasStack
from xmask_cli.model.experts import HierarchicalMasks
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import DenseStructure, XLogSMaskBias
from xmask_cli.model.mask_memo import MaskMemo

# The hyper-parameters live in model_config.py; re-exported so ``from xmask_cli.model.network import ModelConfig`` works.
from xmask_cli.model.model_config import (
    ENCODERS,
    READOUTS,
    TASKS,
    ModelConfig,
    head_labels,
    plain_heads,
    sparse_refusal,
)
from xmask_cli.model.packed_path import PackedForward
from xmask_cli.model.packing import PackedGraphs, padded_dropout
from xmask_cli.model.patch import PatchEncoder
from xmask_cli.model.readout import readout_dense, readout_packed, readout_sparse
from xmask_cli.model.token_path import TokenForward

__all__ = ["ENCODERS", "READOUTS", "TASKS", "ModelConfig", "XMaskNet", "head_labels", "plain_heads", "sparse_refusal"]


class XMaskNet(torch.nn.Module):
    """Graph transformer with the X-LogSMask structural bias.

    The architecture ``cfg.arch`` names (:mod:`~xmask_cli.model.archs`: transformer, gat, experts, vit, gps)
    builds the encoder, the blocks and the output; this class runs them, on every path, with the same
    attention, X-LogSMask term, learned biases and readouts.

    encoder -> ``layers`` x :class:`TransformerBlock` (all sharing one parameter-free :class:`XLogSMaskBias`) -> task
    head. The graph head reads out over real nodes only, then applies an MLP; the node head is the same MLP applied
    per node, or (``output='attention'``, node task) a last X-LogSMask attention layer, :attr:`out_block`:
    ``output_heads`` heads of width ``out_dim`` over ``Â^{output_powers}`` (its own parameter-free bias,
    :attr:`out_bias`), averaged over heads, as GAT's last layer. It runs on the same :class:`StructuralAttention` code
    as the blocks, dense and sparse.

    Args:
        cfg: the :class:`ModelConfig`.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        arch = get_arch(cfg.arch)  # the builder of the named architecture: its encoder, blocks and output
        self.encoder = arch.init_encoder(cfg)  # the bias below: parameter-free, one instance serves every layer
        self.bias = XLogSMaskBias(cfg.heads, cfg.head_powers, cfg.eps, cfg.outside_support) if cfg.use_bias else None
        # Learned biases: parameters per layer, so they are added to the shared mask layer by layer.
        specs = cast(Sequence[BiasSpec], cfg.biases)  # ModelConfig holds them as BiasSpec
        self.learned = (BiasStack(specs, cfg.heads, cfg.layers, cfg.rrwp_dim, cfg.edge_encoding, cfg.edge_dims)
                        if cfg.biases else None)
        # A ModuleList (registered as the blocks' parent), read as the blocks it holds.
        self.blocks = cast(Sequence[TransformerBlock],
                           torch.nn.ModuleList(arch.init_block(cfg, i) for i in range(cfg.layers)))
        self.head, self.out_block, self.out_bias = arch.init_output(cfg)  # typed by archs.base.Output
        # Parts without parameters (plain objects, so the state dict is the modules' alone).
        self.memo = MaskMemo()  # the last X-LogSMask mask and sparse bias, reused while their inputs stay the same
        self.packed_path = PackedForward()  # graph level, packed: its pair / grid settings are its state
        self.token_path = TokenForward()  # M3Dphormer's expert blocks over tokens

    def _dense_attn_mask(self, powers: Tensor | None, mask: Tensor, dtype: torch.dtype,
                         which: str = "blocks") -> Tensor | None:
        """The shared SDPA mask of the blocks (``which='output'``: of the attention output layer), memoised."""
        if which == "output":
            bias, attn = self.out_bias, (self.out_block.attn if self.out_block is not None else None)
        else:
            bias, attn = self.bias, (self.blocks[0].attn if len(self.blocks) else None)
        return self.memo.dense_attn_mask(bias, attn, powers, mask, dtype, which)

    def _sparse_bias(self, bias: XLogSMaskBias, edge_index: Tensor, values: Tensor, which: str) -> Tensor:
        """``[E, H]`` X-LogSMask bias at the pairs, memoised (see :class:`MaskMemo`)."""
        return self.memo.sparse_bias(bias, edge_index, values, which)

    def _drop_input(self, x: Tensor) -> Tensor:
        # Atom ids are categorical: dropping them to 0 would change the atom, not regularise.
        if self.cfg.input_dropout > 0 and self.cfg.encoder in ("linear", "none"):
            return feature_dropout(x, self.cfg.input_dropout, self.training)
        return x

    def embed(self, x: Tensor, keep_sparse: bool = False) -> Tensor:
        """Input dropout and encoder of ``[n, F]`` features, dense or a sparse COO tensor.

        Sparse bag-of-words features (Coauthor Physics: 0.4 % non-zero of 8,415 columns) are encoded as a sparse
        product, ``x @ W^T + b``; dropout then acts on the stored entries only, which is the same distribution as
        dense dropout (a zero stays zero either way). With ``encoder='none'`` the features go to the first block as
        they are: a sparse ``x`` stays sparse when ``keep_sparse`` (the sparse full-graph path, whose first q, k, v
        maps read it as a sparse product), else it is made dense.
        """
        if self.cfg.encoder == "none":  # the first block's q, k, v read the features themselves
            return self._drop_input(x if keep_sparse or not x.is_sparse else x.to_dense())
        if not x.is_sparse:
            return self.encoder(self._drop_input(x))
        if self.cfg.encoder != "linear":
            raise ValueError("sparse input features need model.encoder=linear")  # config_resolve refuses it first
        x = self._drop_input(x)
        linear = cast(torch.nn.Linear, self.encoder)
        return torch.sparse.mm(x, linear.weight.t()) + linear.bias

    # ------------------------------------------------------------------ dense
    def encode_dense(self, x: Tensor, powers: Tensor | None, mask: Tensor | None = None,
                     return_terms: bool | Callable[[dict[str, Tensor]], Any] = False,
                     extras: Mapping[str, Tensor] | None = None,
                     ) -> Tensor | tuple[Tensor, list[Any]]:
        """Node embeddings ``[B, N, hidden]`` of a padded batch (padded rows zeroed).

        Args:
            x: ``[B, N, F]`` node features.
            powers: ``[B, K, N, N]`` ``Â^1..Â^K``; may be None when ``use_bias=False``.
            mask: ``[B, N]`` bool, True for real nodes; None means all real.
            return_terms: also return every layer's attention terms (``[B, H, N, N]``
                ``energy``, ``structural``, ``logits``, ``attention``; see
                :meth:`StructuralAttention.forward_dense`) of this very forward:
                the blocks still attend with the masks they train with. A callable
                instead of True receives each layer's terms as soon as the layer
                has run, and its result is kept in their place: a caller that
                needs a crop or a summary of ``[B, H, N, N]`` maps then never
                holds every layer's maps at once (explain on large graphs).
            extras: dense structure the learned biases read (``spd``, ``rrwp``,
                ``eig_*``, ``mag_*``; see :mod:`~xmask_cli.model.biases`).

        Image level (``encoder='patch'``): ``x`` is ``[B, C, H, W]``, ``powers`` the
        grid's ``[1 or B, K, N, N]`` (one grid for every image: broadcast, not
        copied), ``mask`` is ignored, and ``h`` is ``[B, T, hidden]`` over the
        tokens (class token first; see :mod:`~xmask_cli.model.patch`).

        Returns:
            ``h``, or ``(h, [terms of layer 0, layer 1, ...])`` with ``return_terms``.
        """
        drop = None
        if self.cfg.encoder == "patch":
            patches = cast(PatchEncoder, self.encoder)
            h, powers = patches(x), patches.token_powers(powers)
            mask = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
        else:
            if mask is None:
                mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
            # Zero padded inputs: attention gives padded keys weight exactly 0, but 0 * inf/nan is nan.
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
            if self._draws_real_rows():  # a graph batch: dropout over its real rows, as the packed layout draws it
                drop = padded_dropout(mask)
                if self.cfg.input_dropout > 0 and self.cfg.encoder in ("linear", "none"):
                    x = drop(x, self.cfg.input_dropout, self.training)
                h = self.encoder(x)
            else:
                h = self.encoder(self._drop_input(x))
        keep = mask.unsqueeze(-1)
        shared = self._dense_attn_mask(powers, mask, h.dtype)
        xlog = None
        if return_terms and self.bias is not None:
            if powers is None:
                raise ValueError("use_bias=True needs `powers` [B, K, N, N]")
            xlog = self.bias(DenseStructure(powers=powers, mask=mask))
        layers, local = [], get_arch(self.cfg.arch).block_inputs(extras)  # gps: the batch's edges
        for i, block in enumerate(self.blocks):
            learned = self._learned(i, extras, mask=mask)
            attn_mask = shared
            if learned is not None:
                # Learned biases enter after the 1/sqrt(d_h) scaling, whatever mask_scale (GTLM, paper 002 Eq. 1).
                term = learned.to(h.dtype)
                attn_mask = term if shared is None else shared + term
            if return_terms:
                # The blocks attend with `attn_mask` as is; the biases only feed the recorded structural term.
                h, terms = block(h, xlog, mask, attn_mask=attn_mask, return_terms=True, learned=learned, drop=drop,
                                 **local)
                layers.append(return_terms(terms) if callable(return_terms) else terms)
                del terms  # with a reducing callable, this layer's maps are free before the next layer runs
            else:
                h = block(h, None, mask, attn_mask=attn_mask, drop=drop, **local)
        h = h.masked_fill(~keep, 0.0)
        return (h, layers) if return_terms else h

    def _draws_real_rows(self) -> bool:
        """Whether the dense path draws dropout over real rows only (:func:`~xmask_cli.model.packing.padded_dropout`):
        graph batches of one attention, whose packed layout draws the same masks."""
        return self.cfg.task == "graph" and not self.cfg.experts and self.cfg.encoder != "patch"

    def _learned(self, layer: int, extras: Mapping[str, Tensor] | None, mask: Tensor | None = None,
                 edge_index: Tensor | None = None) -> Tensor | None:
        """Layer ``layer``'s learned bias, or None without any."""
        if self.learned is None or not self.learned.has(layer):
            return None
        if extras is None:
            raise ValueError(f"the model has learned biases ({sorted(self.cfg.needs)}) but the batch carries no extras")
        return self.learned(layer, extras, mask=mask, edge_index=edge_index)

    def head_labels(self, layer: int) -> list[str]:
        """What each head of ``layer`` (0-based) adds to its logits; see :func:`head_labels`."""
        return head_labels(self.cfg)[layer]

    def _mlp_head(self) -> torch.nn.Module:
        if self.head is None:
            raise ValueError("this model's output is an attention layer (model.output=attention), not an MLP head")
        return self.head

    def output_dense(self, h: Tensor, powers: Tensor | None, mask: Tensor) -> Tensor:
        """``[B, N, out_dim]`` node outputs of embeddings ``h`` (zero on padded rows): the head MLP or the output attention."""
        if self.out_block is None:
            out = self._mlp_head()(h)
        else:
            attn_mask = self._dense_attn_mask(powers, mask, h.dtype, which="output")
            out = self.out_block(h, None, mask, attn_mask=attn_mask)
        return out.masked_fill(~mask.unsqueeze(-1), 0.0)

    def output_sparse(self, h: Tensor, edge_index: Tensor, values: Tensor | None = None,
                      batch: Tensor | None = None) -> Tensor:
        """``[N, out_dim]`` node outputs of embeddings ``h [N, hidden]``: the head MLP, or the output attention over the pairs."""
        if self.out_block is None:
            return self._mlp_head()(h)
        bias = None
        if self.out_bias is not None:
            if values is None:
                raise ValueError("use_bias=True needs `values` [E, K]")
            bias = self._sparse_bias(self.out_bias, edge_index, values, "output")
        complete = complete_pairs(edge_index, h.size(0), batch)
        return self.out_block(h, bias, edge_index=edge_index, groups=batch, complete=complete)

    def graph_head(self, pooled: Tensor) -> Tensor:
        """``[G, out_dim]`` from ``[G, hidden]`` pooled features: times ``readout_scale``, then the head MLP."""
        if self.cfg.readout_scale != 1.0:
            pooled = pooled * self.cfg.readout_scale
        return self._mlp_head()(pooled)

    def readout_dense(self, h: Tensor, mask: Tensor) -> Tensor:
        """``[B, hidden]`` sum/mean/max of ``h [B, N, hidden]`` over real nodes only."""
        return readout_dense(h, mask, self.cfg.readout)

    def readout_image(self, h: Tensor) -> Tensor:
        """``[B, hidden]`` of image tokens ``h [B, T, hidden]``: the class token, or sum/mean/max over patches."""
        if self.cfg.readout == "cls":
            return h[:, 0]
        patches = h[:, self.encoder.offset:]
        return self.readout_dense(patches, torch.ones(patches.shape[:2], dtype=torch.bool, device=h.device))

    def forward_dense(self, x: Tensor, powers: Tensor | None, mask: Tensor | None = None,
                      extras: Mapping[str, Tensor] | None = None) -> Tensor:
        """Padded batch -> ``[B, out_dim]`` (graph task) or ``[B, N, out_dim]`` (node task).

        Node outputs are zero on padded rows. ``extras``: see :meth:`encode_dense`.
        """
        self._no_pair_task()
        if self.cfg.task == "image":
            return self._mlp_head()(self.readout_image(cast(Tensor, self.encode_dense(x, powers))))
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        h = cast(Tensor, self.encode_dense(x, powers, mask, extras=extras))  # a Tensor without return_terms
        if self.cfg.task == "graph":
            return self.graph_head(self.readout_dense(h, mask))
        return self.output_dense(h, powers, mask)

    # ----------------------------------------------------------------- sparse
    def encode_sparse(self, x: Tensor, edge_index: Tensor, values: Tensor | None = None,
                      return_terms: bool = False, extras: Mapping[str, Tensor] | None = None,
                      batch: Tensor | None = None,
                      ) -> Tensor | tuple[Tensor, list[dict[str, Tensor]]]:
        """Node embeddings ``[N, hidden]`` attending over the pairs ``edge_index`` (plain heads: every node).

        Heads with a structural mask attend over the given pairs (``-inf`` at those outside their own support); plain
        heads over every node of the graph (of its graph in ``batch``).

        Args:
            x: ``[N, F]`` node features (one graph or a disjoint union), dense or a sparse COO tensor (:meth:`embed`).
            edge_index: ``[2, E]`` attended pairs, row = query, col = key.
            values: ``[E, K]`` ``Â^1..Â^K`` at each pair; may be None when ``use_bias=False``.
            return_terms: also return every layer's attention terms (``[E, H]`` per
                pair; see :meth:`StructuralAttention.forward_sparse`).
            extras: sparse structure the learned biases read (``spd [E]``,
                ``rrwp [E, S]``, per-node ``eig_*`` / ``mag_*``).
            batch: ``[N]`` graph of each node of a disjoint union; None: one graph.

        Pairs must be unique and not cross graphs. When they are every pair of the domain (``Σ n_g^2``), this is the
        dense formula exactly, whatever the settings; otherwise plain heads attend over every node through
        :func:`~xmask_cli.model.attention.ops.plain_attention`.

        Returns:
            ``h``, or ``(h, [terms of layer 0, layer 1, ...])`` with ``return_terms``.

        Raises:
            ValueError: the pairs are not complete and the model cannot run
                sparse (:func:`sparse_refusal`).
        """
        # Every pair of the domain given: the dense formula, whatever the settings; otherwise check them.
        complete = complete_pairs(edge_index, x.size(0), batch)
        if not complete:
            refusal = sparse_refusal(self.cfg)
            if refusal is not None:
                raise ValueError(f"sparse attention path refused: {refusal}")
        h = self.embed(x, keep_sparse=True)  # dense features as encoder(dropout(x)); sparse ones as a sparse product
        xlog = None
        if self.bias is not None:
            if values is None:
                raise ValueError("use_bias=True needs `values` [E, K]")
            xlog = self._sparse_bias(self.bias, edge_index, values, "blocks")
        layers = []
        for i, block in enumerate(self.blocks):
            learned = self._learned(i, extras, edge_index=edge_index)
            if return_terms:
                h, terms = block(h, xlog, edge_index=edge_index, return_terms=True, groups=batch,
                                 complete=complete, learned=learned)
                layers.append(terms)
            else:
                h = block(h, xlog, edge_index=edge_index, groups=batch, complete=complete, learned=learned)
        return (h, layers) if return_terms else h

    def readout_sparse(self, h: Tensor, batch: Tensor | None = None, num_graphs: int | None = None) -> Tensor:
        """``[G, hidden]`` sum/mean/max of ``h [N, hidden]`` per graph of ``batch`` (None: one graph)."""
        return readout_sparse(h, batch, num_graphs, self.cfg.readout)

    def forward_sparse(self, x: Tensor, edge_index: Tensor, values: Tensor | None = None, batch: Tensor | None = None,
                       num_graphs: int | None = None, extras: Mapping[str, Tensor] | None = None) -> Tensor:
        """Pairs-only forward -> ``[N, out_dim]`` (node task) or ``[G, out_dim]`` (graph task).

        Args:
            x, edge_index, values: see :meth:`encode_sparse`. Pairs must not cross graphs; nothing else separates them.
            batch: ``[N]`` graph of each node (graph task); None means one graph.
            num_graphs: ``G``; default ``batch.max() + 1``.
        """
        self._no_pair_task()
        h = cast(Tensor, self.encode_sparse(x, edge_index, values, extras=extras, batch=batch))
        if self.cfg.task == "graph":
            return self.graph_head(self.readout_sparse(h, batch, num_graphs))
        return self.output_sparse(h, edge_index, values, batch)

    # ----------------------------------------------------------------- packed
    def packs(self) -> bool:
        """Whether :meth:`forward` runs graph batches packed (``graph_layout='packed'``, graph task, one attention)."""
        return PackedForward.runs(self.cfg)

    def encode_packed(self, x: Tensor, mask: Tensor, powers: Tensor | None = None,
                      log_powers: LogPairs | Sequence[Tensor] | None = None, log_spec: tuple | None = None,
                      extras: Mapping[str, Tensor] | None = None) -> tuple[Tensor, PackedGraphs]:
        """Embeddings ``[n, hidden]`` of a padded batch's real nodes, and its packing: the real rows of
        :meth:`encode_dense`'s numbers, attention per group of similar-sized graphs (:meth:`PackedForward.encode`)."""
        return self.packed_path.encode(x, mask, powers, log_powers, log_spec, extras, cfg=self.cfg,
                                       training=self.training, encoder=self.encoder, blocks=self.blocks,
                                       bias=self.bias, learned=self._learned)

    def readout_packed(self, h: Tensor, packed: PackedGraphs) -> Tensor:
        """``[B, hidden]`` sum/mean/max of packed rows ``h [n, hidden]`` per graph (an empty graph gives 0)."""
        return readout_packed(h, packed, self.cfg.readout)

    def forward_packed(self, x: Tensor, mask: Tensor, powers: Tensor | None = None,
                       log_powers: LogPairs | Sequence[Tensor] | None = None, log_spec: tuple | None = None,
                       extras: Mapping[str, Tensor] | None = None) -> Tensor:
        """Graph task, packed: ``[B, out_dim]``, the numbers of :meth:`forward_dense` (see :meth:`encode_packed`)."""
        self._no_pair_task()
        if self.cfg.task != "graph":
            raise ValueError(f"the packed layout is for the graph task, not {self.cfg.task!r}")
        h, packed = self.encode_packed(x, mask, powers, log_powers, log_spec, extras)
        return self.graph_head(self.readout_packed(h, packed))

    # ----------------------------------------------------------------- tokens
    def encode_tokens(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                      regions: dict | None = None) -> Tensor:
        """M3Dphormer: ``[N + P + C, hidden]`` embeddings of real and virtual tokens (:meth:`TokenForward.run`)."""
        if not self.cfg.experts:
            raise ValueError("encode_tokens needs a model with attention experts (model.experts)")
        return self.token_path.run(self.encoder(self._drop_input(x)), masks, local_values, regions,
                                   blocks=self.blocks, bias=self.bias, mode=self.cfg.expert_attention)

    def forward_tokens(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                       regions: dict | None = None) -> Tensor:
        """``[N + P + C, out_dim]`` logits of every token (see :meth:`encode_tokens`)."""
        return self._mlp_head()(self.encode_tokens(x, masks, local_values, regions))

    def forward_token_batch(self, batch: TokenBatch) -> Tensor:
        """:meth:`forward_tokens` of a :class:`TokenBatch`; its dual-mode regions planned once per head width."""
        head_dim = self.cfg.hidden // self.cfg.heads
        if self.cfg.expert_attention == "dual" and head_dim not in batch.regions:
            batch.regions[head_dim] = batch.masks.plan(head_dim)
        return self.forward_tokens(batch.x, batch.masks, batch.values if self.cfg.use_bias else None,
                                   regions=batch.regions.get(head_dim))

    def routing_weights(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                        regions: dict | None = None) -> list[Tensor]:
        """Per block, the ``[T, n_experts]`` expert weights each token's router gives (inspection)."""
        if not self.cfg.experts:
            raise ValueError("routing_weights needs a model with attention experts (model.experts)")
        return self.token_path.routing_weights(self.encoder(x), masks, local_values, regions, blocks=self.blocks,
                                               bias=self.bias, mode=self.cfg.expert_attention)

    # ------------------------------------------------------------------ pairs
    def _no_pair_task(self) -> None:
        if self.cfg.task in ("link", "edge"):
            raise ValueError(f"task {self.cfg.task!r} scores pairs: call encode_* then score_pairs")

    def score_pairs(self, h: Tensor, pairs: Tensor) -> Tensor:
        """``[P, out_dim]`` scores of node pairs from node embeddings (link / edge tasks).

        Args:
            h: ``[N, hidden]`` node embeddings (:meth:`encode_sparse`, or one
                graph of :meth:`encode_dense` squeezed).
            pairs: ``[2, P]`` long node ids ``(u, v)``.
        """
        hu, hv = h[pairs[0]], h[pairs[1]]
        return self._mlp_head()(torch.cat([hu * hv, hu + hv], dim=-1))

    # ---------------------------------------------------------------- generic
    def forward(self, batch: ModelBatch) -> Tensor:
        """The forward of the path ``batch``'s type names (:mod:`~xmask_cli.model.batches`).

        A graph task with ``graph_layout='packed'`` runs a padded batch (dense
        powers or per-graph log-powers) through :meth:`forward_packed`.
        """
        if isinstance(batch, SparseBatch):
            return self.forward_sparse(batch.x, batch.edge_index, batch.values, batch.batch, batch.num_graphs,
                                       extras=batch.extras)
        if isinstance(batch, TokenBatch):
            return self.forward_token_batch(batch)
        if isinstance(batch, PackedBatch):
            if self.packs():
                return self.forward_packed(batch.x, batch.mask, None, batch.log_powers, batch.log_spec,
                                           extras=batch.extras)
            if self.bias is not None:
                raise ValueError("the padded layout (model.graph_layout=padded) needs `powers` [B, K, N, N]; "
                                 "this batch carries per-graph log-powers (a packed stream)")
            return self.forward_dense(batch.x, None, batch.mask, extras=batch.extras)
        if isinstance(batch, DenseBatch):
            if not self.packs():
                return self.forward_dense(batch.x, batch.powers, batch.mask, extras=batch.extras)
            mask = batch.mask if batch.mask is not None else torch.ones(batch.x.shape[:2], dtype=torch.bool,
                                                                        device=batch.x.device)
            return self.forward_packed(batch.x, mask, batch.powers, extras=batch.extras)
        raise TypeError(f"XMaskNet.forward takes a DenseBatch, PackedBatch, SparseBatch or TokenBatch "
                        f"(xmask_cli.model.batches), got {type(batch).__name__}")
