"""A trained run as a program for inference: ``torch.export`` (``.pt2``) or ONNX, with dynamic sizes.

:func:`export_run` is what ``xmask export`` calls; :mod:`~xmask_cli.export.program` says which models and
paths export and traces them; :mod:`~xmask_cli.export.inputs` builds a program's inputs from a run's
features and structure cache (docs/export.md).
"""
from __future__ import annotations

from xmask_cli.export.inputs import dense_graph, graph_inputs, pad_graphs, pairs_graph
from xmask_cli.export.program import FORMATS, PATHS, ExportRefused, ProgramSpec, program_spec, refusal
from xmask_cli.export.run import META, choose_path, export_run, powers_read, read_rows, run_inputs

__all__ = ["FORMATS", "META", "PATHS", "ExportRefused", "ProgramSpec", "choose_path", "dense_graph", "export_run",
           "graph_inputs", "pad_graphs", "pairs_graph", "powers_read", "program_spec", "read_rows", "refusal",
           "run_inputs"]
