"""benchmarks/out/ holds only what the pages cite: every committed file there is named by a page, a benchmark
script or a test, by its path, a folder above it or a pattern (``out/transformers/*.json``,
``out/ablations/<preset>/ablation.{csv,json}``) that matches it."""
from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "out"
#: A path under out/ as a page writes it (placeholders and globs included).
CITED = re.compile(r"\bout/[\w./*<>{},-]*[\w*>}/]")


def _committed() -> list[str]:
    """The files git tracks under benchmarks/out, relative to benchmarks/ (``out/...``)."""
    listed = subprocess.run(["git", "ls-files", "benchmarks/out"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [str(Path(p).relative_to("benchmarks")) for p in listed]


def _patterns(text: str) -> set[str]:
    """Every ``out/...`` citation in ``text`` as shell patterns: ``<name>`` becomes ``*``, ``{a,b}`` both."""
    found = set()
    for cite in CITED.findall(text):
        cite = re.sub(r"<[^>]*>", "*", cite)
        m = re.search(r"\{([^}]*)\}", cite)
        options = [cite[:m.start()] + o + cite[m.end():] for o in m.group(1).split(",")] if m else [cite]
        found.update(options)
    return found


def _cites(pattern: str, path: str) -> bool:
    if pattern.endswith("/"):
        return pattern != "out/" and path.startswith(pattern)
    return fnmatch.fnmatchcase(path, pattern)


def test_the_citation_patterns_on_hand_made_lines() -> None:
    pats = _patterns("see `out/ablations/<preset>/ablation.{csv,json}` and out/transformers/*.json; out/growth.png.")
    assert pats == {"out/ablations/*/ablation.csv", "out/ablations/*/ablation.json", "out/transformers/*.json",
                    "out/growth.png"}
    assert _cites("out/tune_study/cora-fast/", "out/tune_study/cora-fast/summary.json")
    assert not _cites("out/", "out/anything.json") and not _cites("out/growth.png", "out/growth.json")


def test_every_file_in_out_is_cited() -> None:
    sources = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*.md"),
               *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "tests").rglob("*.py")]
    mine = Path(__file__).resolve()  # this file's hand-made lines cite nothing
    patterns = set().union(*(_patterns(p.read_text()) for p in sources if p.name != "CHANGELOG.md" and p != mine))
    patterns.discard("out/")
    files = _committed()
    assert files, "no committed files under benchmarks/out"
    uncited = [f for f in files if not any(_cites(p, f) for p in patterns)]
    assert not uncited, f"files under benchmarks/out that no page, script or test cites: {uncited}"
