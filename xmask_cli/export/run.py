"""``xmask export``: a run's best model written as a ``torch.export`` program (or ONNX), checked against eval.

The run is rebuilt as ``xmask eval`` rebuilds it (same data, split and cache); its model is traced on
one attention path (:mod:`~xmask_cli.export.program`), written atomically, and run on the test part,
whose outputs are compared with the ones ``xmask eval`` scores.
"""
from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.batching.features import input_features
from xmask_cli.engine.runs.evaluate import SavedRun, read_run, rebuild_run, run_precision
from xmask_cli.engine.runs.experiment import Experiment
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.scoring.splits import PARTS
from xmask_cli.engine.tasks.graph import GraphTask
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.engine.training.precision import autocast
from xmask_cli.errors import UsageError
from xmask_cli.export.inputs import dense_graph, graph_inputs, pairs_graph
from xmask_cli.export.program import (
    FORMATS,
    PATHS,
    ExportRefused,
    ProgramSpec,
    path_refusal,
    program_spec,
    refusal,
    require_export_torch,
    require_onnx,
    to_onnx,
    trace,
)
from xmask_cli.fs import atomic_write, ensure_writable_dir
from xmask_cli.model.network import XMaskNet
from xmask_cli.results import ExportResult

__all__ = ["META", "export_run", "choose_path", "powers_read", "read_rows", "run_inputs"]

#: The name of the program's metadata inside a ``.pt2`` file (``torch.export.load(..., extra_files=...)``).
META = "xmask.json"


def powers_read(model: XMaskNet) -> int:
    """``K``: the highest power ``Â^k`` any head of ``model`` reads (1 for a model without the X-LogSMask term)."""
    ks = [k for bias in (model.bias, model.out_bias) if bias is not None for k in bias.head_powers]
    return max(ks, default=1)


def choose_path(level: str, task: GraphTask | NodeTask, requested: str) -> str:
    """The attention path of the program: ``requested``, or (``auto``) the one ``xmask eval`` runs.

    Raises:
        ExportRefused: a path the run's level or batching has no program for.
    """
    if requested not in ("auto", *PATHS):
        raise UsageError(f"--path must be auto, dense or pairs, got '{requested}'")
    if level == "graph":
        if requested == "pairs":
            raise ExportRefused("graph-level runs export the dense path (padded batches, dynamic graph and node "
                                "counts); --path pairs is for node-level runs")
        return "dense"
    if not isinstance(task, NodeTask):
        raise ExportRefused(f"a {level}-level run has no exported program")
    if task.eval_mode == "partition":
        raise ExportRefused("this run is scored on METIS partition batches (node.mode=partition), attention "
                            "within each part, which no exported program computes; a node-level run scored on "
                            "the whole graph (node.mode=full or query) exports (dense or pairs path)")
    if requested != "auto":
        return requested
    return "dense" if task.attention == "dense" else "pairs"


def _check_target(out: Path) -> None:
    """Refuse a link or a folder planted at the output name; make its folder."""
    if out.is_symlink():
        raise UsageError(f"{out} is a symbolic link, which xmask never writes through; remove it or pass another --out")
    if out.is_dir():
        raise UsageError(f"{out} is a folder; pass a file name as --out")
    ensure_writable_dir(out.parent, "output folder", "pass another --out")


def _inputs(exp: Experiment, task: GraphTask | NodeTask, path: str, k: int, ids: list[int],
            batch_size: int = 32) -> list[tuple[list[int], tuple[Tensor, ...]]]:
    """The program's inputs of graphs ``ids`` in batches (graph level), or of the whole graph with ``ids`` as
    the nodes to read (node level)."""
    cache = Path(task.cache_path)
    if isinstance(task, GraphTask):
        return list(graph_inputs(cache, _features(exp, task), ids, k, batch_size))
    build = dense_graph if path == "dense" else pairs_graph
    return [(ids, build(cache, task.x, k))]


def _features(exp: Experiment, task: GraphTask) -> list[Tensor]:
    """Every graph's input features, as the run's task built them (structural columns appended)."""
    if not isinstance(exp.graphs, GraphSet):
        raise ExportRefused(f"a {exp.level}-level run has no exported program")
    return input_features(exp.graphs, exp.cfg.model.node_struct, task.cache_path)[0]


def _example(exp: Experiment, task: GraphTask | NodeTask, spec: ProgramSpec, k: int) -> tuple[Tensor, ...]:
    """Inputs to trace on: two graphs (or one twice) padded one node past the largest, so that no dynamic
    axis is 0 or 1 and the padded form is traced; a one-graph dataset's whole graph."""
    if not isinstance(task, GraphTask):
        return _inputs(exp, task, spec.path, k, [])[0][1]
    train = [int(g) for g in task.split.train[:2]] or [int(g) for g in task.split.test[:2]]
    ids = (train * 2)[:2]
    (_, (x, powers, mask)), = graph_inputs(task.cache_path, _features(exp, task), ids, k)
    pad = max(2 - x.size(1), 1)
    return (torch.nn.functional.pad(x, (0, 0, 0, pad)), torch.nn.functional.pad(powers, (0, pad, 0, pad)),
            torch.nn.functional.pad(mask, (0, pad)))


def _check(program: torch.export.ExportedProgram, exp: Experiment, task: GraphTask | NodeTask, spec: ProgramSpec, k: int,
           reference: Tensor) -> tuple[int, float | None]:
    """``(test items, max |program - eval|)`` of the program on the test part."""
    test = [int(i) for i in task.split.test]
    if not test:
        return 0, None
    module = program.module()
    with torch.no_grad():
        outs = [(ids, module(*inputs)) for ids, inputs in _inputs(exp, task, spec.path, k, test)]
    got = torch.cat([out if isinstance(task, GraphTask) else read_rows(out, ids) for ids, out in outs])
    return len(test), float((got.float() - reference.float()).abs().max())


