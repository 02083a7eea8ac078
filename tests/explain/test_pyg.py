"""explain.pyg: the Explanations `--pyg` saves and `LoadedRun.explain` returns hold maps.h5's attention."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from xmask_cli.explain import ExplainRequest, explain_run


def _load(path: str):
    return torch.load(path, weights_only=False)  # a pickled Explanation, written by the test's own run


def _expected(h5: Path, name: str, layer: int, head: int | None) -> tuple[dict, np.ndarray, np.ndarray]:
    """From maps.h5 alone: {(src id, dst id): attention dst pays src} on the crop's edges, both directions;
    the query's attention row (by position in node_ids); node_ids."""
    with h5py.File(h5, "r") as f:
        g = f[name]
        ids = g["node_ids"][()]
        heads = sorted(int(k.split("_")[1]) for k in g[f"layer_{layer}"])
        stack = np.stack([g[f"layer_{layer}/head_{h}/attention"][()].astype(np.float64) for h in heads])
        a = stack.mean(0) if head is None else stack[head]
        edges = g["graph/edges"][()]
        q = int(np.flatnonzero(ids == g["graph"].attrs["query"])[0])
    want = {}
    for u, v in edges.T:
        want[(int(ids[u]), int(ids[v]))] = a[v, u]  # v attends u: message u -> v
        want[(int(ids[v]), int(ids[u]))] = a[u, v]
    return want, a[q], ids


def _check(e, h5: Path, name: str, layer: int, head: int | None) -> None:
    want, row, ids = _expected(h5, name, layer, head)
    np.testing.assert_array_equal(e.node_ids.numpy(), ids)
    got = {(int(ids[s]), int(ids[d])): float(m) for (s, d), m in zip(e.edge_index.t().tolist(), e.edge_mask)}
    assert set(got) == set(want) and len(got) == e.edge_index.shape[1] > 0
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-6)
    np.testing.assert_allclose(e.node_mask[:, 0].numpy(), row, atol=1e-6)
    assert e.node_mask.shape == (len(ids), 1) and e.x.shape[0] == len(ids)
    assert (e.layer, e.head, e.target_name) == (layer, -1 if head is None else head, name)
    e.validate(raise_on_error=True)


def test_mutag_saved_explanations_match_maps_and_draw(mutag, tmp_path):
    from tests.explain.runs import graph_batch

    root = mutag["root"]
    out = explain_run(mutag["run"], ExplainRequest(graphs=[0, 5], view="matrix", pyg=True, layer=0, head=1),
                      out_dir=tmp_path / "a", cache_dir=root / "cache")
    h5 = Path(out["files"]["maps"])
    assert set(out["files"]["explanations"]) == {"graph_0", "graph_5"}
    for name, path in out["files"]["explanations"].items():
        assert Path(path).name == f"{name}_explanation.pt" and Path(path).parent == h5.parent
        _check(_load(path), h5, name, 0, 1)
    # x is the graph's input features, rebuilt independently of explain.
    e = _load(out["files"]["explanations"]["graph_5"])
    batch, _, n = graph_batch(mutag, 5)
    np.testing.assert_allclose(e.x.numpy(), batch.x[0, :n][e.node_ids].float().numpy(), atol=0)
    # Default: the last layer, the mean over its heads.
    out = explain_run(mutag["run"], ExplainRequest(graphs=[5], view="matrix", pyg=True),
                      out_dir=tmp_path / "b", cache_dir=root / "cache")
    e = _load(out["files"]["explanations"]["graph_5"])
    _check(e, Path(out["files"]["maps"]), "graph_5", 1, None)
    import matplotlib

    matplotlib.use("Agg")
    e.visualize_graph(str(tmp_path / "g.png"), backend="networkx")
    assert (tmp_path / "g.png").stat().st_size > 1000
    # PyG's subgraph of the explanation keeps the node ids in step with x (node_ids is a node attribute).
    sub, rest = e.get_explanation_subgraph(), e.get_complement_subgraph()
    _, row, ids = _expected(Path(out["files"]["maps"]), "graph_5", 1, None)
    np.testing.assert_array_equal(sub.node_ids.numpy(), ids[row > 0])  # the nodes the query attends
    np.testing.assert_array_equal(rest.node_ids.numpy(), ids[row == 0])
    assert sub.x.shape[0] == len(sub.node_ids) and rest.x.shape[0] == len(rest.node_ids)


