"""A sweep: one run per seed (and outer fold) into its own folder, then mean ± std over the runs' summaries."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.errors import UsageError

TINY = ["model.hidden=8", "model.heads=2", "model.layers=1", "train.epochs=1", "train.warmup_epochs=0"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One structure cache for the module: each sweep prepares nothing the previous one made."""
    return tmp_path_factory.mktemp("cache")


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def test_the_aggregate_is_mean_and_std_over_the_runs_summaries(tmp_path, cache):
    result = train_seeds(resolve("graph-level", TINY), [2, 0, 5], cache_dir=cache, run_root=tmp_path)
    root = tmp_path / "mutag-graph"
    assert (result.name, result.level, result.seeds, result.run_root) == ("mutag-graph", "graph", (2, 0, 5), str(root))
    assert sorted(p.name for p in root.iterdir()) == ["0", "2", "5", "aggregate.json"]
    summaries = [_summary(root / s) for s in ("2", "0", "5")]  # training order
    assert [s["seed"] for s in summaries] == [2, 0, 5]
    assert [r.metrics for r in result.runs] == [s["metrics"] for s in summaries]
    assert result.aggregate is not None and set(result.aggregate) == {"train", "val", "test"}
    for part, stats in result.aggregate.items():
        values = np.array([s["metrics"][part] for s in summaries])
        assert stats.values == tuple(values)
        assert stats.mean == pytest.approx(values.mean(), abs=1e-12)
        assert stats.std == pytest.approx(values.std(ddof=0), abs=1e-12)
    on_disk = json.loads((root / "aggregate.json").read_text())
    assert on_disk == json.loads(json.dumps(result.aggregate_json()))
    assert "runs" not in on_disk


def test_one_seed_writes_no_aggregate_file(tmp_path, cache):
    result = train_seeds(resolve("graph-level", TINY), [4], cache_dir=cache, run_root=tmp_path)
    root = tmp_path / "mutag-graph"
    assert sorted(p.name for p in root.iterdir()) == ["4"]
    test = result.aggregate["test"]
    assert (test.mean, test.std) == (_summary(root / "4")["metrics"]["test"], 0.0)


def test_folds_train_the_first_max_folds_of_each_seed(tmp_path, cache):
    cfg = resolve("graph-level", [*TINY, "data.folds=3", "run.name=cv"])
    result = train_seeds(cfg, [1], cache_dir=cache, run_root=tmp_path, max_folds=2)
    seed = tmp_path / "cv" / "1"
    assert sorted(p.name for p in seed.iterdir()) == ["fold-0", "fold-1", "folds"]  # no fold-2: max_folds=2
    summaries = [_summary(seed / f"fold-{i}") for i in (0, 1)]
    assert [(s["fold"], s["folds"]) for s in summaries] == [(0, 3), (1, 3)]
    assert [r.fold for r in result.runs] == [0, 1]
    assert result.folds is not None and (result.folds.k, result.folds.trained) == (3, 2)
    per_seed = result.folds.per_seed["1"]
    for part in ("val", "test"):
        values = np.array([s["metrics"][part] for s in summaries])
        assert per_seed[part].mean == pytest.approx(values.mean(), abs=1e-12)
        assert per_seed[part].std == pytest.approx(values.std(), abs=1e-12)
    # Each run's saved config names its fold, which eval reads back.
    assert [json.loads((seed / f"fold-{i}" / "config.json").read_text())["config"]["data"]["fold"]
            for i in (0, 1)] == [0, 1]


def test_resume_and_overwrite_together_are_refused_before_anything(tmp_path):
    with pytest.raises(UsageError, match="give --resume or --overwrite, not both"):
        train_seeds(resolve("graph-level", TINY), [0], cache_dir=tmp_path / "cache", run_root=tmp_path / "runs",
                    resume=True, overwrite=True)
    assert list(tmp_path.iterdir()) == []


def test_each_run_writes_its_summary_once_labelled_by_the_sweep(tmp_path, cache, monkeypatch):
    """The loop writes summary.json once, with the level, folder and fold the sweep knows; the sweep writes none."""
    from xmask_cli.engine.runs import RunDir

    written: list[tuple[Path, dict]] = []
    real = RunDir.write_summary

    def counted(self: RunDir, summary) -> None:
        written.append((self.path, dict(summary)))
        real(self, summary)

    monkeypatch.setattr(RunDir, "write_summary", counted)
    cfg = resolve("graph-level", [*TINY, "data.folds=3", "run.name=cv"])
    result = train_seeds(cfg, [1], cache_dir=cache, run_root=tmp_path, max_folds=2)
    folders = [tmp_path / "cv" / "1" / f"fold-{i}" for i in (0, 1)]
    assert [path for path, _ in written] == folders  # one write per run
    for i, ((path, summary), run) in enumerate(zip(written, result.runs)):
        assert summary == run.to_json() == _summary(path)
        assert (summary["level"], summary["run_dir"], summary["fold"], summary["folds"]) == ("graph", str(path), i, 3)


def test_a_fold_sweep_killed_mid_fold_resumes_where_it_stopped(tmp_path, cache):
    """``--resume`` after a kill during fold 1: fold 0 (finished) trains no epoch, fold 1 goes on from its
    last epoch, fold 2 starts; every fold ends with the numbers of an uninterrupted sweep."""
    cfg = resolve("graph-level", [*TINY, "data.folds=3", "run.name=cv", "train.epochs=3", "train.patience=50"])
    whole = train_seeds(cfg, [0], cache_dir=cache, run_root=tmp_path / "a")
    fold, trained = [None], []

    def on_epoch(seed: int, row: dict) -> None:
        trained.append((fold[0], row["epoch"]))
        if (fold[0], row["epoch"]) == (1, 1):
            raise KeyboardInterrupt  # the session ends after fold 1's second epoch is checkpointed

    def on_run_start(seed: int, f: int | None, epochs: int) -> None:
        fold[0] = f

    with pytest.raises(KeyboardInterrupt):
        train_seeds(cfg, [0], cache_dir=cache, run_root=tmp_path / "b", on_epoch=on_epoch, on_run_start=on_run_start)
    assert trained == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    trained.clear()
    resumed = train_seeds(cfg, [0], cache_dir=cache, run_root=tmp_path / "b", resume=True,
                          on_epoch=lambda s, row: trained.append((fold[0], row["epoch"])), on_run_start=on_run_start)
    assert trained == [(1, 2), (2, 0), (2, 1), (2, 2)]
    assert [r.fold for r in resumed.runs] == [0, 1, 2]
    for got, want in zip(resumed.runs, whole.runs):
        assert (got.metrics, got.best_epoch, got.epochs_run) == (want.metrics, want.best_epoch, want.epochs_run)
    lines = (tmp_path / "b" / "cv" / "0" / "fold-1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["epoch"] for ln in lines] == [0, 1, 2]
