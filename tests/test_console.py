"""Output helpers: results on stdout (JSON or human), logs on stderr unless quiet, the no-op progress off a
terminal, and the small formatters."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from xmask_cli.console import Output, fmt_metric, human_bytes, kv_table


def test_logs_go_to_stderr_and_quiet_drops_them(capsys):
    Output().log("[bold]loaded[/bold] 3 graphs")
    Output(quiet=True).log("hidden")
    out, err = capsys.readouterr()
    assert out == "" and err == "[bold]loaded[/bold] 3 graphs\n"  # no markup interpreted, nothing on stdout


def test_a_json_result_is_sorted_indented_json_and_a_human_one_calls_the_renderer(capsys):
    payload = {"b": 1, "a": Path("/x/y"), "c": [1.5]}
    calls = []
    Output(fmt="json").result(payload, lambda console: calls.append(console))
    out, err = capsys.readouterr()
    assert calls == [] and err == ""
    assert json.loads(out) == {"a": "/x/y", "b": 1, "c": [1.5]}
    assert out == json.dumps({"a": "/x/y", "b": 1, "c": [1.5]}, indent=2) + "\n"
    Output().result(payload, lambda console: console.print("human view"))
    out, _ = capsys.readouterr()
    assert out == "human view\n"


@pytest.mark.parametrize("out", [Output(fmt="json"), Output(quiet=True), Output()])
def test_progress_off_a_terminal_is_a_no_op(out, capsys):
    with out.progress("prepare", 10) as step:
        step(3, 10)
        step(10, 10)
    assert capsys.readouterr() == ("", "")  # pytest's stderr is no terminal


def test_kv_table_renders_each_row_as_text():
    buf = io.StringIO()
    Console(file=buf, width=60).print(kv_table("summary", [("graphs", 188), ("path", Path("c/a.h5")), ("x", None)]))
    lines = [ln.strip() for ln in buf.getvalue().splitlines() if ln.strip()]
    assert lines[0] == "summary"
    cells = [[c.strip() for c in re.split(r"\s*│\s*", ln) if c.strip()] for ln in lines[1:] if "│" in ln]
    assert cells == [["graphs", "188"], ["path", "c/a.h5"], ["x", "None"]]


@pytest.mark.parametrize("n, want", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (10 * 2**20 + 2**19, "10.5 MiB"), (5 * 2**30, "5.0 GiB"),
                                     (2**40, "1024.0 GiB")])
def test_human_bytes(n, want):
    assert human_bytes(n) == want


def test_fmt_metric():
    assert fmt_metric(None) == "-" and fmt_metric(0.91234) == "0.9123" and fmt_metric(1) == "1.0000"


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: rich draws its live bar into it."""

    def isatty(self) -> bool:
        return True


def _segments(text: str) -> list[str]:
    """What a terminal shows between line breaks and line-erasing controls, colours removed."""
    parts = re.split(r"\r|\n|\x1b\[2K|\x1b\[\?25[lh]|\x1b\[\d*A", text)
    return [re.sub(r"\x1b\[[\d;]*m", "", p) for p in parts]


def test_a_log_line_under_a_live_bar_is_printed_above_it_never_glued_to_it(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Output()
    with out.progress("train", 4) as bar:
        bar.restart(4, "train seed 3 fold 1", unit="epoch")
        bar(2, 4)
        bar.status("val accuracy 0.7500")
        bar.prog.refresh()  # type: ignore[attr-defined]  # draw this frame now, not on the next tick
        out.log("seed 3 fold 1: best epoch 1")
        bar(3, 4)
    out.log("after the bar")
    segs = _segments(term.getvalue())
    bars = [s for s in segs if "━" in s]
    assert bars, term.getvalue()
    # Every frame of the bar is alone between controls: no log text shares a segment with it.
    assert not [s for s in bars if "best epoch" in s or "after" in s]
    assert "seed 3 fold 1: best epoch 1" in segs and "after the bar" in segs
    # The bar names the run, the epoch, the last validation metric and the time left.
    assert any(re.fullmatch(r"train seed 3 fold 1 [━╸╺]+\s+epoch 2/4 val accuracy 0\.7500 \d:\d\d:\d\d left\s*", s)
               for s in bars), bars
    assert out._live == []  # the bar is gone: later logs use a console of their own


def test_a_bar_off_a_terminal_takes_every_call_and_draws_nothing(capsys):
    with Output().progress("train", None) as bar:
        bar.restart(5, "train seed 0", unit="epoch")
        bar(1, 5)
        bar.status("val accuracy 0.5")
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("out", [Output(fmt="json"), Output(quiet=True)])
def test_json_and_quiet_draw_no_bar_on_a_terminal_either(out, monkeypatch):
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    with out.progress("train", 4) as bar:
        bar.restart(4, "train seed 0", unit="epoch")
        bar(2, 4)
        out.log("seed 0: best epoch 1")
    assert term.getvalue() == ("" if out.quiet else "seed 0: best epoch 1\n")
