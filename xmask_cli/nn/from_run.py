"""What :meth:`XLogSMaskBlock.from_run <xmask_cli.nn.XLogSMaskBlock.from_run>` reads: a run's block and its switches.

The settings come from the run's own model config (:class:`~xmask_cli.model.model_config.ModelConfig`),
the same fields :class:`~xmask_cli.model.network.XMaskNet` builds its blocks from, so the public block is
the run's block: same switches, same parameter names and shapes, same outputs.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from xmask_cli import arguments as args
from xmask_cli.errors import UsageError
from xmask_cli.model.biases.stack import BiasSpec
from xmask_cli.model.model_config import ModelConfig

__all__ = ["block_settings", "loaded_run"]


def loaded_run(run: Any, load: Mapping[str, Any]) -> Any:
    """``run`` itself when it is a loaded run (has a trained ``model``), else the folder read by ``load_run(run,
    **load)``."""
    if hasattr(run, "model") and isinstance(getattr(run.model, "cfg", None), ModelConfig):
        return run
    if isinstance(run, (str, os.PathLike)):
        from xmask_cli.api import load_run  # the API reads the run (config, best.pt, data) as `xmask eval` does

        return load_run(run, **load)
    raise UsageError(f"run: expected a run folder or a LoadedRun (xmask_cli.load_run); got {type(run).__name__}")


def _powers(cfg: ModelConfig, powers: Sequence[int] | None) -> list[int]:
    """Per head, its power (resolved by ModelConfig); 0 (a plain head) for every head of a run without the log
    mask (``use_bias: false``)."""
    given = [int(k) for k in powers or ()]
    return given if cfg.use_bias else [0] * len(given)


def block_settings(model: Any, layer: int | str) -> tuple[dict[str, Any], torch.nn.Module]:
    """``XLogSMaskBlock`` keywords that rebuild block ``layer`` of ``model`` (an ``XMaskNet``), and that block."""
    cfg: ModelConfig = model.cfg
    shared = {"attn_dropout": cfg.attn_dropout, "layer_dropout": cfg.layer_dropout, "mask_scale": cfg.mask_scale,
              "eps": cfg.eps, "outside_support": cfg.outside_support}
    if layer == "output":
        if model.out_block is None:
            raise UsageError("layer: 'output' is the attention output layer, and this run's output is an MLP head "
                             f"(model.output=mlp); its blocks are 0..{cfg.layers - 1}")
        return {"in_channels": cfg.hidden, "out_channels": cfg.out_dim, "heads": cfg.output_heads,
                "head_powers": _powers(cfg, cfg.output_powers), "combine": "mean", "residual": False,
                "norm": "none", "ffn": False, "dropout": 0.0, **shared}, model.out_block
    index = args.int_arg("layer", layer, minimum=0)
    if index >= cfg.layers:
        raise UsageError(f"layer: expected a block of the run, 0..{cfg.layers - 1} or 'output'; got {index}")
    if cfg.experts:
        raise UsageError(f"run: its blocks attend with M3Dphormer's experts ({', '.join(cfg.experts)}; model.experts) "
                         f"over token masks, which XLogSMaskBlock does not compute")
    specs = [BiasSpec.of(b) for b in cfg.biases]
    served = [b.type for b in specs if index + 1 in b.placement(cfg.heads, cfg.layers)[1]]
    if served:
        raise UsageError(f"layer: block {index} adds learned {', '.join(served)} biases (model.biases), which read "
                         f"structure AddLogSMask does not compute; XLogSMaskBlock rebuilds blocks without them")
    in_channels = cfg.in_dim if index == 0 and cfg.encoder == "none" else cfg.hidden
    return {"in_channels": in_channels, "out_channels": cfg.hidden, "heads": cfg.heads,
            "head_powers": _powers(cfg, cfg.head_powers), "ffn": cfg.ffn, "ffn_mult": cfg.ffn_mult,
            "residual": cfg.residual, "norm": cfg.norm, "activation": cfg.activation, "combine": cfg.combine,
            "dropout": cfg.dropout, **shared}, model.blocks[index]
