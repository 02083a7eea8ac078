"""``xmask train``'s progress as a terminal and a pipe receive it: the real command in a subprocess, its stderr a
pseudo-terminal (``os.openpty``) or a pipe, the bytes checked."""
from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

TRAIN = ["train", "--preset", "graph-level", "--set", "model.hidden=16", "--set", "model.layers=1",
         "--set", "train.epochs=2", "--set", "train.warmup_epochs=1", "--folds", "2", "--device", "cpu"]
#: The line train logs as each run ends (engine/runs/sweep.py), seed and fold named.
RUN_LINE = re.compile(r"seed 0 fold [01]: best epoch \d, train accuracy [\d.]+, val accuracy [\d.]+, test accuracy")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")}
    return {**env, "TERM": "xterm-256color"}


def _command(tmp: Path) -> list[str]:
    return [sys.executable, "-m", "xmask_cli", *TRAIN, "--runs-dir", str(tmp / "runs"), "--cache-dir",
            str(tmp / "cache")]


def _run_on_a_terminal(args: list[str], columns: int = 120) -> tuple[int, bytes]:
    """Run ``args`` with stderr on a pseudo-terminal of ``columns``; its exit code and every byte it drew."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=_env())
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal (EIO on Linux)
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks)


def _segments(text: str) -> list[str]:
    """What the terminal shows between line breaks and line-erasing or cursor controls, colours removed."""
    parts = re.split(r"\r|\n|\x1b\[2K|\x1b\[\?25[lh]|\x1b\[\d*[AB]", text)
    return [re.sub(r"\x1b\[[\d;]*m", "", p) for p in parts]


def test_on_a_terminal_logs_print_above_the_bar_which_names_run_epoch_metric_and_time_left(tmp_path):
    rc, raw = _run_on_a_terminal(_command(tmp_path))
    text = raw.decode()
    assert rc == 0, text[-2000:]
    segs = _segments(text)
    bars = [s for s in segs if "━" in s]
    assert bars, text[-2000:]
    # No log text directly after a bar frame: each log line starts a segment of its own.
    assert not [s for s in bars if "best epoch" in s or "prepared" in s], [s for s in bars if "best epoch" in s]
    assert sum(bool(RUN_LINE.match(s)) for s in segs) == 2, [s for s in segs if "best epoch" in s]
    frame = re.compile(r"train seed 0 fold (\d) [━╸╺]+\s+epoch (\d)/2 val accuracy (\d\.\d{4})(?: \d:\d\d:\d\d left)?\s*")
    shown = [m.groups() for m in map(frame.fullmatch, bars) if m]
    assert {(fold, epoch) for fold, epoch, _ in shown} >= {("0", "1"), ("1", "1"), ("1", "2")}, bars[-5:]
    assert any(re.search(r"epoch 1/2 val accuracy \d\.\d{4} \d:\d\d:\d\d left", s) for s in bars)
    # The metric in the bar is the last epoch's validation accuracy, as metrics.jsonl recorded it.
    rows = [json.loads(line) for line in (tmp_path / "runs" / "mutag-graph" / "0" / "fold-1" / "metrics.jsonl")
            .read_text().splitlines()]
    assert ("1", "2", f"{rows[-1]['val_accuracy']:.4f}") in shown


def test_a_piped_stderr_gets_plain_log_lines_and_no_control_sequences(tmp_path):
    proc = subprocess.run(_command(tmp_path), stdin=subprocess.DEVNULL, capture_output=True, env=_env(),
                          timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    assert "\x1b" not in err and "\r" not in err and "━" not in err
    lines = err.splitlines()
    assert sum(bool(RUN_LINE.match(ln)) for ln in lines) == 2, err
    assert sum(bool(re.fullmatch(r"seed 0 epoch [01]: loss \d\.\d{4} val_accuracy \d\.\d{4} val_loss \d\.\d{4}", ln))
               for ln in lines) == 4, err
