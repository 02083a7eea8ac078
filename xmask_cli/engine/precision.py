"""Mixed precision for training and scoring (``train.precision``).

``fp32`` runs as before. ``bf16`` and ``fp16`` run the model's forward under
``torch.autocast`` on the training device (matmuls and linears in the low
precision); ``fp16`` also scales the loss with a ``GradScaler`` so small
gradients do not underflow (bf16 has float32's exponent range and needs none).

What stays in float32 whatever the precision, and where:

- the X-LogSMask term ``log(Â^k + eps)``: computed from the float32 cached
  powers in :class:`~xmask_cli.model.logsmask.XLogSMaskBias` (``torch.log`` is not
  an autocast op, so it runs in its input's float32); ``eps = 1e-30`` and
  powers below ``6e-8`` would flush to 0 in float16 and give ``-inf``. The
  finished term (``>= log(eps) ≈ -69``) is representable in bf16/fp16 and is
  cast only where it meets ``q·k`` in the dense path's SDPA mask;
- the sparse path's logits, softmax and aggregation
  (:func:`~xmask_cli.model.attention.csr.csr_attention` runs with autocast
  off, in float32);
- the dense path's softmax: SDPA accumulates its softmax in float32 for
  bf16/fp16 inputs (CPU and CUDA kernels alike);
- the loss (autocast computes ``cross_entropy`` in float32) and the
  optimiser's parameters and state (autocast never changes parameters).
"""
from __future__ import annotations

import contextlib

import torch

from xmask_cli.engine.checkpoint import ScalerState
from xmask_cli.errors import UsageError

__all__ = ["PRECISIONS", "Precision", "autocast", "grad_scaler", "check_precision"]

#: Values of ``train.precision``.
PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _device_type(device: str | torch.device) -> str:
    return torch.device(device).type


def check_precision(precision: str, device: str | torch.device) -> None:
    """Refuse a precision this device's autocast cannot run (:class:`UsageError`, exit 2)."""
    if precision not in PRECISIONS:
        raise UsageError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return
    kind = _device_type(device)
    if not torch.amp.autocast_mode.is_autocast_available(kind):
        raise UsageError(f"train.precision={precision} needs torch.autocast, which device type {kind!r} lacks; "
                         f"use train.precision=fp32")
    try:
        with torch.autocast(kind, dtype=_DTYPES[precision]):
            pass
    except (RuntimeError, ValueError) as exc:  # autocast refuses the dtype on this device (it warns or raises)
        raise UsageError(f"train.precision={precision} is not supported by torch.autocast on {kind} "
                         f"({str(exc).splitlines()[0]}); use train.precision=fp32 or bf16") from None


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager[None]:
    """The context to run forwards in: ``torch.autocast`` for bf16/fp16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(_device_type(device), dtype=_DTYPES[precision])


def grad_scaler(precision: str, device: str | torch.device) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for fp16 (float16 gradients underflow without one); None otherwise."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(_device_type(device))


class Precision:
    """``train.precision`` on one device: the context forwards run in and, for fp16, the gradient scaler.

    One object for what a training step does differently by precision (scale the loss, unscale before
    clipping, step through the scaler, keep the scaler's state in ``last.pt``), so the loop never asks which.
    """

    def __init__(self, precision: str = "fp32", device: str | torch.device = "cpu"):
        self.name = precision
        self.device = device
        self.scaler = grad_scaler(precision, device)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """:func:`autocast` of this precision and device."""
        return autocast(self.name, self.device)

    @property
    def skips_overflow(self) -> bool:
        """True when a non-finite gradient is the scaler's overflow: it skips the step and lowers its scale."""
        return self.scaler is not None

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, the loss scaled first under fp16."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring scaled gradients back to their true size (before clipping reads their norm)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step (through the scaler, which skips it on an overflow and updates its scale)."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def state(self) -> ScalerState:
        """What a checkpoint keeps: the scaler's state under ``"scaler"`` (nothing without a scaler)."""
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load(self, ckpt: ScalerState) -> None:
        """Take the scaler's state back from ``ckpt`` where both have one."""
        if self.scaler is not None and "scaler" in ckpt:
            self.scaler.load_state_dict(ckpt["scaler"])
