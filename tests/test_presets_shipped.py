"""What presets/ ships is what is current, and the recipes it superseded still run from benchmarks/presets/.

presets/ holds the level bases, one preset per dataset and task, and the method arms; no shipped preset calls
itself replaced or superseded, carries tuning history (trial numbers, study files under benchmarks/out/: that
lives on benchmarks/tune.md), or builds on a file outside presets/. The superseded recipes the benchmark pages
cite live in benchmarks/presets/, outside the wheel and `xmask presets ls`, and resolve by path, their
``extends:`` chains included; every page that runs one names it by that path.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli_helpers import run
from xmask_cli import config_resolve as R
from xmask_cli.engine.plan import resolve_level

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(R.packaged_presets_dir().glob("*.yaml"))
KEPT = sorted((ROOT / "benchmarks" / "presets").glob("*.yaml"))
#: Pages and scripts that run presets: a ``--preset`` there must run as written.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").glob("*.md")),
         *sorted((ROOT / "benchmarks").glob("*.py"))]

#: A description that calls its preset superseded.
SUPERSEDED = re.compile(r"\breplac(?:ed|es)\b|\bsupersed\w*|\bkept for\b|\balias of\b", re.IGNORECASE)
#: Tuning history: a trial by number, a study's files under benchmarks/out/, a study's best.yaml.
TUNING_HISTORY = re.compile(r"\btrials?\s+#?\d|\bbenchmarks/out/|\bout/tune_study\b|\bbest\.yaml\b", re.IGNORECASE)
#: ``--preset VALUE`` / ``--xmask-preset VALUE`` as a command line writes it.
PRESET_ARG = re.compile(r"--(?:xmask-)?preset[ =]\"?([\w./<>-]+)")
#: Presets that are not one dataset's: the level bases and the method arms (learned biases, M3Dphormer, ViT).
ARMS = re.compile(r"^(?:base|\w+-level|edge-regression|bias-\w+|gtlm|m3d-[\w-]+|vit-[\w-]+)$")


def _extends(path: Path) -> list[str]:
    parents = R.read_yaml(path).get("extends") or []
    return [parents] if isinstance(parents, str) else list(parents)


def test_the_patterns_catch_what_they_should() -> None:
    for line in ("the hand preset that the tuned `mutag` replaced", "Superseded by cora", "kept for the M3D preset",
                 "Alias of `mutag`"):
        assert SUPERSEDED.search(line), line
    for line in ("Trial 8 of the 15-trial study", "its best.yaml is benchmarks/out/tune_study/15x1/x.yaml",
                 "trials 12 and 3", "see out/tune_study/cora-fast"):
        assert TUNING_HISTORY.search(line), line
    for line in ("a 15-trial study (benchmarks/tune.md)", "replacement of the encoder", "the output head"):
        assert not SUPERSEDED.search(line) and not TUNING_HISTORY.search(line), line
    assert PRESET_ARG.findall("xmask train --preset benchmarks/presets/cora-hand.yaml --seeds 0-4 --xmask-preset=cs") \
        == ["benchmarks/presets/cora-hand.yaml", "cs"]
    assert ARMS.match("node-level") and ARMS.match("vit-cifar10-t1-pe") and not ARMS.match("cora-link")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_no_shipped_preset_is_superseded_or_carries_tuning_history(path: Path) -> None:
    description = str(R.read_yaml(path).get("description", ""))
    assert description and not SUPERSEDED.search(description), f"{path.name}: {description}"
    hits = [f"{i}: {line.strip()[:90]}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if TUNING_HISTORY.search(line)]
    assert not hits, f"{path.name}: tuning history belongs on benchmarks/tune.md: {hits}"


def test_shipped_presets_build_only_on_shipped_presets() -> None:
    names = {p.stem for p in SHIPPED}
    outside = {p.stem: [n for n in _extends(p) if n not in names] for p in SHIPPED}
    assert not {k: v for k, v in outside.items() if v}


def test_one_preset_per_dataset_and_task() -> None:
    """Beside the level bases and the method arms, each (dataset, level) has one shipped preset."""
    seen: dict[tuple[str, str], list[str]] = {}
    for path in SHIPPED:
        if not ARMS.match(path.stem):
            cfg = R.resolve(path.stem)
            seen.setdefault((cfg.data.dataset.lower(), resolve_level(cfg)), []).append(path.stem)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}
    assert len(seen) >= 15  # Planetoid, Amazon, Coauthor, TU, OGB and the link sets: the check saw them


def test_the_kept_recipes_are_not_shipped_or_listed() -> None:
    assert KEPT and not {p.stem for p in KEPT} & {p.stem for p in SHIPPED}
    r = run("--format", "json", "presets", "ls")
    assert r.exit_code == 0, r.stderr
    listed = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(listed) == {p.stem for p in SHIPPED}
    assert not [n for n, row in listed.items() if SUPERSEDED.search(row["description"])]


@pytest.mark.parametrize("path", KEPT, ids=lambda p: p.stem)
def test_a_kept_recipe_resolves_by_path_with_its_extends_chain(path: Path) -> None:
    """``xmask presets show benchmarks/presets/NAME.yaml`` resolves, a parent beside it (computers-gat ->
    computers-full) or a shipped one (computers-full -> computers) included; the merge is the parent's resolved
    values under the file's own."""
    r = run("--format", "json", "presets", "show", str(path))
    assert r.exit_code == 0, r.stderr
    shown = json.loads(r.stdout)
    own = R.read_yaml(path)
    for parent in _extends(path):
        beside = path.parent / f"{parent}.yaml"
        base = R.resolve(str(beside) if beside.is_file() else parent).to_dict()
        for section, values in own.items():
            if isinstance(values, dict) and section != "tune":
                for key, value in values.items():
                    if not isinstance(value, dict):
                        assert shown[section][key] == value, f"{section}.{key}"
        untouched = [s for s in base if s not in own and s not in ("description", "tune")]
        assert untouched and all(shown[s] == base[s] for s in untouched)


def test_every_preset_a_page_runs_resolves_as_written() -> None:
    """A ``--preset`` on a page or in a script is a shipped name or a file path from the repository root (the
    pages' commands run there); a placeholder (``<preset>``, ``NAME``) or a file a study writes is left alone."""
    names = {p.stem for p in SHIPPED}
    kept = {p.stem for p in KEPT}
    bad = []
    for page in PAGES:
        for value in PRESET_ARG.findall(page.read_text()):
            if value.startswith("<") or Path(value).stem.isupper() or value.endswith("best.yaml") or value.startswith("runs/"):
                continue
            if value.endswith((".yaml", ".yml")):
                ok = (ROOT / value).is_file() or not value.startswith("benchmarks/")
            else:
                ok = value in names
            if not ok or value in kept:
                bad.append(f"{page.relative_to(ROOT)}: --preset {value}")
    assert not bad, bad
