"""The exported programs of a trained :class:`~xmask_cli.model.network.XMaskNet`: which models export, the
wrapper module of each path, and the ``torch.export`` / ONNX calls.

Two paths export, both plain PyTorch operators (no numba kernel, no ``torch.sparse``):

* ``dense``: :meth:`~xmask_cli.model.network.XMaskNet.forward_dense` of a padded batch,
  ``(x [B, N, F], powers [B, K, N, N], mask [B, N])``, with the graph count ``B`` and the node count
  ``N`` dynamic (node level: one graph, ``B = 1``);
* ``pairs``: :meth:`~xmask_cli.model.network.XMaskNet.forward_sparse` of one graph's attended pairs,
  ``(x [N, F], edge_index [2, E], values [E, K])``, with ``N`` and ``E`` dynamic, on the per-pair gather
  kernel (the CSR kernel of training runs compiled numba code or ``torch.sparse``).
"""
from __future__ import annotations

import copy
import importlib.metadata
import logging
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from xmask_cli.errors import UsageError
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.network import XMaskNet, sparse_refusal

__all__ = ["PATHS", "FORMATS", "ExportRefused", "ProgramSpec", "DenseProgram", "PairsProgram", "refusal",
           "path_refusal", "program_spec", "trace", "to_onnx", "onnx_extra_hint", "require_onnx"]

#: The attention paths an exported program can take.
PATHS = ("dense", "pairs")
#: What ``xmask export --to`` writes: a ``torch.export`` program (``.pt2``) or an ONNX model (``.onnx``).
FORMATS = ("torch", "onnx")


class ExportRefused(UsageError):
    """The run cannot be exported as asked (exit 2); the message says why and what can be exported."""


@dataclass(frozen=True)
class ProgramSpec:
    """The input signature of an exported program.

    Attributes:
        path: ``dense`` or ``pairs``.
        inputs: the input names, in order.
        shapes: each input's shape, as symbols (``B``, ``N``, ``E``) and numbers.
        dynamic: each input's dynamic axes, ``{axis: dim name}``.
        output: the output's shape.
    """

    path: str
    inputs: tuple[str, ...]
    shapes: dict[str, list[str | int]]
    dynamic: dict[str, dict[int, str]]
    output: list[str | int]


def program_spec(path: str, level: str, in_dim: int, k: int, out_dim: int) -> ProgramSpec:
    """The signature of ``path``'s program for a model of ``in_dim`` features, ``k`` powers, ``out_dim`` outputs."""
    if path == "pairs":
        return ProgramSpec("pairs", ("x", "edge_index", "values"),
                           {"x": ["N", in_dim], "edge_index": [2, "E"], "values": ["E", k]},
                           {"x": {0: "nodes"}, "edge_index": {1: "pairs"}, "values": {0: "pairs"}},
                           ["N", out_dim])
    graphs: str | int = "B" if level == "graph" else 1
    dynamic = {"x": {1: "nodes"}, "powers": {2: "nodes", 3: "nodes"}, "mask": {1: "nodes"}}
    if level == "graph":
        for name in dynamic:
            dynamic[name][0] = "graphs"
    return ProgramSpec("dense", ("x", "powers", "mask"),
                       {"x": [graphs, "N", in_dim], "powers": [graphs, k, "N", "N"], "mask": [graphs, "N"]},
                       dynamic, [graphs, out_dim] if level == "graph" else [1, "N", out_dim])


def refusal(model: XMaskNet) -> str | None:
    """Why ``model`` has no exported program (None: it has), naming what can be exported instead."""
    cfg = model.cfg
    if cfg.experts:
        return ("M3Dphormer attention experts (model.experts) attend over token masks planned by numba "
                "kernels, which torch.export cannot trace; the X-LogSMask attention of a run without "
                "model.experts exports (dense or pairs path)")
    if cfg.task in ("link", "edge", "image"):
        return (f"a {cfg.task}-level run has no exported program; graph-level runs (dense path) and "
                f"node-level runs (dense or pairs path) export")
    if cfg.arch == "gps":
        return ("model.arch=gps runs message passing on each graph's edges and their attributes, which the "
                "exported program does not take; the other graph-level architectures export")
    if cfg.biases:
        names = ", ".join(sorted(cfg.needs)) or "learned"
        return (f"learned biases ({names}) read structure beyond the powers Â^k, which the exported program does "
                f"not take; a run whose model.biases is empty (X-LogSMask alone) exports")
    return None


def path_refusal(model: XMaskNet, path: str) -> str | None:
    """Why ``model`` has no program on ``path`` (None: it has one)."""
    why = sparse_refusal(model.cfg) if path == "pairs" else None
    return None if why is None else f"the pairs path is refused for this model ({why}); --path dense exports it"


