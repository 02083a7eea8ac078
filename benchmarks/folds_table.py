#!/usr/bin/env python
"""Gather the fold-protocol results of ``xmask train --folds`` and ``peers.py --folds`` into one table.

Reads every ``<SET>-xmask.json`` (``xmask train --folds K --format json``) and ``<SET>-peers.json``
(``benchmarks/peers.py --only graph --folds K --out ...``) in a folder and prints, per set, the test
accuracy mean ± std over folds (population std, as both tools report) of xmask, GIN and the
structure-agnostic baseline, with the mean number of epochs run, the summed wall seconds per side and the
largest selected epoch (1-based) over the folds, beside the epoch cap and patience the peers' runs record:
a selected epoch well below the cap shows the cap did not bind.
Where xmask's file holds only some of the folds (a run stopped early for CPU time, its fold results gathered
from the run folders' ``summary.json``), the peers are scored on those same folds only, so every cell of a row
reads the same test graphs. Only the measured figures: the published anchors are written beside them in
benchmarks/folds.md.

Usage (from the repository root)::

    python benchmarks/folds_table.py benchmarks/out/folds
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

SETS = ("MUTAG", "PROTEINS", "NCI1", "DD", "IMDB-BINARY")
#: Sets outside Errica et al.'s benchmark (no published anchor): their row says so.
OUTSIDE_ERRICA = ("MUTAG",)


def _cell(side: dict[str, Any], seconds: float | None) -> str:
    values, epochs, best = side["test"], side["epochs"], side["best"]
    mean, std = 100 * statistics.fmean(values), 100 * statistics.pstdev(values)
    wall = f", {seconds:.0f} s" if seconds is not None else ""
    sel = f", sel. ≤ {max(best) + 1}" if best and None not in best else ""
    return f"{mean:.2f} ± {std:.2f} ({len(values)} folds, {statistics.fmean(epochs):.0f} ep.{wall}{sel})"


def budget(path: Path) -> str:
    """``cap / patience`` of a peers JSON result's fold runs (``a / b, c / d`` when they differ), or ``—``; a run
    that does not record its own budget has the one its file's ``meta`` gives for graph peers."""
    d = json.loads(path.read_text())
    meta = d.get("meta", {}).get("epochs", {}).get("graph") or [None, None]
    caps = sorted({(r.get("epochs", meta[0]), r.get("patience", meta[1])) for r in d["runs"]} - {(None, None)})
    return ", ".join(f"{e} / {p}" for e, p in caps) or "—"


def xmask_row(path: Path) -> dict[str, Any]:
    """Test accuracies, epochs run and the preset of one ``xmask train --folds`` JSON result."""
    d = json.loads(path.read_text())
    runs = sorted(d["runs"], key=lambda r: (r["seed"], r["fold"]))
    return {"test": [r["metrics"]["test"] for r in runs], "epochs": [r["epochs_run"] for r in runs],
            "best": [r.get("best_epoch") for r in runs],
            "name": d["name"], "seconds": None, "folds": {(r["seed"], r["fold"]) for r in runs}}


def peer_rows(path: Path, folds: set[tuple[int, int]] | None = None) -> dict[str, dict[str, Any]]:
    """Per model: test accuracies, epochs run and summed seconds of one ``peers.py --folds`` JSON result,
    on the ``(seed, fold)`` runs in ``folds`` only when given."""
    d = json.loads(path.read_text())
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(d["runs"], key=lambda r: (r["seed"], r["fold"])):
        if folds is not None and (r["seed"], r["fold"]) not in folds:
            continue
        m = out.setdefault(r["model"], {"test": [], "epochs": [], "best": [], "seconds": 0.0})
        m["test"].append(r["metrics"]["test"])
        m["epochs"].append(r["epochs_run"])
        m["best"].append(r.get("best_epoch"))
        m["seconds"] += r["seconds"]
    return out


def table(folder: Path, walls: dict[str, float]) -> str:
    """Markdown table of the sets found in ``folder``; ``walls`` maps a set to xmask's wall seconds."""
    lines = ["| set | cap / patience | xmask (shipped preset) | GIN, this harness | baseline, this harness |",
             "|---|---|---|---|---|"]
    for ds in SETS:
        xs = folder / f"{ds}-xmask.json"
        ps = folder / f"{ds}-peers.json"
        if not xs.exists() and not ps.exists():
            continue
        cells, x = [budget(ps) if ps.exists() else "—"], None
        if xs.exists():
            x = xmask_row(xs)
            cells.append(_cell(x, walls.get(ds)))
        else:
            cells.append("not measured")
        peers = peer_rows(ps, x["folds"] if x else None) if ps.exists() else {}
        for model in ("GIN", "baseline"):
            p = peers.get(model)
            cells.append(_cell(p, p["seconds"]) if p else "not measured")
        label = f"{ds} (outside Errica's set)" if ds in OUTSIDE_ERRICA else ds
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="folder of <SET>-xmask.json and <SET>-peers.json files")
    p.add_argument("--wall", action="append", default=[], metavar="SET=SECONDS",
                   help="xmask's wall seconds for a set (the JSON result does not carry them); repeatable")
    args = p.parse_args(argv)
    walls = {k: float(v) for k, v in (w.split("=", 1) for w in args.wall)}
    print(table(args.folder, walls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
