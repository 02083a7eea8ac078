"""``xmask ablate``: every variant's row, its config, reuse of finished runs, failures kept in their row."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmask_cli.ablate import CORE_VARIANTS as VARIANTS
from xmask_cli.ablate import parse_variants, run_ablation
from xmask_cli.cli import app
from xmask_cli.engine.runs import sweep
from xmask_cli.errors import UsageError
from xmask_cli.results_ablation import AblationResult

TINY = ["model.hidden=8", "model.heads=2", "model.layers=2", "train.epochs=2", "train.warmup_epochs=1",
        "structure.spd.enabled=false", "structure.spectrum.enabled=false"]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("ablate")
    result = run_ablation("graph-level", TINY, seeds=[0, 1], out_dir=root / "abl", cache_dir=root / "cache")
    return root, result


def test_every_variant_has_a_row_with_its_config(ablation):
    root, result = ablation
    assert [r["variant"] for r in result["rows"]] == list(VARIANTS)
    runs = root / "abl" / "runs"
    configs = {v: json.loads((runs / f"mutag-graph-{v}" / "0" / "config.json").read_text()) for v in VARIANTS}
    assert configs["full"]["config"]["structure"]["powers"]["normalization"] == "sym"
    assert configs["no-symnorm"]["config"]["structure"]["powers"]["normalization"] == "no-symnorm"
    assert configs["no-symnorm"]["cache_path"] != configs["full"]["cache_path"]  # other structure, prepared
    assert configs["full"]["model"]["use_bias"] and not configs["no-logmask"]["model"]["use_bias"]
    assert configs["full"]["model"]["head_powers"] == [1, 2] and configs["no-multihead"]["model"]["head_powers"] == [1, 1]
    assert configs["full"]["model"]["layers"] == 2 and configs["one-layer"]["model"]["layers"] == 1
    # Same protocol: every variant trains on the same split for a seed.
    assert len({json.dumps(c["split"]) for c in configs.values()}) == 1


def test_table_numbers_and_files(ablation):
    root, result = ablation
    full = result["rows"][0]
    for row in result["rows"]:
        tests = [m["test"] for m in row["runs"].values()]
        assert row["status"] == "ok" and len(tests) == 2
        assert row["test_mean"] == pytest.approx(sum(tests) / 2)
        assert row["delta_test"] == pytest.approx(row["test_mean"] - full["test_mean"])
    with (root / "abl" / "ablation.csv").open() as f:
        table = list(csv.DictReader(f))
    # Per variant its summary row, then one row per seed with that seed's numbers.
    assert [(r["variant"], r["run"]) for r in table] == [(v, k) for v in VARIANTS for k in ("all", "0", "1")]
    for r in table:
        row = next(x for x in result.rows if x.variant == r["variant"])
        want = (row.test_mean, row.delta_test) if r["run"] == "all" else (row.runs[r["run"]]["test"], None)
        assert (float(r["test"]), float(r["delta_test"]) if r["delta_test"] else None) == pytest.approx(want)
    assert json.loads((root / "abl" / "ablation.json").read_text())["rows"] == json.loads(json.dumps(result["rows"]))
    saved = AblationResult.from_json(json.loads((root / "abl" / "ablation.json").read_text()))
    assert saved == result and saved.rows[0].variant == "full"  # the file reads back to the result
    # The runs are train's: the same selection rule, recorded in the table and in every run's summary.
    from xmask_cli.engine.training.selection import RULE

    assert result["selection"] == RULE
    summaries = list((root / "abl" / "runs").glob("*/*/summary.json"))
    assert len(summaries) == 2 * len(result["rows"])
    for summary in summaries:
        assert json.loads(summary.read_text())["selection"]["rule"] == RULE


def test_rerun_reuses_finished_runs(ablation, monkeypatch):
    root, result = ablation

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(sweep, "train_seeds", no_training)
    again = run_ablation("graph-level", TINY, seeds=[0, 1], out_dir=root / "abl", cache_dir=root / "cache")
    assert all(r["reused"] == [0, 1] for r in again["rows"])
    assert [r["test_mean"] for r in again["rows"]] == [r["test_mean"] for r in result["rows"]]


def test_a_failing_variant_is_reported_in_its_row(tmp_path, monkeypatch):
    real = sweep.train_seeds

    def flaky(cfg, seeds, **kw):
        if not cfg.model.use_bias:
            raise RuntimeError("out of memory (simulated)")
        return real(cfg, seeds, **kw)

    monkeypatch.setattr(sweep, "train_seeds", flaky)
    result = run_ablation("graph-level", TINY, seeds=[0], out_dir=tmp_path / "abl", cache_dir=tmp_path / "cache",
                          variants=["no-logmask", "one-layer"])
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == ["full", "no-logmask", "one-layer"]  # full always first: deltas need it
    assert rows["no-logmask"]["status"] == "failed" and "out of memory" in rows["no-logmask"]["error"]
    assert rows["no-logmask"]["test_mean"] is None and rows["no-logmask"]["delta_test"] is None
    assert rows["full"]["status"] == rows["one-layer"]["status"] == "ok"


def test_parse_variants():
    assert parse_variants(None) == list(VARIANTS)
    assert parse_variants("one-layer,no-logmask") == ["full", "one-layer", "no-logmask"]
    for bad in ("nope", "full,full"):
        with pytest.raises(UsageError):
            parse_variants(bad)


def test_cli_json_and_bad_variant(ablation):
    root, result = ablation
    runner = CliRunner()
    r = runner.invoke(app, ["--format", "json", "ablate", "--preset", "graph-level", *sum((["--set", s] for s in TINY), []),
                            "--seeds", "0-1", "--variants", "no-logmask", "--out", str(root / "abl"),
                            "--cache-dir", str(root / "cache"), "--device", "cpu"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [row["variant"] for row in out["rows"]] == ["full", "no-logmask"]
    assert out["rows"][1]["test_mean"] == result["rows"][2]["test_mean"]  # read back, same numbers
    r = runner.invoke(app, ["ablate", "--variants", "no-such", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 2 and "unknown ablation variant" in r.stderr
    assert runner.invoke(app, ["ablate", "--help"]).stdout.count("Examples") == 1


def test_bias_variants_drop_exactly_their_bias(tmp_path):
    from xmask_cli.ablate import default_variants, variant_overrides
    from xmask_cli.config_resolve import resolve

    base = resolve("graph-level", ["model.biases=[{type: spd}, {type: eigen, heads: [1]}, {type: spd, layers: [1]}]"])
    assert default_variants(base) == [*VARIANTS, "no-spd", "no-eigen"]
    assert parse_variants(None, base) == default_variants(base)
    kept = resolve("graph-level", [*variant_overrides("no-spd", base)]).model.biases
    assert [(b.type, b.heads) for b in kept] == [("eigen", [1])]
    assert resolve("graph-level", variant_overrides("no-eigen", base)).model.biases == [
        b for b in base.model.biases if b.type == "spd"]
    with pytest.raises(UsageError, match="no rrwp bias"):
        variant_overrides("no-rrwp", base)

    # End to end: the no-spd run's saved model has no SPD bias, the full one has.
    result = run_ablation("graph-level", [*TINY, "structure.spd.enabled=true", "model.biases=[{type: spd}]"],
                          seeds=[0], out_dir=tmp_path / "abl", cache_dir=tmp_path / "cache", variants=["no-spd"])
    assert [r["status"] for r in result["rows"]] == ["ok", "ok"]
    runs = tmp_path / "abl" / "runs"
    full = json.loads((runs / "mutag-graph-full" / "0" / "config.json").read_text())
    nospd = json.loads((runs / "mutag-graph-no-spd" / "0" / "config.json").read_text())
    assert [b["type"] for b in full["model"]["biases"]] == ["spd"] and nospd["model"]["biases"] == []


@pytest.mark.parametrize("plant", ["file", "read-only", "table-folder"])
def test_an_out_that_cannot_take_the_tables_is_refused_before_any_training(tmp_path, monkeypatch, read_only_tmpfs,
                                                                           plant):
    """--out a file or on a read-only mount exits 5, a folder planted at ablation.json exits 2 naming it: before
    the first variant trains, not after the last."""
    monkeypatch.setattr(sweep, "train_seeds", lambda *a, **k: pytest.fail("trained"))
    out, code, needle = tmp_path / "abl", 5, "is a file, not a folder"
    if plant == "file":
        out.write_text("x")
    elif plant == "read-only":
        out, needle = read_only_tmpfs() / "abl", "read-only file system"
    else:
        (out / "ablation.json").mkdir(parents=True)
        code, needle = 2, f"{out / 'ablation.json'} is a folder, not a file"
    r = CliRunner().invoke(app, ["ablate", "--preset", "graph-level", "--seeds", "0", "--out", str(out),
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == code and r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert needle in r.stderr and ("--out" in r.stderr or code == 2)
    assert not (tmp_path / "cache").exists()


def test_the_variants_read_the_dataset_once(tmp_path, monkeypatch):
    """Every variant's sweep takes the dataset the first one read (each still prepares its own structure)."""
    from xmask_cli.engine.runs import data

    loads: list[str] = []
    real = data.load_graphs
    monkeypatch.setattr(data, "load_graphs", lambda spec, **kw: loads.append(spec.name) or real(spec, **kw))
    result = run_ablation("graph-level", TINY, seeds=[0, 1], variants=["full", "no-symnorm"], out_dir=tmp_path / "abl",
                          cache_dir=tmp_path / "cache")
    assert [r.status for r in result.rows] == ["ok", "ok"] and loads == ["MUTAG"]  # 4 runs, one read
    runs = tmp_path / "abl" / "runs"
    caches = {json.loads((runs / f"mutag-graph-{v}" / "0" / "config.json").read_text())["cache_path"]
              for v in ("full", "no-symnorm")}
    assert len(caches) == 2  # the structure differs, so each variant prepared its own cache from the one dataset