def test_loaded_run_explain_equals_the_saved_files(mutag, tmp_path):
    from xmask_cli.api import load_run
    from xmask_cli.errors import UsageError

    loaded = load_run(mutag["run"], cache_dir=mutag["root"] / "cache")
    got = loaded.explain(graphs=[0], layer=0, head=0)
    out = explain_run(mutag["run"], ExplainRequest(graphs=[0], view="matrix", pyg=True, layer=0, head=0),
                      out_dir=tmp_path / "a", cache_dir=mutag["root"] / "cache")
    saved = _load(out["files"]["explanations"]["graph_0"])
    for key in ("x", "edge_index", "edge_mask", "node_mask", "node_ids"):
        assert torch.equal(got["graph_0"][key], saved[key]), key
    _check(got["graph_0"], Path(out["files"]["maps"]), "graph_0", 0, 0)
    with pytest.raises(UsageError, match="--head 2"):
        loaded.explain(graphs=[0], head=2)
    with pytest.raises(UsageError, match="graph-level"):
        loaded.explain(nodes=[0])


def test_cora_node_and_edge_explanations_match_maps(cora, tmp_path):
    from xmask_cli.api import load_run
    from xmask_cli.engine.runs.experiment import Experiment

    root = cora["root"]
    out = explain_run(cora["run"], ExplainRequest(nodes=[0], edges=["3,9"], max_nodes=24, view="matrix", pyg=True),
                      out_dir=tmp_path / "out", cache_dir=root / "cache")
    h5 = Path(out["files"]["maps"])
    with h5py.File(h5, "r") as f:
        last = max(int(k.split("_")[1]) for k in f["node_0"] if k.startswith("layer_"))  # the default layer
    feats = Experiment.load(cora["cfg"], cache_dir=root / "cache").graphs.dataset[0].x
    for name in ("node_0", "edge_3_9"):
        e = _load(out["files"]["explanations"][name])
        _check(e, h5, name, last, None)
        assert e.num_nodes == 24
        np.testing.assert_allclose(e.x.numpy(), feats[e.node_ids].numpy(), atol=1e-6)
    got = load_run(cora["run"], cache_dir=root / "cache").explain(nodes=[0], max_nodes=24)["node_0"]
    assert torch.equal(got.edge_mask, _load(out["files"]["explanations"]["node_0"]).edge_mask)


def test_cli_pyg_saves_loadable_files_and_refuses_links(mutag, tmp_path):
    from typer.testing import CliRunner

    from xmask_cli.cli import app

    runner = CliRunner()
    common = ["--cache-dir", str(mutag["root"] / "cache"), "--device", "cpu", "--view", "matrix"]
    folder = tmp_path / "maps"
    r = runner.invoke(app, ["explain", str(mutag["run"]), "--graph", "5", "--pyg", "--head", "0",
                            "--out", str(folder), *common])
    assert r.exit_code == 0, r.stderr
    assert "graph_5_explanation.pt" in r.stdout
    _check(_load(str(folder / "graph_5_explanation.pt")), folder / "maps.h5", "graph_5", 1, 0)
    r = runner.invoke(app, ["explain", str(mutag["run"]), "--graph", "5", "--pyg", "--head", "7",
                            "--out", str(tmp_path / "x"), *common])
    assert r.exit_code == 2 and r.stderr.startswith("error: --head 7") and len(r.stderr.strip().splitlines()) == 1
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "graph_5_explanation.pt").symlink_to(victim)
    r = runner.invoke(app, ["explain", str(mutag["run"]), "--graph", "5", "--pyg", "--out", str(planted), *common])
    assert r.exit_code == 2 and "symbolic link" in r.stderr and victim.read_text() == "keep"


def test_pyg_and_head_are_checked_before_any_data_loads(tmp_path):
    from xmask_cli.errors import UsageError
    from xmask_cli.explain.run import check_request

    saved = {"level": "image", "model": {"layers": 1, "heads": 2}}
    with pytest.raises(UsageError, match="--pyg and --head"):
        check_request(ExplainRequest(images=[0], pyg=True), tmp_path, saved)
    with pytest.raises(UsageError, match="--pyg and --head"):
        check_request(ExplainRequest(images=[0], head=0), tmp_path, saved)
    assert check_request(ExplainRequest(images=[0]), tmp_path, saved) == "image"
    graph_run = {"level": "graph", "model": {"layers": 2, "heads": 2}}
    with pytest.raises(UsageError, match="add --pyg"):
        check_request(ExplainRequest(graphs=[0], head=0), tmp_path, graph_run)
    with pytest.raises(UsageError, match="--head 2: the run's model has heads 0..1"):
        check_request(ExplainRequest(graphs=[0], head=2, pyg=True), tmp_path, graph_run)
    assert check_request(ExplainRequest(graphs=[0], head=1, pyg=True), tmp_path, graph_run) == "graph"
