"""The command blocks of README.md and docs/ run as written, from the state the README's first command leaves.

Every fenced block holding a command line (``xmask …``, ``torchrun …``, ``python …``, ``pip …``) carries a
marker on the line above it: ``<!-- doc-test: run -->`` (run here) or ``<!-- doc-test: not run (why, and
what it costs) -->``. Each page's run blocks execute in order in one folder that starts as a copy of what
``xmask train --preset graph-level`` (the README's first command) leaves behind: shell lines must exit 0,
and a console block's ``$ cmd`` lines other than ``xmask`` must print the lines shown under them. A python
block whose first line is ``# name.py`` is the file of that name; a run python block without one runs as
a script. docs/cli.md is generated from ``--help`` and is checked by tests/cli instead.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"^<!-- doc-test: (run|not run \((.+)\)) -->$")
COMMAND = re.compile(r"^(\$ )?(xmask|torchrun|python|pip|optuna-dashboard|tensorboard) ", re.M)
FILE_NAME = re.compile(r"^# ([\w.-]+\.py)\n")
#: A trailing shell comment: two spaces or more, then ``# ``.
COMMENT = re.compile(r"\s{2,}#\s.*$")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, text, marker (None: unmarked) and line number."""

    page: Path
    lang: str
    text: str
    mark: str | None
    line: int

    @property
    def is_command(self) -> bool:
        return self.lang != "python" and bool(COMMAND.search(self.text))

    @property
    def file_name(self) -> str | None:
        m = FILE_NAME.match(self.text) if self.lang == "python" else None
        return m.group(1) if m else None


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with the marker on the line above each, if any."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        above = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.match(above)
        found.append(Block(page, m.group(1), m.group(2), mark.group(1) if mark else None,
                           text[: m.start()].count("\n") + 1))
    return found


def shell_lines(text: str) -> list[str]:
    """The commands of a plain shell block: continuations joined, comments dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    return [COMMENT.sub("", ln).strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """``($ command, the lines printed under it)`` pairs of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for ln in text.splitlines():
        if ln.startswith("$ "):
            steps.append((ln[2:].strip(), []))
        elif steps:
            steps[-1][1].append(ln)
    return steps


def _env() -> dict[str, str]:
    env = dict(os.environ, XMASK_OFFLINE="1")
    # `xmask` and `python` in a doc line are this interpreter's (the venv the tests run in).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one shell line; on time-out its whole process group goes, not only the shell."""
    with subprocess.Popen(command, shell=True, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def run_block(block: Block, cwd: Path) -> None:
    """Run one marked block in ``cwd``; fail with the block's place and the command's stderr."""
    where = f"{block.page.name}:{block.line}"
    if block.lang == "python":
        script = cwd / (block.file_name or "_doc_block.py")
        script.write_text(block.text)
        if block.file_name is None:
            r = _sh(f"python {script.name}", cwd)
            assert r.returncode == 0, f"{where}: python block exited {r.returncode}\n{r.stderr[-3000:]}"
        return
    steps = console_steps(block.text) if "$ " in block.text else [(c, []) for c in shell_lines(block.text)]
    for command, shown in steps:
        r = _sh(command, cwd)
        assert r.returncode == 0, f"{where}: `{command}` exited {r.returncode}\n{r.stderr[-3000:]}"
        if shown and not command.startswith("xmask "):
            assert r.stdout.rstrip("\n").splitlines() == shown, f"{where}: `{command}` printed other lines"


def _all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


@pytest.mark.parametrize("block", [b for b in _all_blocks() if b.is_command],
                         ids=lambda b: f"{b.page.name}:{b.line}")
def test_every_command_block_is_marked(block: Block) -> None:
    """A command block says whether the tests run it, and if not, why and at what cost."""
    assert block.mark is not None, (f"{block.page.relative_to(ROOT)}:{block.line}: mark the block with "
                                    f"<!-- doc-test: run --> or <!-- doc-test: not run (why) -->")


def test_marker_and_parsers_on_hand_made_blocks(tmp_path: Path) -> None:
    """The parsing rules on a page written here: markers, continuations, comments, console steps."""
    page = tmp_path / "p.md"
    page.write_text("<!-- doc-test: run -->\n```bash\nxmask a --b \\\n    c   # note\n# whole comment\n```\n\n"
                    "```\n$ head -1 f\nline\n$ xmask x\nout\n```\n"
                    "<!-- doc-test: not run (an hour) -->\n```python\n# m.py\nprint(1)\n```\n")
    first, second, third = blocks(page)
    assert (first.mark, first.is_command, shell_lines(first.text)) == ("run", True, ["xmask a --b c"])
    assert (second.mark, second.is_command) == (None, True)
    assert console_steps(second.text) == [("head -1 f", ["line"]), ("xmask x", ["out"])]
    assert (third.mark, third.is_command, third.file_name) == ("not run (an hour)", False, "m.py")
    # A console step whose output differs fails; an xmask step is judged by its exit code only.
    (tmp_path / "f").write_text("other\n")
    with pytest.raises(AssertionError, match="printed other lines"):
        run_block(second, tmp_path)


@pytest.fixture(scope="module")
def after_first_command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding what the README's first command leaves: runs/mutag-graph/0 and its cache."""
    folder = tmp_path_factory.mktemp("readme")
    r = _sh("xmask train --preset graph-level", folder)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (folder / "runs" / "mutag-graph" / "0" / "best.pt").is_file()
    return folder


RUN_PAGES = [p for p in PAGES if any(b.mark == "run" for b in blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.name)
def test_page_runs_as_written(page: Path, after_first_command: Path, tmp_path: Path) -> None:
    """Every run block of the page, in order, from the README's first command's state."""
    cwd = tmp_path / "work"
    shutil.copytree(after_first_command, cwd)
    for block in blocks(page):
        if block.mark == "run" or (block.file_name and block.mark is None):
            run_block(block, cwd)
    # A cache file the page names (cache/<dataset>/<key>.h5) is the one its commands made.
    for dataset, key in re.findall(r"\bcache/([\w.-]+)/([0-9a-f]{20})\.h5", page.read_text()):
        if (cwd / "cache" / dataset).is_dir():
            assert (cwd / "cache" / dataset / f"{key}.h5").is_file(), f"{page.name} names an outdated key {key}"


def test_run_pages_are_found() -> None:
    """The pages with run blocks include the ones whose examples a newcomer follows first."""
    assert {p.name for p in RUN_PAGES} >= {"README.md", "explain-and-logs.md", "datasets-from-files.md"}
