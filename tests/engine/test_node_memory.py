"""The full-graph step estimate behind ``node.mode: auto``: its formula on a hand-worked graph, its attention
entries against the CSR plans the model builds, and the decision at the budget."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tests.engine.tasks.test_node import Toy
from xmask_cli.config import ModelSection, NodeSection
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.node_memory import GIB, StepShape, auto_mode, full_step_memory, pairs_per_power, step_shape
from xmask_cli.engine.tasks.node import NodeTask, mode_note
from xmask_cli.errors import ConfigError
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.structure.powers import adjacency_powers, union_pairs


def _path_values() -> np.ndarray:
    """``[E, 3]`` Â^1..Â^3 of the path 0-1-2-3 at the union of their supports."""
    a = sp.csr_matrix(np.diag(np.ones(3), 1) + np.diag(np.ones(3), -1))
    row, _, values = union_pairs(adjacency_powers(a, 3))
    assert len(row) == 16  # Â^3 reaches every pair of the 4-node path
    return values


def test_pairs_per_power_counts_each_heads_support_on_a_path():
    # Â = D^-1/2 (A + I) D^-1/2 on the path: Â^1 is non-zero on the 4 loops and both ends of the 3 edges (10);
    # Â^2 adds the 4 ordered pairs two hops apart (14); Â^3 the 2 three hops apart (16). Plain heads (0) read none.
    assert pairs_per_power(_path_values(), [2, 1, 0, 3, 1]) == {1: 10, 2: 14, 3: 16}


def test_the_estimate_is_the_documented_formula_on_the_path():
    """Every term worked by hand from the module docstring's byte counts, on the path (N = 4, E = 16, K = 3)."""
    per_power = pairs_per_power(_path_values(), [1, 2])
    shape = StepShape(heads=((1, 2, 0), (1, 1, 2)), hidden=6, ffn_width=12, out_dim=2, input_dropout=0.5)
    m = full_step_memory(4, 16, per_power, 3, shape, in_dim=5)
    # Layer 1: 10 + 14 + 16 (the plain head attends over all 4 x 4 pairs); layer 2: 10 + 10 + 14.
    assert m.entries == (40, 34)
    assert m.attention_bytes == 74 * 52  # 5 int64 and 3 float32 per entry
    # Per stored pair: row and column 16, 3 powers 12, the 3-head term 12, per layer 16 + 3: 78.
    assert m.pairs == 16 * 78
    # 4 nodes x 4 B x (2 layers x (16 x 6 + 4 x 12) + 3 x 6 + 2 x 2) = 4960; input dropout 8 B x 4 x 5 = 160;
    # parameters (5 x 6 + 2 x (4 x 36 + 2 x 6 x 12) = 606) x 16 B = 9696.
    assert m.activations == 4960 + 160 + 9696
    assert m.total == 1248 + 3848 + 14816
    # Sparse features: dropout on their 7 stored entries only.
    assert full_step_memory(4, 16, per_power, 3, shape, 5, feature_entries=7).activations == 4960 + 56 + 9696
    # Dense: every head an N x N grid (16 B an entry) plus the [K, N, N] powers; no pair list.
    d = full_step_memory(4, 16, per_power, 3, shape, 5, attention="dense")
    assert d.entries == (48, 48) and d.attention_bytes == 96 * 16 + 3 * 16 * 4 and d.pairs == 0


def test_step_shape_reads_the_model_section():
    s = step_shape(ModelSection(hidden=32, heads=4, layers=2, head_powers=[1, 1, 2, 0], output="attention",
                                output_heads=2, ffn=False), out_dim=7)
    assert s.heads == ((1, 1, 2, 0), (1, 1, 2, 0), (1, 1)) and s.ffn_width == 0 and s.num_heads == 4
    assert step_shape(ModelSection(heads=2, use_bias=False), 3).heads == ((0, 0), (0, 0))  # plain attention
    assert step_shape(ModelSection(heads=3, layers=1), 3).heads == ((1, 2, 3),)  # head h reads Â^h


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    # Truncated powers, as on the large graphs auto decides for.
    return Toy(tmp_path_factory.mktemp("node_memory"), 150, 0.04,
               ["structure.partition.parts=0", "structure.large.min_nodes=50", "structure.large.topk=12"], seed=3)


MODEL = ModelSection(hidden=16, heads=4, layers=2, head_powers=[1, 2, 3, 0], dropout=0.0)


def test_entries_are_the_attention_entries_the_model_stacks(toy: Toy) -> None:
    """Per layer, the estimate's entries are the CSR plan's stacked entries plus N^2 per plain head."""
    task = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL, node=NodeSection(mode="full", attention="sparse"))
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task="node", hidden=16, heads=4, layers=2,
                      head_powers=(1, 2, 3, 0), dropout=0.0)
    model = XMaskNet(cfg)
    loss, _ = task.loss(model, next(iter(task.train_batches(0))))
    loss.backward()
    n = task.num_nodes
    stacked = [block.attn._term_memo[4].nnz for block in model.blocks]
    assert task.full_step is not None
    assert list(task.full_step.entries) == [s + n * n for s in stacked]
    assert task.full_step.stored_pairs == int(task.batcher.batch.edge_index.size(1))


def test_auto_takes_the_full_graph_up_to_the_budget_and_batches_beyond(toy: Toy) -> None:
    task = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL)
    m = task.full_step
    assert m is not None and task.mode == "full" and task.attention == "sparse"  # 150 nodes, sparse pairs
    at = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL, node=NodeSection(memory_gb=m.total / GIB))
    below = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL, node=NodeSection(memory_gb=(m.total - 1) / GIB))
    assert (at.mode, below.mode, below.eval_mode) == ("full", "query", "query")
    # What the run records: the choice and the estimate it compared (config.json, the log line).
    assert at.describe()["node"]["full_step_mb"] == round(m.total / 2**20)
    assert "node.mode auto: full" in mode_note(at) and "within node.memory_gb" in mode_note(at)
    assert "node.mode auto: query" in mode_note(below) and "over node.memory_gb" in mode_note(below)
    # Learned pair biases go to partitions beyond the budget; no possible full step means batches.
    assert auto_mode(m, (m.total - 1) / GIB, learned_biases=True) == "partition"
    assert auto_mode(m, m.total / GIB, learned_biases=True) == "full"
    assert auto_mode(None, 1e6, learned_biases=False) == "query"
    # The subgraph mode scores through the same rule.
    sub = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL,
                   node=NodeSection(mode="subgraph", subgraph_size=40, memory_gb=(m.total - 1) / GIB))
    assert (sub.mode, sub.eval_mode) == ("subgraph", "query")


def test_a_bigger_model_raises_the_estimate(toy: Toy) -> None:
    small = NodeTask(toy.path, toy.graphs, toy.split, model=MODEL).full_step
    wide = NodeTask(toy.path, toy.graphs, toy.split, model=ModelSection(hidden=64, heads=4, layers=3,
                                                                         head_powers=[1, 2, 3, 0])).full_step
    assert small is not None and wide is not None and wide.total > small.total


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_budget_out_of_range_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="node.memory_gb"):
        resolve("node-level", [f"node.memory_gb={value}"])


def test_a_power_past_the_stored_ones_counts_the_widest_support():
    """An experts model's heads may name powers the cache does not store: they count Â^K's pairs."""
    values = np.array([[0.5, 0.2], [0.0, 0.1], [0.0, 0.0], [0.3, 0.3]])
    assert pairs_per_power(values, [1, 2, 3, 5]) == {1: 2, 2: 3, 3: 3, 5: 3}
