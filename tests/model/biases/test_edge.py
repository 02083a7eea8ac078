"""The edge bias against numpy: hand graphs with a direction-dependent attribute pattern, integer (several
columns) and float attributes, prepared into a cache and read back as batches; the reference is computed from
the raw ``edge_index`` / ``edge_attr`` and the module's own parameters, never through the cache."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.model.biases.refs import all_pairs, randomize
from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.engine.batching.extras import GraphExtras, to_tensors
from xmask_cli.engine.batching.stream import batch_extras
from xmask_cli.model.biases import EdgeBias
from xmask_cli.model.biases.stack import BiasSpec, BiasStack
from xmask_cli.prepare import prepare_graphs
from xmask_cli.prepare.edge_section import EdgeInputs

# (n, edge_index): 0->1 and 1->0 listed (each with its own attributes), 2->3 one way only, 1->2 twice (the first
# listing wins), a self loop on 4 (no diagonal term); a 3-node path listed one way; one isolated node.
GRAPHS = [
    (6, [[0, 1, 2, 1, 1, 4, 5], [1, 0, 3, 2, 2, 4, 3]]),
    (3, [[0, 1], [1, 2]]),
    (1, [[], []]),
]


def int_attrs() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [np.stack([rng.integers(0, 5, len(e[0])), rng.integers(0, 3, len(e[0])), rng.integers(0, 2, len(e[0]))],
                     axis=1).astype(np.int64) for _, e in GRAPHS]


def float_attrs() -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    return [rng.normal(size=(len(e[0]), 4)).astype(np.float32) for _, e in GRAPHS]


def reference_pair_attr(edge_index: list[list[int]], attr: np.ndarray, i: int, j: int) -> np.ndarray | None:
    """The attributes pair (i, j) carries, by the documented rule: the first edge listed i -> j, else the first
    listed j -> i; None for i == j or no edge."""
    if i == j:
        return None
    for direction in ((i, j), (j, i)):
        for e, (s, d) in enumerate(zip(*edge_index)):
            if (s, d) == direction:
                return attr[e]
    return None


def reference(mod: EdgeBias, attrs: list[np.ndarray], n_max: int) -> np.ndarray:
    """``[B, H, N, N]`` in numpy from the raw edge lists and the module's parameters."""
    out = np.zeros((len(GRAPHS), mod.num_heads, n_max, n_max))
    for b, ((n, ei), attr) in enumerate(zip(GRAPHS, attrs)):
        for i in range(n):
            for j in range(n):
                a = reference_pair_attr(ei, attr, i, j)
                if a is None:
                    continue
                if mod.table is not None:
                    table = mod.table.weight.detach().double().numpy()
                    starts = np.concatenate([[0], np.cumsum(mod.dims)[:-1]])
                    out[b, :, i, j] = sum(table[starts[c] + int(a[c])] for c in range(len(a)))
                else:
                    assert mod.linear is not None
                    w, w0 = mod.linear.weight.detach().double().numpy(), mod.linear.bias.detach().double().numpy()
                    out[b, :, i, j] = w @ a.astype(np.float64) + w0
    return out


def prepared(tmp: Path, attrs: list[np.ndarray]) -> tuple[Path, EdgeInputs]:
    edges = [np.array(e, dtype=np.int64).reshape(2, -1) for _, e in GRAPHS]
    nodes = np.array([n for n, _ in GRAPHS], dtype=np.int64)
    st = resolve("graph-level").structure
    cfg = dataclasses.replace(st, spd=dataclasses.replace(st.spd, enabled=False))
    inputs = EdgeInputs(attrs)
    path = prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nodes,
                          fingerprint=graphs_fingerprint(edges, nodes), cfg=cfg, cache_dir=tmp / "cache",
                          edge_attr=inputs).path
    return Path(path), inputs


