"""The human output of ``xmask export`` on hand-made results: the file, the dynamic sizes, shapes and the check."""
from __future__ import annotations

import io

from rich.console import Console

from xmask_cli.render import export
from xmask_cli.results import ExportResult


def _text(result: ExportResult) -> str:
    buf = io.StringIO()
    export.human(Console(file=buf, width=200, soft_wrap=True, highlight=False), result)
    return buf.getvalue()


def _result(**kw) -> ExportResult:
    fields = {"run_dir": "runs/m/0", "dataset": "MUTAG", "level": "graph", "out": "runs/m/0/model.pt2", "to": "torch",
              "path": "dense", "inputs": {"x": ["B", "N", 12], "powers": ["B", 4, "N", "N"], "mask": ["B", "N"]},
              "output": ["B", 2], "export_s": 5.61, "size_bytes": 143613, "checked": 18, "max_abs_diff": 7.46e-08}
    return ExportResult(**{**fields, **kw})


def test_export_shows_file_size_dynamic_sizes_each_input_and_the_check():
    text = _text(_result())
    assert "runs/m/0/model.pt2 (torch.export program, 140.2 KiB)" in text
    assert "dense (B graphs, N nodes any size)" in text
    assert "[B, 4, N, N]" in text and "[B, N, 12]" in text and "[B, 2]" in text
    assert "5.6 s" in text and "max |Δ| 7.5e-08 over 18 test items" in text


def test_a_pairs_onnx_model_without_test_items_says_so():
    text = _text(_result(to="onnx", path="pairs", level="node", checked=0, max_abs_diff=None,
                         inputs={"x": ["N", 3], "edge_index": [2, "E"], "values": ["E", 2]}, output=["N", 7]))
    assert "ONNX model" in text and "pairs (N nodes, E pairs any size)" in text and "no test items" in text
    assert _result().to_json()["inputs"]["powers"] == ["B", 4, "N", "N"]
