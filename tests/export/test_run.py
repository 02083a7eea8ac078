"""``export_run`` on two tiny trained runs (MUTAG graph level, Cora node level): the written program's outputs
on the test set against the predictions ``xmask eval`` scores, and on graph and node counts never seen while
tracing against the eager model; the ONNX model likewise where onnxruntime is installed."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from xmask_cli.api import load_run
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.batching.features import input_features
from xmask_cli.engine.runs.evaluate import read_run, rebuild_run
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.export import (
    META,
    ExportRefused,
    choose_path,
    dense_graph,
    graph_inputs,
    pairs_graph,
    read_rows,
    run_inputs,
)
from xmask_cli.export.run import export_run

TOL = 1e-5
TINY = ["model.hidden=8", "model.heads=2", "model.head_powers=[1,2]", "structure.powers.k=2", "train.epochs=2",
        "train.warmup_epochs=1"]


def _train(root: Path, preset: str, dataset: str) -> tuple[Path, Path]:
    train_seeds(resolve(preset, [f"data.dataset={dataset}", *TINY]), [0], cache_dir=root / "cache",
                run_root=root / "runs", offline=True)
    (config,) = (root / "runs").rglob("config.json")
    return config.parent, root / "cache"


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory) -> tuple[Path, Path]:
    return _train(tmp_path_factory.mktemp("mutag"), "graph-level", "MUTAG")


@pytest.fixture(scope="module")
def node_run(tmp_path_factory) -> tuple[Path, Path]:
    return _train(tmp_path_factory.mktemp("cora"), "node-level", "cora")


def _eval_predictions(folder: Path, cache: Path) -> torch.Tensor:
    """The test outputs ``xmask eval`` scores (the Python API's ``LoadedRun.predict``)."""
    outputs, _ = load_run(folder, cache_dir=cache, offline=True).predict("test")
    return outputs


def _rebuilt(folder: Path, cache: Path):
    run, saved = read_run(folder)
    return rebuild_run(run, saved, cache_dir=cache, offline=True)


def test_the_graph_program_gives_evals_predictions_on_the_test_set(graph_run, tmp_path):
    folder, cache = graph_run
    out = tmp_path / "mutag.pt2"
    result = export_run(folder, cache_dir=cache, out=out, offline=True)
    assert (result.path, result.to, result.level, result.out) == ("dense", "torch", "graph", str(out))
    assert result.inputs == {"x": ["B", "N", result.inputs["x"][2]], "powers": ["B", 2, "N", "N"], "mask": ["B", "N"]}
    assert result.size_bytes == out.stat().st_size > 0 and result.export_s > 0
    extra = {META: ""}
    program = torch.export.load(out, extra_files=extra)
    assert json.loads(extra[META])["inputs"] == result.inputs
    exp, task, _ = _rebuilt(folder, cache)
    features, _ = input_features(exp.graphs, exp.cfg.model.node_struct, exp.cache_path)
    test = [int(g) for g in task.split.test]
    want = _eval_predictions(folder, cache)
    assert result.checked == len(test) == len(want) > 2 and result.max_abs_diff <= TOL
    run = program.module()
    # Batches of 3, every test graph in one batch (a graph count never seen: traced on 2), one graph at a time.
    for size in (3, len(test), 1):
        got = torch.cat([run(*inputs) for _, inputs in graph_inputs(exp.cache_path, features, test, 2, size)])
        assert (got - want).abs().max() <= TOL
    # The public builder: the same batches, in the split's order.
    batches = run_inputs(folder, "test", cache_dir=cache, offline=True, batch_size=5)
    assert [g for ids, _ in batches for g in ids] == test
    assert (torch.cat([run(*inputs) for _, inputs in batches]) - want).abs().max() <= TOL
    # A node count never seen (60, above MUTAG's largest graph, 28): the same outputs with more padding.
    (_, (x, powers, mask)), = graph_inputs(exp.cache_path, features, test, 2, len(test))
    pad = 60 - x.size(1)
    wide = run(torch.nn.functional.pad(x, (0, 0, 0, pad)), torch.nn.functional.pad(powers, (0, pad, 0, pad)),
               torch.nn.functional.pad(mask, (0, pad)))
    assert x.size(1) < 60 and (wide - want).abs().max() <= TOL


def _subgraph(cache_path: Path, x: torch.Tensor, nodes: int) -> tuple[torch.Tensor, ...]:
    """The induced subgraph of the first ``nodes`` nodes: ``(x, edge_index, values)`` of its stored pairs."""
    x_all, edge_index, values = pairs_graph(cache_path, x, 2)
    keep = (edge_index < nodes).all(0)
    return x_all[:nodes], edge_index[:, keep], values[keep]


def test_node_programs_pairs_and_dense_give_evals_predictions_and_take_other_node_counts(node_run, tmp_path):
    folder, cache = node_run
    pairs = export_run(folder, cache_dir=cache, out=tmp_path / "pairs.pt2", offline=True)
    dense = export_run(folder, cache_dir=cache, out=tmp_path / "dense.pt2", path="dense", offline=True)
    # A Cora run on the CPU attends over its stored pairs (auto): its program is the pairs path.
    assert (pairs.path, dense.path) == ("pairs", "dense")
    assert pairs.inputs["edge_index"] == [2, "E"] and dense.inputs["powers"] == [1, 2, "N", "N"]
    exp, task, model = _rebuilt(folder, cache)
    want = _eval_predictions(folder, cache)
    test = torch.from_numpy(task.split.test)
    x, edge_index, values = pairs_graph(exp.cache_path, task.x, 2)
    run_pairs = torch.export.load(tmp_path / "pairs.pt2").module()
    run_dense = torch.export.load(tmp_path / "dense.pt2").module()
    assert (run_pairs(x, edge_index, values)[test] - want).abs().max() <= TOL
    (ids, inputs), = run_inputs(folder, "test", cache_dir=cache, offline=True)  # the pairs path, as eval runs
    assert ids == test.tolist() and torch.equal(inputs[1], edge_index)
    assert (read_rows(run_pairs(*inputs), ids) - want).abs().max() <= TOL
    dense_x, powers, mask = dense_graph(exp.cache_path, task.x, 2)
    assert (run_dense(dense_x, powers, mask)[0, test] - want).abs().max() <= TOL
    assert pairs.max_abs_diff <= TOL and dense.max_abs_diff <= TOL and pairs.checked == len(test)
    # 600 nodes (traced on 2708): the pairs program against the eager sparse path, the dense one against dense.
    sx, sei, sval = _subgraph(exp.cache_path, task.x, 600)
    sp = torch.zeros(1, 2, 600, 600)
    sp[0, :, sei[0], sei[1]] = sval.T
    ones = torch.ones(1, 600, dtype=torch.bool)
    with torch.no_grad():
        eager_sparse, eager_dense = model.forward_sparse(sx, sei, sval), model.forward_dense(sx[None], sp, ones)
    assert (run_pairs(sx, sei, sval) - eager_sparse).abs().max() <= TOL
    assert (run_dense(sx[None], sp, ones) - eager_dense).abs().max() <= TOL


def test_the_program_is_written_by_rename_with_the_usual_mode(graph_run, tmp_path):
    folder, cache = graph_run
    out = tmp_path / "m.pt2"
    out.write_bytes(b"an older export")
    export_run(folder, cache_dir=cache, out=out, offline=True)
    assert out.read_bytes()[:2] == b"PK"  # a .pt2 is a zip archive
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]  # no temporary file left beside it
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_the_onnx_model_gives_evals_predictions_on_the_test_set(graph_run, tmp_path):
    ort = pytest.importorskip("onnxruntime")  # the [onnx] extra's packages and a runtime to run the model
    pytest.importorskip("onnxscript")
    folder, cache = graph_run
    out = tmp_path / "mutag.onnx"
    result = export_run(folder, cache_dir=cache, out=out, to="onnx", offline=True)
    assert result.to == "onnx" and result.size_bytes == out.stat().st_size
    session = ort.InferenceSession(str(out))
    assert [i.name for i in session.get_inputs()] == ["x", "powers", "mask"]
    exp, task, _ = _rebuilt(folder, cache)
    features, _ = input_features(exp.graphs, exp.cfg.model.node_struct, exp.cache_path)
    got = np.concatenate([session.run(None, {"x": x.numpy(), "powers": p.numpy(), "mask": m.numpy()})[0]
                          for _, (x, p, m) in graph_inputs(exp.cache_path, features, list(task.split.test), 2, 5)])
    assert np.abs(got - _eval_predictions(folder, cache).numpy()).max() <= TOL


def _node_task(eval_mode: str, attention: str) -> NodeTask:
    """A node task as far as :func:`choose_path` reads it (its scoring mode and attention path)."""
    task = NodeTask.__new__(NodeTask)
    task.eval_mode, task.attention = eval_mode, attention
    return task


def test_the_path_is_the_one_eval_runs_unless_asked_and_partitions_are_refused():
    assert choose_path("node", _node_task("full", "dense"), "auto") == "dense"
    assert choose_path("node", _node_task("full", "sparse"), "auto") == "pairs"
    assert choose_path("node", _node_task("query", "sparse"), "dense") == "dense"
    with pytest.raises(ExportRefused, match=r"METIS partition batches .*\(node.mode=full or query\) exports"):
        choose_path("node", _node_task("partition", "sparse"), "pairs")
