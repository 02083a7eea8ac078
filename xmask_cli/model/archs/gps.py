"""``model.arch: gps``: GraphGPS's layer, local GIN(E) message passing beside the X-LogSMask attention."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from xmask_cli.model.archs.base import Architecture
from xmask_cli.model.gps import EdgeEncoder, GpsBlock, LocalMessage, carries_attributes, padded_edges
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.packing import PackedGraphs


class Gps(Architecture):
    """Each layer: PyG's ``GINEConv`` on the batch's real edges (bond features encoded per layer; ``GINConv``
    on edges without attributes) beside the structural attention, each with its residual and norm, summed,
    then the ``ffn_mult``-wide feed-forward layer and ``activation`` (PyG's ``GPSConv``; :mod:`~xmask_cli.model.gps`).
    Graph batches only (padded or packed); the batches carry the cache's edge section."""

    name = "gps"
    KEYS: ClassVar[frozenset[str]] = frozenset({"ffn_mult", "activation"})  # its cache section: config_arch.NEEDS

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """A GraphGPS layer; its own edge encoder (to the block's input width) when the edges carry attributes."""
        settings = self.block_settings(cfg, layer)
        width = settings["in_dim"] or cfg.hidden
        edges = (EdgeEncoder(cfg.edge_encoding, cfg.edge_dims, width, bond=cfg.encoder == "atom")
                 if carries_attributes(cfg.edge_encoding, cfg.edge_dims) else None)
        return GpsBlock(LocalMessage(width, cfg.hidden, edges), **settings, ffn_mult=cfg.ffn_mult,
                        activation=cfg.activation)

    def block_inputs(self, extras: Mapping[str, Tensor] | None, packed: PackedGraphs | None = None) -> dict[str, Any]:
        """The batch's edges (from its ``edge`` extras), over the padded rows or those of ``packed``."""
        edges = padded_edges(extras)
        return {"edges": edges if packed is None else edges.packed(packed)}
