"""Human output of ``xmask export``: the file written, its input signature, its cost and its check against eval."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from xmask_cli.console import kv_table

if TYPE_CHECKING:  # the renderer reads attributes; the CLI's start-up loads no torch
    from xmask_cli.results import ExportResult


def _shape(dims: list[str | int]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def _dynamic(result: ExportResult) -> str:
    """The dynamic sizes of the program's inputs, as words: ``B graphs, N nodes``."""
    words = {"B": "B graphs", "N": "N nodes", "E": "E pairs"}
    used = {d for dims in result.inputs.values() for d in dims if isinstance(d, str)}
    return ", ".join(w for sym, w in words.items() if sym in used)


def human(con: Console, result: ExportResult) -> None:
    """The program of :func:`~xmask_cli.export.export_run`: file, path, inputs (symbols are dynamic), cost, check."""
    kind = "torch.export program" if result.to == "torch" else "ONNX model"
    check = ("no test items" if result.max_abs_diff is None
             else f"max |Δ| {result.max_abs_diff:.1e} over {result.checked} test items")
    rows = [("file", f"{result.out} ({kind}, {result.size_bytes / 1024:.1f} KiB)"),
            ("path", f"{result.path} ({_dynamic(result)} any size)"),
            *((f"input {name}", _shape(dims)) for name, dims in result.inputs.items()),
            ("output", _shape(result.output)),
            ("export time", f"{result.export_s:.1f} s"),
            ("vs xmask eval", check)]
    con.print(kv_table(f"{result.dataset} {result.level}: {result.run_dir}", rows))