class DenseProgram(torch.nn.Module):
    """``forward(x [B, N, F], powers [B, K, N, N], mask [B, N])``: the model's dense path, in eval mode."""

    def __init__(self, model: XMaskNet):
        super().__init__()
        self.model = model
        self.uses_powers = model.bias is not None or model.out_bias is not None

    def forward(self, x: Tensor, powers: Tensor, mask: Tensor) -> Tensor:
        return self.model.forward_dense(x, powers if self.uses_powers else None, mask)


class PairsProgram(torch.nn.Module):
    """``forward(x [N, F], edge_index [2, E], values [E, K])``: the model's sparse path on one graph, in eval mode.

    A copy of the model whose attentions run the per-pair gather kernel (the same numbers as the CSR
    kernel to float rounding; plain PyTorch operators).
    """

    def __init__(self, model: XMaskNet):
        super().__init__()
        self.model = copy.deepcopy(model)
        for module in self.model.modules():
            if isinstance(module, StructuralAttention):
                module.sparse_kernel = "gather"

    def forward(self, x: Tensor, edge_index: Tensor, values: Tensor) -> Tensor:
        return self.model.forward_sparse(x, edge_index, values)


def _dims(spec: ProgramSpec) -> dict[str, dict[int, torch.export.Dim]]:
    made: dict[str, torch.export.Dim] = {}
    # At least one graph, node and pair: the kernels' empty-input early returns are then never taken.
    return {name: {axis: made.setdefault(dim, torch.export.Dim(dim, min=1)) for axis, dim in axes.items()}
            for name, axes in spec.dynamic.items()}


def _module(model: XMaskNet, path: str) -> torch.nn.Module:
    module = DenseProgram(model) if path == "dense" else PairsProgram(model)
    return module.eval()


def trace(model: XMaskNet, spec: ProgramSpec, example: tuple[Tensor, ...]) -> torch.export.ExportedProgram:
    """``torch.export`` of ``model``'s ``spec.path`` with ``spec``'s dynamic axes, traced on ``example``.

    Raises:
        ExportRefused: torch.export cannot trace this model on that path (the reason is its first line).
    """
    try:
        with torch.no_grad():
            return torch.export.export(_module(model, spec.path), example, dynamic_shapes=_dims(spec), strict=False)
    except Exception as exc:  # torch.export's errors have no common base; each names what it could not trace
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        other = "dense" if spec.path == "pairs" else "pairs"
        raise ExportRefused(f"torch.export cannot trace the {spec.path} path of this model ({first[:200]}); "
                            f"try --path {other}") from None


def onnx_extra_hint() -> str:
    """How to install the ONNX extra of this distribution (its name read from the installed metadata)."""
    names = importlib.metadata.packages_distributions().get("xmask_cli") or []
    dist = names[0] if names else "<this package>"
    return f'pip install "{dist}[onnx]"'


#: The oldest torch ``xmask export`` is tested on; torch 2.5's ``torch.export`` cannot trace the dense path.
EXPORT_TORCH = (2, 13)


def require_export_torch(version: str | None = None) -> None:
    """Refuse (exit 2) under a torch older than :data:`EXPORT_TORCH`, before any run is rebuilt."""
    text = version if version is not None else torch.__version__
    parts = [int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit()]
    if len(parts) == 2 and tuple(parts) < EXPORT_TORCH:
        floor = ".".join(map(str, EXPORT_TORCH))
        raise ExportRefused(f"xmask export needs torch >= {floor} (this is {text}): older torch.export cannot "
                            f"trace the model; upgrade torch (pip install 'torch>={floor}')")


def require_onnx() -> None:
    """Refuse (exit 2, naming the ``[onnx]`` extra) when ``onnx`` or ``onnxscript`` is not installed."""
    try:
        import onnx  # noqa: F401  (an optional dependency: the [onnx] extra)
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise ExportRefused(f"--to onnx needs the onnx and onnxscript packages ({exc.name} is missing): "
                            f"{onnx_extra_hint()}, or export with --to torch") from None


def to_onnx(program: torch.export.ExportedProgram, spec: ProgramSpec) -> bytes:
    """The ONNX model (opset of torch's dynamo exporter) of an exported program, serialized.

    Raises:
        ExportRefused: ``onnx`` / ``onnxscript`` are not installed (the ``[onnx]`` extra), or an operator of
            the program has no ONNX translation.
    """
    require_onnx()
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    try:
        # The exporter warns about packages xmask does not use (torchvision) and its own deprecations.
        quiet.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_program = torch.onnx.export(program, dynamo=True, verbose=False, input_names=list(spec.inputs),
                                             output_names=["out"])
    except Exception as exc:  # the exporter's errors name the operator it could not translate
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise ExportRefused(f"ONNX cannot express this program ({first[:200]}); the torch.export program "
                            f"(--to torch) has no such limit") from None
    finally:
        quiet.setLevel(level)
    if onnx_program is None:
        raise ExportRefused("the ONNX exporter returned no model; export with --to torch")
    return bytes(onnx_program.model_proto.SerializeToString())
