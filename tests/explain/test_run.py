"""explain.run: refusals before any work, and the CLI's JSON equal to the library call."""
from __future__ import annotations

import pytest

from xmask_cli.errors import UsageError
from xmask_cli.explain import explain_run


def test_usage_errors(mutag):
    root = mutag["root"]
    with pytest.raises(UsageError, match="out of range"):
        explain_run(mutag["run"], graphs=[10_000], out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="graph-level"):
        explain_run(mutag["run"], nodes=[0], out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="nothing to explain"):
        explain_run(mutag["run"], out_dir=root / "bad", cache_dir=root / "cache")
    # An expert (M3Dphormer) run has no single attention per head to record: refused before loading anything.
    import json
    import shutil

    expert_run = root / "expert-run" / "0"
    shutil.copytree(mutag["run"], expert_run)
    saved = json.loads((expert_run / "config.json").read_text())
    saved["level"], saved["model"]["experts"] = "node", ["local", "global"]
    (expert_run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="M3Dphormer"):
        explain_run(expert_run, nodes=[0], out_dir=root / "bad", cache_dir=root / "cache")


def test_cli_explain_json_and_errors(mutag, tmp_path):
    import json

    from typer.testing import CliRunner

    from xmask_cli.cli import app

    runner = CliRunner()
    common = ["--cache-dir", str(mutag["root"] / "cache"), "--device", "cpu"]
    r = runner.invoke(app, ["--format", "json", "explain", str(mutag["run"]), "--graph", "5", "--out",
                            str(tmp_path / "maps"), *common])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [t["name"] for t in out["targets"]] == ["graph_5"]
    assert (tmp_path / "maps" / "maps.h5").is_file() and (tmp_path / "maps" / "graph_5.png").is_file()
    # The same numbers as the library call on the same run.
    assert out["targets"][0]["hop_summary"] == next(t for t in mutag["result"]["targets"]
                                                    if t["name"] == "graph_5")["hop_summary"]
    r = runner.invoke(app, ["explain", str(mutag["run"]), "--node", "3", *common])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["explain", str(tmp_path / "nope"), "--graph", "0", *common])
    assert r.exit_code == 6
    assert "Examples" in runner.invoke(app, ["explain", "--help"]).stdout
