"""One run's optimisation: Adam / AdamW over its parameter groups, the warm-up schedule, and the precision's
gradient scaler (:class:`~xmask_cli.engine.training.precision.Precision`), with what ``last.pt`` keeps of them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from xmask_cli.engine.training.checkpoint import OptimisationState
from xmask_cli.engine.training.precision import Precision
from xmask_cli.engine.training.train_config import TrainConfig
from xmask_cli.errors import UsageError

__all__ = ["FIRST_LAYER", "Optimisation", "decay_groups", "warmup"]

#: Parameter-name prefixes of the first layer (``train.decay: first``): the input encoder and the first block.
FIRST_LAYER = ("encoder.", "blocks.0.")


def warmup(warmup_epochs: int) -> Callable[[int], float]:
    """LambdaLR factor: linear from ``1/warmup`` to 1 over ``warmup`` epochs, then 1."""
    def factor(epoch: int) -> float:
        return 1.0 if warmup_epochs <= 0 else min(1.0, (epoch + 1) / warmup_epochs)
    return factor


def decay_groups(model: torch.nn.Module, decay: str, weight_decay: float) -> list[dict[str, object]]:
    """The optimizer's parameter groups: ``weight_decay`` on the parameters ``decay`` names, 0 on the others.

    ``all``: every parameter; ``first``: the input encoder and the first block (PyG's GCN example decays
    its first layer only); ``weights``: every parameter but biases and LayerNorm parameters.
    """
    if decay == "all":
        return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    norms = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    decayed: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if decay == "first":
            chosen = name.startswith(FIRST_LAYER)
        elif decay == "weights":
            chosen = not name.endswith(".bias") and id(p) not in norms
        else:
            raise UsageError(f"train.decay must be one of all, first, weights, got {decay!r}")
        (decayed if chosen else rest).append(p)
    if not decayed:
        raise UsageError(f"train.decay={decay} chooses no parameter of this model; use train.decay=all")
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@dataclass
class Optimisation:
    """Adam / AdamW, the warm-up schedule and the precision (fp16: its gradient scaler) of one run."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    precision: Precision

    @classmethod
    def build(cls, model: torch.nn.Module, cfg: TrainConfig, precision: Precision | None = None) -> Optimisation:
        """``cfg``'s optimizer and schedule over ``model``; ``precision`` defaults to ``cfg``'s own.

        The multi-tensor (``foreach``) update on every device: the same numbers as the per-parameter loop
        torch picks on a CPU, in a few kernels per step instead of several per parameter (a graph-level
        model holds dozens of small parameters).
        """
        optimizer: torch.optim.Optimizer
        if cfg.optimizer == "adamw" and cfg.decay == "all":
            optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
        else:
            groups = decay_groups(model, cfg.decay, cfg.weight_decay)
            if cfg.optimizer == "adam":  # weight_decay as an L2 penalty: weight_decay * w added to the gradient
                optimizer = torch.optim.Adam(groups, lr=cfg.lr, foreach=True)
            elif cfg.optimizer == "adamw":
                optimizer = torch.optim.AdamW(groups, lr=cfg.lr, foreach=True)
            else:
                raise UsageError(f"train.optimizer must be adamw or adam, got {cfg.optimizer!r}")
        return cls(optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, warmup(cfg.warmup_epochs)),
                   precision if precision is not None else Precision(cfg.precision, cfg.device))

    def state(self) -> OptimisationState:
        """What ``last.pt`` keeps of them."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                **self.precision.state()}

    def load(self, ckpt: OptimisationState) -> None:
        """Take back what :meth:`state` saved."""
        self.optimizer.load_state_dict(ckpt["optimizer"])
        for group in self.optimizer.param_groups:  # a state saved with torch's default keeps the fast update
            group["foreach"] = True
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.precision.load(ckpt)

    def clip(self, model: torch.nn.Module, clip_norm: float) -> str | None:
        """Clip the gradients' norm to ``clip_norm`` (0: no clipping); ``"gradient norm"`` when it is not finite.

        Under fp16 the gradients are unscaled first, and a non-finite norm is the scaler's overflow: the step
        is skipped and the scale lowered, as the scaler is meant to, so that is no divergence.
        """
        self.precision.unscale(self.optimizer)  # clip the true gradients
        if clip_norm <= 0:
            return None
        # Under DDP the gradients are already averaged: every process clips the same norm.
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm, foreach=True)  # the same numbers
        return None if bool(torch.isfinite(norm)) or self.precision.skips_overflow else "gradient norm"

    def step(self) -> None:
        """The optimizer's step (through the scaler under fp16)."""
        self.precision.step(self.optimizer)
