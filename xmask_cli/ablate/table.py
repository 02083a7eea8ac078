"""The ablation's table: each variant's mean ± std over its runs, its difference from ``full`` (of the means
and run by run), and ``ablation.csv``.

Every variant trains the same seeds (and, with ``--folds``, the same outer folds of each seed), so a run of a
variant and the run of ``full`` under the same key share their split and test set. The paired difference
per run leaves out the spread between splits, which the rows' own stds hold: on a small graph set the
folds differ by several points, more than most variants differ from ``full``.

Example::

    rows = with_deltas(rows)          # full first
    print(rows[1].paired.mean, rows[1].paired.above, rows[1].paired.below)
    Path("ablation.csv").write_text(csv_text(result))
"""
from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence

from xmask_cli.results_ablation import AblationResult, AblationRow, PairedDelta

__all__ = ["CSV_COLUMNS", "mean_std", "paired_delta", "with_deltas", "csv_text"]

#: ``ablation.csv``'s header: per variant one ``all`` row (its summary), then one row per run.
CSV_COLUMNS = ("variant", "status", "metric", "run", "seed", "fold", "val", "val_std", "test", "test_std",
               "delta_test", "paired_delta", "paired_std", "above", "below", "ties", "error")


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and population std (``ddof=0``) of ``values``; ``(None, None)`` without one."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def paired_delta(row: AblationRow, full: AblationRow | None) -> PairedDelta | None:
    """``row``'s test metric minus ``full``'s, run by run over the runs both have (``full``'s order);
    None for ``full`` itself, without ``full`` or without a shared run."""
    if full is None or row.variant == full.variant:
        return None
    keys = [k for k in full.runs if k in row.runs and "test" in row.runs[k] and "test" in full.runs[k]]
    if not keys:
        return None
    values = {k: row.runs[k]["test"] - full.runs[k]["test"] for k in keys}
    mean, std = mean_std(list(values.values()))
    assert mean is not None and std is not None
    return PairedDelta(values=values, mean=mean, std=std, above=sum(d > 0 for d in values.values()),
                       below=sum(d < 0 for d in values.values()), ties=sum(d == 0 for d in values.values()))


def with_deltas(rows: Sequence[AblationRow]) -> tuple[AblationRow, ...]:
    """``rows`` with ``delta_test`` (difference of the test means) and ``paired`` filled in against the
    ``full`` row."""
    full = next((r for r in rows if r.variant == "full"), None)

    def delta(row: AblationRow) -> float | None:
        if full is None or full.test_mean is None or row.test_mean is None:
            return None
        return row.test_mean - full.test_mean

    return tuple(dataclasses.replace(r, delta_test=delta(r), paired=paired_delta(r, full)) for r in rows)


def _run_cells(key: str) -> tuple[str, str]:
    """The seed and fold of a run key (``"0"``, ``"0/fold-3"``); the fold empty on the dataset's split."""
    seed, _, fold = key.partition("/")
    return seed, fold.removeprefix("fold-")


def csv_text(result: AblationResult) -> str:
    """``ablation.csv``: per variant its summary row (``run`` = ``all``: means, stds, the difference of the
    means, the paired difference's mean and std, the runs above / below / tied with ``full``), then a row per
    run (its val and test, and in ``paired_delta`` its test minus ``full``'s on the same run)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for r in result.rows:
        p = r.paired
        writer.writerow([r.variant, r.status, result.metric, "all", "", "", r.val_mean, r.val_std, r.test_mean,
                         r.test_std, r.delta_test, None if p is None else p.mean, None if p is None else p.std,
                         None if p is None else p.above, None if p is None else p.below,
                         None if p is None else p.ties, r.error or ""])
        for key, metrics in r.runs.items():
            writer.writerow([r.variant, r.status, result.metric, key, *_run_cells(key), metrics.get("val"), "",
                             metrics.get("test"), "", "", None if p is None else p.values.get(key), "", "", "",
                             "", ""])
    return buf.getvalue()
