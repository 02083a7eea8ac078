"""The documentation holds together: local links resolve, the README and the benchmark pages stay short, no
history (issue numbers, dates, commit hashes) in them, and the README's two commands are the ones CI runs.

Why: README.md, ARCHITECTURE.md, docs/*.md, the benchmark pages and the presets' comments are what a
newcomer reads; a link that points
nowhere, an issue number nobody outside the project has, or a first command that CI no longer runs
are each a broken promise that no other test would notice.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Pages that may speak of history, checked for their links only.
HISTORY_PAGES = [ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "HISTORY.md"]
#: Benchmark pages: the index (benchmarks/README.md) and one page per benchmark.
BENCHMARK_PAGES = sorted(p for p in (ROOT / "benchmarks").glob("*.md") if p not in HISTORY_PAGES)
PAGES = [README, ROOT / "ARCHITECTURE.md", *BENCHMARK_PAGES, *sorted((ROOT / "docs").glob("*.md"))]

#: Preset files: their descriptions and comments are documentation too (`xmask presets ls` shows the former).
PRESET_FILES = sorted((ROOT / "presets").glob("*.yaml"))

#: History wording that belongs in CHANGELOG.md / benchmarks/HISTORY.md, never in the docs.
HISTORY = re.compile(r"issue [0-9]+|issues? #?[0-9]|before this change|§", re.IGNORECASE)
#: Inline Markdown links ``[text](target)``; images too. Code spans are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans (a link there is an example, not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (outside fenced blocks)."""
    text = FENCE.sub("", path.read_text())
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


def test_anchor_rule_on_hand_made_headings() -> None:
    """The anchor rule as GitHub renders it, on headings worked by hand."""
    assert _anchor("Hyper-parameter search (`xmask tune`)") == "hyper-parameter-search-xmask-tune"
    assert _anchor('Attention paths and what "outside the support" means') == \
        "attention-paths-and-what-outside-the-support-means"
    assert _anchor("Graph-level batches, packed or padded") == "graph-level-batches-packed-or-padded"


@pytest.mark.parametrize("page", PAGES + HISTORY_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_local_links_resolve(page: Path) -> None:
    """Every link to a local file (and its #anchor, for Markdown targets) points at something that exists."""
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = unquote(target).partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_readme_is_short() -> None:
    """The README is the entry page: at most 350 lines, the deep topics live in docs/."""
    lines = README.read_text().count("\n")
    assert lines <= 350, f"README.md has {lines} lines; move the deep topic to docs/"


@pytest.mark.parametrize("page", BENCHMARK_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_benchmark_pages_are_short(page: Path) -> None:
    """The index and each benchmark's page fit in 150 lines: current figures only, the rest in HISTORY.md."""
    lines = page.read_text().count("\n")
    assert lines <= 150, f"{page.relative_to(ROOT)} has {lines} lines; move dated runs to benchmarks/HISTORY.md"


@pytest.mark.parametrize("page", PAGES + PRESET_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_history_in_docs(page: Path) -> None:
    """No issue numbers and no change history: that goes to CHANGELOG.md or benchmarks/HISTORY.md."""
    hits = [f"{i}: {line.strip()[:90]}" for i, line in enumerate(page.read_text().splitlines(), 1)
            if HISTORY.search(line)]
    assert not hits, f"{page.relative_to(ROOT)}: history wording: {hits}"


#: A calendar date (2026-12-04), a clock time in UTC, or a commit hash where the docs would cite one: in
#: backticks, in parentheses, or after "commit" / "at". A hash has 7-40 hex digits with a digit and a letter,
#: so ids such as `1234567`, words such as `decade` and longer digests are left alone.
_HEX = r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
DATED = re.compile(
    r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"  # YYYY-MM-DD
    r"|\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*-\s*\d{1,2}:\d{2})?\s*UTC\b|\bUTC\b"  # 09:21-09:24 UTC, UTC
    rf"|`{_HEX}`|\({_HEX}[),;]|\b{_HEX}\)|\b(?:commit|commits|at|of)\s+`?{_HEX}\b"  # `7cc5aec`, (7cc5aec), commit 7cc5aec
)


@pytest.mark.parametrize("page", PAGES + PRESET_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dates_or_commits_in_docs(page: Path) -> None:
    """Docs describe the tool as it is: dates, UTC times and commit hashes go to CHANGELOG.md or benchmarks/HISTORY.md."""
    hits = [f"{i}: {line.strip()[:90]}" for i, line in enumerate(page.read_text().splitlines(), 1)
            if DATED.search(line)]
    assert not hits, f"{page.relative_to(ROOT)}: dates or commits (move them to HISTORY.md / CHANGELOG.md): {hits}"


def test_dated_pattern_on_hand_made_lines() -> None:
    """The date / time / commit rule flags what it should and leaves numbers, ids and digests alone."""
    for dated in ("measured 2026-12-03 on the shared machine", "09:21-09:24 UTC", "at 22:30 UTC", "commit `7cc5aec`",
                  "main at ded16c4, packed", "(the code of 49d447f)", "(a17eceb)", "code at 2e6a2fa"):
        assert DATED.search(dated), dated
    for plain in ("seeds 0-4, 82.2 ± 5.4", "`1234567` nodes", "`decade`", "ε = 1e-30, 2.6e-07",
                  "sha256 `66de65e4826e112482ec680bbbdf7c0af56d826ce935c110786d130b79b76b06`",
                  "a 3-fold (2026) edition", "ids 2026-13-45", "epoch 12:30 of the plan", "`ffffffff`"):
        assert not DATED.search(plain), plain


def test_history_pattern_catches_history() -> None:
    """The pattern above flags what it should and leaves plain prose alone."""
    assert HISTORY.search("as measured in issue 10") and HISTORY.search("see §6")
    assert HISTORY.search("Issues #12 and 13") and HISTORY.search("before this change the cache")
    assert not HISTORY.search("paper 000, Sec. 5.1.1; 12 issues of a journal")


def test_readme_commands_are_the_ci_commands() -> None:
    """The README's two commands, on its first screen, install and run what .ci/run installs and runs."""
    text = README.read_text()
    block = re.search(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    first_section = text.find("\n## ")
    assert block and text.index(block.group(0)) < first_section, "the two commands come before the README's sections"
    assert text[: text.index(block.group(0))].count("\n") < 20, "the two commands are on the README's first screen"
    commands = [line for line in block.group(1).splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    first, second = (c.split(" && ") for c in commands)
    assert first[-3:] == ["pip install torch==2.13.0", "pip install .", "xmask train --preset graph-level"]
    assert second[-3:] == ["pip install torch==2.13.0", 'pip install ".[test]"', "python -m pytest tests"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_steps = [re.sub(r"\s--quiet\b", "", line).strip() for line in ci
                if line.startswith(("pip ", "python -m", "(cd "))]
    # CI installs the wheel `pip install .` would build (built once, the extras from the same file), runs the
    # README's first command from it in another folder, then the checks (ruff, mypy, the import direction) from
    # the lint extra and the README's test command.
    assert ci_steps == ["pip install torch==2.13.0", 'pip wheel . --no-deps -w "$WHEELS"', 'pip install "$WHEEL"',
                        '(cd "$(mktemp -d)" && xmask train --preset graph-level --format json > train.json '
                        "&& python - <<'PY'",
                        'pip install "$WHEEL[test,lint]"', "python -m pytest -q tests/test_architecture.py",
                        "python -m pytest tests"]
