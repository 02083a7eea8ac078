"""Shared helpers of the CLI tests: run a command in-process, read its one error line."""
from __future__ import annotations

from typer.testing import CliRunner

from xmask_cli.cli import app

runner = CliRunner()


def run(*args: str, **kw):
    """``xmask ARGS`` through typer's test runner (stdout and stderr kept apart)."""
    return runner.invoke(app, list(args), **kw)


def one_error_line(result) -> str:
    """The single ``error: ...`` line a refused command must print, with no traceback anywhere."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    return lines[0]


def full_disk_line(rc: int, stderr: str, stdout: str = "") -> str:
    """The one ``error:`` line of a write that found the disk full (exit 5, other log lines aside, no traceback)."""
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert rc == 5, stderr[-2000:]
    assert len(errors) == 1 and "Traceback" not in stderr + stdout and "Exception ignored" not in stderr, \
        stderr[-2000:]
    assert errors[0].startswith("error: no space left on device writing ") and "(file system at " in errors[0]
    return errors[0]
