"""explain.run: refusals before any work, and the CLI's JSON equal to the library call."""
from __future__ import annotations

import pytest

from xmask_cli.errors import UsageError
from xmask_cli.explain import ExplainRequest, explain_run


def test_usage_errors(mutag):
    root = mutag["root"]
    with pytest.raises(UsageError, match="out of range"):
        explain_run(mutag["run"], ExplainRequest(graphs=[10_000]), out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="graph-level"):
        explain_run(mutag["run"], ExplainRequest(nodes=[0]), out_dir=root / "bad", cache_dir=root / "cache")
    with pytest.raises(UsageError, match="nothing to explain"):
        explain_run(mutag["run"], ExplainRequest(), out_dir=root / "bad", cache_dir=root / "cache")
    # An expert (M3Dphormer) run has no single attention per head to record: refused before loading anything.
    import json
    import shutil

    expert_run = root / "expert-run" / "0"
    shutil.copytree(mutag["run"], expert_run)
    saved = json.loads((expert_run / "config.json").read_text())
    saved["level"], saved["model"]["experts"] = "node", ["local", "global"]
    (expert_run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="M3Dphormer"):
        explain_run(expert_run, ExplainRequest(nodes=[0]), out_dir=root / "bad", cache_dir=root / "cache")


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


def test_a_run_without_the_log_mask_reports_k_0_in_its_summary_and_its_maps(mutag, tmp_path):
    """`use_bias: false` adds no Â^k: the JSON summary and maps.h5 both say k = 0 for every head
    (before, the graph/node summary said the configured power while maps.h5 said 0)."""
    import json
    import shutil

    import h5py
    import torch

    run = tmp_path / "plain" / "0"
    shutil.copytree(mutag["run"], run)
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["head_powers"] and any(k > 0 for k in saved["model"]["head_powers"])
    saved["model"]["use_bias"] = False  # no parameter depends on it: the weights load as they are
    (run / "config.json").write_text(json.dumps(saved))
    best = torch.load(run / "best.pt", weights_only=True)
    best["config"] = json.dumps(saved, sort_keys=True)  # as a run trained with use_bias false records it
    torch.save(best, run / "best.pt")
    out = explain_run(run, ExplainRequest(graphs=[5]), out_dir=tmp_path / "maps", cache_dir=mutag["root"] / "cache")
    summary = out["targets"][0]["hop_summary"]
    assert {head["k"] for layer in summary.values() for head in layer.values()} == {0}
    with h5py.File(tmp_path / "maps" / "maps.h5", "r") as f:
        ks = []
        f.visititems(lambda name, obj: ks.append(int(obj.attrs["k"])) if "k" in obj.attrs else None)
    assert ks and set(ks) == {0}
    # The trained run itself (use_bias: true) reports its configured powers in both places.
    ref = next(t for t in mutag["result"]["targets"] if t["name"] == "graph_5")["hop_summary"]
    assert [h["k"] for h in ref["layer_0"].values()] == saved["model"]["head_powers"][:len(ref["layer_0"])]


def test_a_request_is_normalised_and_checked_before_any_run_is_read():
    """ExplainRequest holds tuples of ints and refuses what needs no run to refuse."""
    request = ExplainRequest(graphs=["2"], edges=["3,9", (4, 5)])
    assert request.graphs == (2,) and request.edges == ((3, 9), (4, 5)) and request.nodes == ()
    with pytest.raises(UsageError, match="nothing to explain"):
        ExplainRequest()
    with pytest.raises(UsageError, match="--max-nodes 1"):
        ExplainRequest(nodes=[0], max_nodes=1)
    with pytest.raises(UsageError, match="--edge"):
        ExplainRequest(edges=["3"])


@pytest.mark.parametrize("plant", ["read-only", "maps-folder"])
def test_an_out_that_cannot_take_the_maps_is_refused_before_the_model_runs(mutag, tmp_path, monkeypatch,
                                                                          read_only_tmpfs, plant):
    """--out on a read-only mount exits 5, a folder planted at maps.h5 exits 2 naming it, before the run is
    rebuilt (the model never runs)."""
    from tests.cli_helpers import one_error_line, run
    from xmask_cli.explain import run as explain_module

    monkeypatch.setattr(explain_module, "rebuild_run", lambda *a, **k: pytest.fail("the run was rebuilt"))
    if plant == "read-only":
        out, code, needle = read_only_tmpfs() / "maps", 5, "read-only file system"
    else:
        out = tmp_path / "maps"
        (out / "maps.h5").mkdir(parents=True)
        code, needle = 2, f"{out / 'maps.h5'} is a folder, not a file"
    r = run("explain", str(mutag["run"]), "--graph", "0", "--out", str(out), "--device", "cpu",
            "--cache-dir", str(mutag["root"] / "cache"))
    assert r.exit_code == code and needle in one_error_line(r)
