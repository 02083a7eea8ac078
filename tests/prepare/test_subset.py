"""A cache file holding more serves a request needing less: no recompute, the same arrays as a fresh prepare."""
from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import xmask_cli.prepare.blocks as blocks
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.prepare import prepare_graphs, structure_params
from xmask_cli.prepare.needs import structure_needed
from xmask_cli.prepare.subset import covers

# Small exact graphs and one large (truncated) graph: both storage rules are exercised.
_LARGE = ["structure.large.min_nodes=150", "structure.large.topk=12", "structure.large.tau=1e-3",
          "structure.spd.max_distance=3"]


def _graphs():
    rng = np.random.default_rng(1)
    nn = np.array([12, 40, 90, 400, 25])
    edges = [rng.integers(0, n, size=(2, 2 * n)) for n in nn]
    return edges, nn


def _arrays(path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        attrs = {g: dict(f[g].attrs) for g in ("powers", "spd") if g in f}
    return out, attrs


def _prepare(cfg, cache_dir, edges, nn):
    return prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn,
                          fingerprint=graphs_fingerprint(edges, nn), cfg=cfg, cache_dir=cache_dir)


@pytest.mark.parametrize("reader, sections", [
    (["model.head_powers=[1,2,2,1]"], ()),
    (["model.head_powers=[1,2,3,1]", "model.biases=[{type: spd}]"], ("spd",)),
])
def test_a_k4_file_with_spectra_serves_a_k2_preset_without_recompute(tmp_path, monkeypatch, reader, sections):
    edges, nn = _graphs()
    big = resolve("graph-level", [*_LARGE, "prepare.compute=all"]).structure
    assert big.powers.k == 4 and big.spectrum.enabled and big.spd.enabled
    first = _prepare(big, tmp_path / "shared", edges, nn)
    mtime = os.stat(first.path).st_mtime_ns

    small = structure_needed(resolve("graph-level", [*_LARGE, *reader]), "graph")
    assert small.powers.k < 4 and not small.spectrum.enabled
    assert covers(first.params, structure_params(small, "graph"))
    calls = []
    real = blocks.compute_block
    monkeypatch.setattr(blocks, "compute_block", lambda *a, **k: calls.append(1) or real(*a, **k))
    served = _prepare(small, tmp_path / "shared", edges, nn)
    assert calls == [] and served.served_from == first.path  # nothing recomputed
    assert os.stat(first.path).st_mtime_ns == mtime  # the big file is untouched

    fresh = _prepare(small, tmp_path / "fresh", edges, nn)  # computed from scratch, elsewhere
    assert calls and fresh.served_from is None and fresh.key == served.key
    got, got_attrs = _arrays(served.path)
    want, want_attrs = _arrays(fresh.path)
    assert sorted(got) == sorted(want)
    assert ("spectrum/eigvals" in got) is False and ("spd/dist" in got) == ("spd" in sections)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for g in want_attrs:
        assert got_attrs[g] == want_attrs[g], g
    assert served.truncation == fresh.truncation
    assert served.truncation["large_graphs"] == 1 and max(served.truncation["powers"]["max"]) > 0  # truncated


def test_a_file_lacking_a_section_or_power_does_not_cover():
    base = structure_params(resolve("graph-level", ["prepare.compute=all"]).structure, "graph")
    k2 = structure_params(resolve("graph-level", ["structure.powers.k=2", "structure.spectrum.enabled=false"]).structure,
                          "graph")
    assert covers(base, k2) and not covers(k2, base)
    other = structure_params(resolve("graph-level", ["structure.spd.max_distance=3"]).structure, "graph")
    assert not covers(other, base) and not covers(base, other)  # SPD cut-offs differ
    sym = structure_params(resolve("graph-level", ["structure.powers.normalization=no-symnorm"]).structure, "graph")
    assert not covers(sym, k2)
    rule = structure_params(resolve("graph-level", ["structure.large.topk=8"]).structure, "graph")
    assert not covers(rule, k2)


def test_an_edge_section_is_served_only_for_the_same_attributes(tmp_path):
    """A file with SPD and the edge attributes serves an edge-only request (the section copied, equal to a fresh
    prepare); attributes that differ are another key and are computed."""
    from xmask_cli.prepare.edge_section import EdgeInputs

    rng = np.random.default_rng(2)
    nn = np.array([12, 40, 25])
    edges = [rng.integers(0, n, size=(2, 2 * n)) for n in nn]
    attrs = [rng.integers(0, 4, size=(e.shape[1], 2)) for e in edges]
    both = resolve("graph-level", ["model.biases=[{type: edge}, {type: spd}]"])
    only = resolve("graph-level", ["model.biases=[{type: edge}]"])
    first = prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn,
                           fingerprint=graphs_fingerprint(edges, nn), cfg=structure_needed(both, "graph"),
                           cache_dir=tmp_path / "a", edge_attr=EdgeInputs(attrs))

    def edge_only(cache_dir, a):
        return prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn,
                              fingerprint=graphs_fingerprint(edges, nn), cfg=structure_needed(only, "graph"),
                              cache_dir=cache_dir, edge_attr=EdgeInputs(a))

    served = edge_only(tmp_path / "a", attrs)
    fresh = edge_only(tmp_path / "fresh", attrs)
    assert served.served_from == first.path and fresh.served_from is None and served.key == fresh.key
    got, want = _arrays(served.path)[0], _arrays(fresh.path)[0]
    assert "edge/attr" in got and "spd/dist" not in got and got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    with h5py.File(served.path, "r") as f:
        assert f["edge"].attrs["encoding"] == "index" and list(f["edge"].attrs["dims"]) == [4, 4]
    other = edge_only(tmp_path / "a", [a[::-1].copy() for a in attrs])  # the same edges, other attributes
    assert other.served_from is None and other.key != served.key
