"""A large graph prepared in row blocks: the file equals the whole-graph computation, whatever the budget."""
from __future__ import annotations

import json

import h5py
import numpy as np

from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.prepare import compute_block, prepare_graphs
from xmask_cli.prepare.blocks import plan_units

_CFG = ["structure.large.min_nodes=500", "structure.large.topk=10", "structure.large.tau=1e-4",
        "structure.powers.k=3", "structure.rrwp.enabled=true", "structure.rrwp.steps=3",
        "structure.partition.parts=4", "structure.spectrum.num_eigs=4", "structure.magnetic.enabled=true",
        "structure.magnetic.num_eigs=3"]


def _dataset():
    rng = np.random.default_rng(3)
    nn = np.array([30, 1500, 60])
    edges = [rng.integers(0, n, size=(2, 3 * n)) for n in nn]
    return edges, nn


def _read(path):
    out, attrs = {}, {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        for g in ("powers", "spd", "rrwp"):
            attrs[g] = dict(f[g].attrs)
    return out, attrs


def _prepare(tmp_path, name, memory_gb):
    edges, nn = _dataset()
    cfg = resolve("node-level", _CFG).structure
    return prepare_graphs(dataset_key="toy", level="node", edges=edges, num_nodes=nn, memory_gb=memory_gb,
                          fingerprint=graphs_fingerprint(edges, nn), cfg=cfg, cache_dir=tmp_path / name)


def test_row_blocks_write_the_same_file_as_one_block(tmp_path):
    edges, nn = _dataset()
    cfg = resolve("node-level", _CFG).structure
    tiny = 1e-4  # GB: the smallest blocks (256 rows)
    units = plan_units(edges, nn, cfg, tiny * (1 << 30))
    assert [u.kind for u in units] == ["small", "rows", "rows", "rows", "rows", "rows", "rows", "graph", "small"]
    a, b = _prepare(tmp_path, "blocks", tiny), _prepare(tmp_path, "whole", 64.0)
    got, got_attrs = _read(a.path)
    want, want_attrs = _read(b.path)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got_attrs == want_attrs
    assert a.truncation == b.truncation and a.truncation["large_graphs"] == 1

    # The large graph's pairs equal the whole-graph computation (compute_block on the graph alone).
    ref = compute_block([edges[1]], nn[1:2], cfg, True, "node", np.dtype(np.uint16))
    lo, hi = int(nn[0]), int(nn[0] + nn[1])
    for group, names in (("powers", ("col", "values")), ("spd", ("col", "dist")), ("rrwp", ("col", "values"))):
        ip = got[f"{group}/indptr"]
        np.testing.assert_array_equal(np.diff(ip[lo:hi + 1]), ref.pairs[group]["node_counts"])
        for k in names:
            np.testing.assert_array_equal(got[f"{group}/{k}"][ip[lo]:ip[hi]], ref.pairs[group][k], err_msg=group + k)
    # Dropped mass: the mean and max over the large graph's rows, from its whole share.
    for group in ("powers", "rrwp"):
        d = json.loads(got_attrs[group]["dropped_mass"])
        share = ref.dropped[group]
        assert d["rows"] == 1500
        np.testing.assert_array_equal(d["max"], share.max(axis=0))
        np.testing.assert_allclose(d["mean"], share.sum(axis=0) / 1500, rtol=1e-12)
    assert max(json.loads(got_attrs["powers"]["dropped_mass"])["max"]) > 0  # truncation did drop mass


def test_blocks_are_sized_for_the_walk_matrices_too():
    """A row block holds Â^1..Â^K and, when RRWP is stored, M^0..M^steps: with the walks on, the same budget
    gives rows_per_block's count for K + steps + 1 matrices, so more (smaller) blocks."""
    from xmask_cli.structure.rowblocks import rows_per_block

    edges, nn = _dataset()
    budget = 2e-3 * (1 << 30)
    with_walks = resolve("node-level", _CFG).structure
    without = resolve("node-level", [*_CFG, "structure.rrwp.enabled=false"]).structure
    deg = np.bincount(edges[1].ravel(), minlength=int(nn[1]))
    for cfg, held in ((with_walks, 3 + 3 + 1), (without, 3)):
        step = rows_per_block(deg, held, cfg.large.topk, budget)
        rows = [u for u in plan_units(edges, nn, cfg, budget) if u.kind == "rows"]
        assert len(rows) == -(-int(nn[1]) // step)
    assert len([u for u in plan_units(edges, nn, with_walks, budget) if u.kind == "rows"]) > \
        len([u for u in plan_units(edges, nn, without, budget) if u.kind == "rows"])
