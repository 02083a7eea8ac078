"""Exported programs of untrained models: the dense and pairs programs against the eager model on graph and node
counts never seen while tracing, and the models that have no program refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.graphs import adjacency, norm_powers, padded, union_pairs
from xmask_cli.export.program import ExportRefused, path_refusal, program_spec, refusal, trace
from xmask_cli.model.network import ModelConfig, XMaskNet

F, K = 3, 3


def _model(**kw) -> XMaskNet:
    torch.manual_seed(0)
    cfg = {"in_dim": F, "out_dim": 2, "hidden": 12, "heads": 3, "layers": 2, "task": "graph", "graph_layout": "padded"}
    return XMaskNet(ModelConfig(**{**cfg, **kw})).eval()


def _path(n: int) -> np.ndarray:
    return adjacency(n, [(i, i + 1) for i in range(n - 1)])


def _star(n: int) -> np.ndarray:
    return adjacency(n, [(0, i) for i in range(1, n)])


def _batch(graphs: list[np.ndarray], extra: int = 0) -> tuple[torch.Tensor, ...]:
    """Graphs padded to the largest plus ``extra`` nodes, random features: ``(x, powers, mask)`` in float32."""
    powers, mask = padded(graphs, K)
    n = powers.size(-1) + extra
    powers = torch.nn.functional.pad(powers.float(), (0, extra, 0, extra))
    mask = torch.nn.functional.pad(mask, (0, extra))
    x = torch.randn(len(graphs), n, F) * mask[..., None]
    return x, powers, mask


def test_the_dense_graph_program_takes_graph_and_node_counts_it_was_not_traced_on():
    model = _model()
    program = trace(model, program_spec("dense", "graph", F, K, 2), _batch([_path(4), _star(5)], extra=1))
    run = program.module()
    torch.manual_seed(1)
    cases = [[_path(1)], [_path(9)], [_path(3), _star(12), _path(7), _star(2), _path(20)], [_star(6), _star(6)]]
    for graphs in cases:
        for extra in (0, 3):  # all real (the shortcut eager takes), and padded
            x, powers, mask = _batch(graphs, extra)
            with torch.no_grad():
                got, want = run(x, powers, mask), model.forward_dense(x, powers, mask)
            assert got.shape == (len(graphs), 2)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    # Padding does not change a graph's output: the 20-node path alone equals its row in a batch of five.
    x, powers, mask = _batch(cases[2])
    with torch.no_grad():
        alone = run(x[4:, :20], powers[4:, :, :20, :20], mask[4:, :20])
        torch.testing.assert_close(run(x, powers, mask)[4:], alone, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kw", [{}, {"output": "attention", "output_heads": 2, "output_powers": [1, 3]},
                                {"head_powers": [0, 1, 3]}, {"use_bias": False}],
                         ids=["mlp-head", "attention-output", "plain-head", "no-bias"])
def test_node_programs_dense_and_pairs_equal_the_eager_model_on_other_graphs(kw):
    model = _model(task="node", graph_layout="padded", **kw)
    torch.manual_seed(2)
    tree = adjacency(7, [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (2, 6)])
    p = norm_powers(tree, K)
    x = torch.randn(7, F)
    ei, vals = union_pairs(p)
    dense = trace(model, program_spec("dense", "node", F, K, 2),
                  (x[None], torch.from_numpy(p).float()[None], torch.ones(1, 7, dtype=torch.bool))).module()
    pairs = trace(model, program_spec("pairs", "node", F, K, 2), (x, ei, vals.float())).module()
    for graph in (_path(2), _star(15), _path(31)):
        n, p = len(graph), norm_powers(graph, K)
        x = torch.randn(n, F)
        ei, vals = union_pairs(p)
        powers, mask = torch.from_numpy(p).float()[None], torch.ones(1, n, dtype=torch.bool)
        with torch.no_grad():
            want = model.forward_dense(x[None], powers, mask)[0]
            torch.testing.assert_close(dense(x[None], powers, mask)[0], want, atol=1e-6, rtol=1e-6)
            # The pairs program (gather kernel) against the eager sparse path (CSR kernel) and the dense one.
            torch.testing.assert_close(pairs(x, ei, vals.float()), model.forward_sparse(x, ei, vals.float()),
                                       atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(pairs(x, ei, vals.float()), want, atol=1e-5, rtol=1e-5)


def test_a_program_checks_its_static_sizes_at_run_time():
    model = _model()
    run = trace(model, program_spec("dense", "graph", F, K, 2), _batch([_path(4), _star(5)], extra=1)).module()
    x, powers, mask = _batch([_path(4), _path(6)])
    with pytest.raises(Exception, match="(?i)expected|shape|size"):
        run(x, powers[:, :2], mask)  # K = 2 powers where the program reads 3


@pytest.mark.parametrize("kw, needle", [
    ({"task": "node", "experts": ("local", "global")}, "M3Dphormer attention experts"),
    ({"biases": ({"type": "spd"},)}, "learned biases (spd)"),
    ({"task": "link"}, "link-level run has no exported program"),
    ({"arch": "gps"}, "model.arch=gps runs message passing"),
])
def test_models_without_a_program_are_refused_naming_why_and_what_exports(kw, needle):
    reason = refusal(_model(**kw))
    assert reason is not None and needle in reason
    assert "export" in reason.split(";")[1]  # the message names what can be exported instead
    assert refusal(_model()) is None and refusal(_model(task="node", head_powers=[0, 1, 2])) is None


def test_a_trace_that_fails_is_refused_with_its_first_line_and_the_other_path(monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression Eq(u0, 1)\nmore detail")

    monkeypatch.setattr(torch.export, "export", fail)
    with pytest.raises(ExportRefused, match=r"cannot trace the dense path .*Eq\(u0, 1\)\); try --path pairs$"):
        trace(_model(), program_spec("dense", "graph", F, K, 2), _batch([_path(4), _star(5)]))


def test_the_pairs_path_of_a_model_that_needs_the_dense_grid_is_refused_naming_the_dense_path():
    model = _model(task="node", outside_support="eps")
    reason = path_refusal(model, "pairs")
    assert reason is not None and "outside_support=eps" in reason and "--path dense" in reason
    assert path_refusal(model, "dense") is None and path_refusal(_model(task="node"), "pairs") is None


@pytest.mark.parametrize("version, refused", [("2.5.1", True), ("2.12.0+cpu", True), ("2.13.0", False),
                                              ("2.14.1+cu121", False), ("3.0.0a0", False)])
def test_export_refuses_a_torch_older_than_its_tested_floor(version, refused):
    """Below EXPORT_TORCH (2.5.1 cannot trace the dense path) export refuses with one line naming the floor."""
    from xmask_cli.export.program import EXPORT_TORCH, ExportRefused, require_export_torch

    if not refused:
        require_export_torch(version)
        return
    with pytest.raises(ExportRefused) as err:
        require_export_torch(version)
    floor = ".".join(map(str, EXPORT_TORCH))
    assert f"torch >= {floor}" in str(err.value) and version in str(err.value) and "\n" not in str(err.value)


def test_export_checks_torch_before_reading_the_run(tmp_path, monkeypatch):
    """The torch check comes first: an old torch is named even where the run folder does not exist."""
    from xmask_cli.export.program import ExportRefused
    from xmask_cli.export.run import export_run

    monkeypatch.setattr(torch, "__version__", "2.5.1")
    with pytest.raises(ExportRefused, match="2.5.1"):
        export_run(tmp_path / "missing", cache_dir=tmp_path / "cache")
