"""What a preset reads decides what prepare computes (K, sections), and the files it writes hold just that."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.prepare import prepare_graphs
from xmask_cli.prepare.needs import read_powers, read_sections, structure_needed


def test_computers_reads_two_powers_and_nothing_else():
    cfg = resolve("computers")
    assert cfg.model.head_powers == [1, 1, 2, 2] and cfg.structure.powers.k == 4  # the preset asks for more
    s = structure_needed(cfg, "node")
    assert s.powers.k == 2
    assert not (s.spd.enabled or s.spectrum.enabled or s.magnetic.enabled or s.rrwp.enabled)
    assert s.partition.parts == 0  # query mode (no pair biases) never reads METIS parts


@pytest.mark.parametrize("overrides, k, sections", [
    ([], 4, set()),  # default head h reads Â^h, four heads
    (["model.head_powers=[0,1,1,2]"], 4, set()),  # a plain head spans the stored support: K stays
    (["model.use_bias=false"], 4, set()),
    (["model.head_powers=[3,1,1,1]", "structure.powers.k=6"], 3, set()),
    (["model.biases=[{type: spd}]"], 4, {"spd"}),
    (["model.biases=[{type: eigen}]", "model.head_powers=[1,1,1,1]"], 1, {"spectrum"}),
    (["model.node_struct=degree+rwse", "structure.rrwp.enabled=true"], 4, {"rrwp"}),
])
def test_graph_level_readers(overrides, k, sections):
    cfg = resolve("graph-level", overrides)
    assert read_powers(cfg) == k
    assert set(read_sections(cfg, "graph")) == sections
    s = structure_needed(cfg, "graph")
    assert s.powers.k == k
    for name in ("spd", "spectrum", "magnetic", "rrwp"):
        assert getattr(s, name).enabled == (name in sections), name


@pytest.mark.parametrize("overrides, parts", [
    (["node.mode=partition"], 32),
    (["node.mode=query"], 0),
    (["model.biases=[{type: spd}]"], 32),  # auto sends large graphs with pair biases to partition batches
    (["model.experts=[local, cluster]"], 32),
    (["model.experts=[local, global]"], 0),
])
def test_node_level_partitions_only_where_read(overrides, parts):
    assert structure_needed(resolve("node-level", overrides), "node").partition.parts == parts
    assert structure_needed(resolve("node-level", overrides), "graph").partition.parts == 0


def test_compute_all_keeps_every_enabled_section():
    cfg = resolve("computers", ["prepare.compute=all"])
    assert structure_needed(cfg, "node") == cfg.structure


def test_a_preset_reading_two_powers_prepares_k2_and_no_spectra(tmp_path):
    rng = np.random.default_rng(0)
    edges = [rng.integers(0, n, size=(2, 3 * n)) for n in (30, 80, 120)]
    nn = np.array([30, 80, 120])
    cfg = resolve("graph-level", ["model.head_powers=[1,2,2,1]"])
    assert cfg.structure.spectrum.enabled and cfg.structure.spd.enabled  # the base preset's sections
    s = prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn,
                       fingerprint=graphs_fingerprint(edges, nn), cfg=structure_needed(cfg, "graph"),
                       cache_dir=tmp_path)
    with h5py.File(s.path, "r") as f:
        assert f["powers/values"].shape[1] == 2 and int(f["powers"].attrs["k"]) == 2
        assert "spectrum" not in f and "spd" not in f and "magnetic" not in f and "rrwp" not in f
    assert s.params["powers"]["k"] == 2 and s.params["spectrum"] == {"enabled": False}