def read_rows(out: Tensor, nodes: list[int]) -> Tensor:
    """The rows of ``nodes`` in a node-level program's output (``[1, N, C]`` dense, ``[N, C]`` pairs)."""
    return (out[0] if out.dim() == 3 else out)[torch.tensor(nodes, dtype=torch.long)]


def _serialize(program: torch.export.ExportedProgram, to: str, spec: ProgramSpec, meta: dict[str, Any]) -> bytes:
    if to == "onnx":
        return to_onnx(program, spec)
    # The inputs it was traced on would be saved too (Cora's dense powers: 117 MB); the program needs none.
    program.example_inputs = None
    buf = io.BytesIO()
    torch.export.save(program, buf, extra_files={META: json.dumps(meta, sort_keys=True)})
    return buf.getvalue()


_Loaded = tuple[RunDir, SavedRun, Experiment, "GraphTask | NodeTask", XMaskNet, str]


def _load(run_dir: str | os.PathLike[str], path: str, *, cache_dir: Path, data_root: str | os.PathLike[str] | None,
          offline: bool | None, log: Callable[[str], None]) -> _Loaded:
    """The run rebuilt as ``xmask eval`` rebuilds it, checked to have a program, and the program's path."""
    run, saved = read_run(run_dir)
    exp, task, model = rebuild_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                   device="cpu", log=log)
    if not isinstance(model, XMaskNet):  # rebuild_run builds one; the check narrows the type
        raise ExportRefused("the run's model is not an XMaskNet")
    reason = refusal(model)
    if reason is not None:
        raise ExportRefused(reason)
    if not isinstance(task, (GraphTask, NodeTask)):
        raise ExportRefused(f"a {exp.level}-level run has no exported program")
    chosen = choose_path(exp.level, task, path)
    reason = path_refusal(model, chosen)
    if reason is not None:
        raise ExportRefused(reason)
    return run, saved, exp, task, model, chosen


def run_inputs(
    run_dir: str | os.PathLike[str],
    part: str = "test",
    *,
    cache_dir: Path,
    path: str = "auto",
    batch_size: int = 32,
    data_root: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
) -> list[tuple[list[int], tuple[Tensor, ...]]]:
    """The inputs of a run's exported program for the items of ``part``, built as :func:`export_run` checks them.

    Graph level: batches of ``batch_size`` graphs, each with its graph ids (the output's rows, in order).
    Node level: the whole graph once, with the part's node ids (the rows to read: :func:`read_rows`).

    Raises:
        ExportRefused: the run has no program on ``path``; UsageError: an unknown part.
    """
    if part not in PARTS:
        raise UsageError(f"part must be one of {', '.join(PARTS)}, got '{part}'")
    _, _, exp, task, model, chosen = _load(run_dir, path, cache_dir=cache_dir, data_root=data_root,
                                           offline=offline, log=lambda m: None)
    ids = [int(i) for i in getattr(task.split, part)]
    return _inputs(exp, task, chosen, powers_read(model), ids, batch_size)


def export_run(
    run_dir: str | os.PathLike[str],
    *,
    cache_dir: Path,
    out: str | os.PathLike[str] | None = None,
    to: str = "torch",
    path: str = "auto",
    data_root: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> ExportResult:
    """Write a run's best model as an inference program with dynamic graph and node counts.

    Args:
        run_dir: a run folder, ``runs/<name>/<seed>/``.
        cache_dir, data_root, offline: where the run's data and structure cache are (as ``xmask eval``).
        out: the file to write; default ``RUN/model.pt2`` (``model.onnx`` with ``to='onnx'``).
        to: ``torch`` (a ``torch.export`` program) or ``onnx``.
        path: ``auto`` (the path ``xmask eval`` runs), ``dense`` or ``pairs`` (node level).

    Raises:
        ExportRefused: the model or path has no program (experts, learned biases, pair levels, partitions,
            a trace that fails), ONNX without its packages, or a torch older than ``EXPORT_TORCH`` (exit 2).
        RunNotFoundError: not a run folder.
    """
    if to not in FORMATS:
        raise UsageError(f"--to must be torch or onnx, got '{to}'")
    require_export_torch()
    if to == "onnx":
        require_onnx()  # before the run is rebuilt and traced
    loaded = _load(run_dir, path, cache_dir=cache_dir, data_root=data_root, offline=offline, log=log)
    run, saved, exp, task, model, chosen = loaded
    k = powers_read(model)
    spec = program_spec(chosen, exp.level, model.cfg.in_dim, k, model.cfg.out_dim)
    target = Path(out) if out is not None else run.path / ("model.onnx" if to == "onnx" else "model.pt2")
    _check_target(target)
    log(f"tracing the {chosen} path of {run.path} ({exp.dataset}, {exp.level} level)")
    start = time.perf_counter()
    program = trace(model, spec, _example(exp, task, spec, k))
    meta = {"path": chosen, "level": exp.level, "dataset": exp.dataset, "run": str(run.path),
            "inputs": spec.shapes, "output": spec.output, "k": k}
    data = _serialize(program, to, spec, meta)
    seconds = time.perf_counter() - start
    atomic_write(target, lambda f: f.write(data), "pass another --out")
    with torch.no_grad(), autocast(run_precision(saved), "cpu"):
        reference = task.outputs(model, "test")[0]
    checked, diff = _check(program, exp, task, spec, k, reference)
    return ExportResult(run_dir=str(run.path), dataset=exp.dataset, level=exp.level, out=str(target), to=to,
                        path=chosen, inputs=spec.shapes, output=spec.output, export_s=round(seconds, 3),
                        size_bytes=len(data), checked=checked, max_abs_diff=diff)