@pytest.mark.parametrize("kind", ["int", "float"])
def test_dense_and_sparse_equal_numpy(kind, tmp_path):
    attrs = int_attrs() if kind == "int" else float_attrs()
    path, inputs = prepared(tmp_path, attrs)
    assert inputs.coding.encoding == ("index" if kind == "int" else "linear")
    with StructureCache(path) as cache:
        assert cache.edge_coding() == (inputs.coding.encoding, inputs.coding.dims)
        ids = np.arange(len(GRAPHS))
        extras = batch_extras(cache, ids, {"edge"}, 6)
        assert extras is not None
        mask = torch.zeros(len(GRAPHS), 6, dtype=torch.bool)
        for b, (n, _) in enumerate(GRAPHS):
            mask[b, :n] = True
        mod = EdgeBias(3, *dataclasses.astuple(inputs.coding)).double()
        assert not any(p.any() for p in mod.parameters())  # starts at zero: plain attention
        randomize(mod, 1)
        dense = mod(extras, mask=mask)
        assert dense.shape == (3, 3, 6, 6)
        np.testing.assert_allclose(dense.detach().numpy(), reference(mod, attrs, 6), atol=1e-12)
        # Sparse: every pair of each graph, read as GraphExtras.pairs gives them.
        for g, (n, _) in enumerate(GRAPHS):
            r, c = all_pairs(n)
            sx = to_tensors(GraphExtras(cache, g, {"edge"}).pairs(r, c))
            got = mod(sx, edge_index=torch.from_numpy(np.stack([r, c])))
            torch.testing.assert_close(got, dense[g][:, r, c].T, atol=1e-12, rtol=0)


def test_stack_places_the_term_on_its_heads_and_gradients_reach_the_table(tmp_path):
    attrs = int_attrs()
    path, inputs = prepared(tmp_path, attrs)
    with StructureCache(path) as cache:
        extras = batch_extras(cache, np.arange(len(GRAPHS)), {"edge"}, 6)
    stack = BiasStack([BiasSpec("edge", heads=(2, 4))], num_heads=4, num_layers=1,
                      edge_encoding=inputs.coding.encoding, edge_dims=inputs.coding.dims)
    mod = stack.layers[0][0]
    randomize(mod, 2)
    out = stack(0, extras)
    want = reference(mod, attrs, 6)
    np.testing.assert_allclose(out[:, [1, 3]].detach().numpy(), want, atol=1e-6)
    assert not out[:, [0, 2]].any()
    out.sum().backward()
    # Rows of codes used by some edge get a gradient; a code no edge carries gets none.
    used = {int(a[0]) for a in np.concatenate(attrs)}
    grad = mod.table.weight.grad[:5].abs().sum(1)
    assert all((grad[v] > 0) == (v in used) for v in range(5))


def test_a_pair_without_edges_everywhere_is_zero():
    mod = EdgeBias(2, "linear", (3,))
    randomize(mod, 0)
    extras = {"edge_attr": torch.zeros(1, 4, 4, 3), "edge_mask": torch.zeros(1, 4, 4, dtype=torch.bool)}
    assert not mod(extras).any()  # the linear map's offset w0 applies at edges only


@pytest.mark.parametrize(("encoding", "dims"), [("index", (5, 6, 2)), ("linear", (4,))])
def test_the_zero_tables_draw_nothing_so_a_network_starts_the_same_with_and_without(encoding, dims):
    torch.manual_seed(3)
    state = torch.get_rng_state()
    mod = EdgeBias(4, encoding, dims)
    assert torch.equal(torch.get_rng_state(), state)
    assert not any(p.any() for p in mod.parameters())
    # The whole network: every parameter the two share is equal at the same seed.
    from xmask_cli.model.network import ModelConfig, XMaskNet

    base = dict(in_dim=5, out_dim=2, hidden=16, heads=4, layers=2)
    torch.manual_seed(0)
    plain = dict(XMaskNet(ModelConfig(**base)).named_parameters())
    torch.manual_seed(0)
    with_edge = dict(XMaskNet(ModelConfig(**base, biases=[{"type": "edge"}], edge_encoding=encoding,
                                          edge_dims=dims)).named_parameters())
    assert set(plain) < set(with_edge)
    for name, value in plain.items():
        assert torch.equal(value, with_edge[name]), name
