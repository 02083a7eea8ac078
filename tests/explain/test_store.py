"""``maps.h5``: what write_maps / write_image_maps store, read back with h5py (values, layout, each head's power
and bias label by hand), and that a failed write leaves neither the file nor a temp file."""
from __future__ import annotations

import json
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from xmask_cli.explain.record import KINDS
from xmask_cli.explain.store import ImageMaps, write_image_maps, write_maps
from xmask_cli.model.model_config import ModelConfig

CFG = ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=2, head_powers=(2, 0),
                  biases=({"type": "spd", "heads": [2], "layers": [2]},))
#: Per layer, per head, by hand: head 1 reads Â^2; head 2 no power, the SPD bias on layer 2 only.
LABELS = [["Â^2", "none"], ["Â^2", "SPD"]]


def _target(name: str, m: int, seed: int):
    rng = np.random.default_rng(seed)
    maps = [{kind: rng.random((2, m, m)) for kind in KINDS} for _ in range(2)]
    return SimpleNamespace(name=name, node_ids=np.arange(10, 10 + m), edges=np.array([[0, 1], [1, 2]]),
                           hops=np.arange(m) - 1, query=1, kind="node", cropped=m < 5, cropped_from=5,
                           queries=[11], maps=maps, describe=lambda: f"node {name}")


def test_maps_are_stored_per_target_layer_head_and_kind_with_their_labels(tmp_path):
    targets = [_target("node_11", 3, 0), _target("node_12", 4, 1)]
    path = write_maps(tmp_path / "maps.h5", targets, CFG, {"run": "r", "seed": 0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps.h5"]
    with h5py.File(path, "r") as f:
        assert json.loads(f.attrs["meta"]) == {"run": "r", "seed": 0} and json.loads(f.attrs["kinds"]) == list(KINDS)
        assert sorted(f) == ["node_11", "node_12"]
        for t in targets:
            g = f[t.name]
            np.testing.assert_array_equal(g["node_ids"][()], t.node_ids)
            np.testing.assert_array_equal(g["graph/edges"][()], t.edges)
            np.testing.assert_array_equal(g["graph/hops"][()], t.hops)
            assert g["graph"].attrs["query"] == 1 and g.attrs["target"] == f"node {t.name}"
            assert g.attrs["num_nodes"] == len(t.node_ids) and bool(g.attrs["cropped"]) == t.cropped
            assert g.attrs["query_nodes"].tolist() == [11]
            for layer in range(2):
                for head in range(2):
                    for kind in KINDS:
                        ds = g[f"layer_{layer}/head_{head}/{kind}"]
                        assert ds.dtype == np.float32
                        np.testing.assert_array_equal(ds[()], t.maps[layer][kind][head].astype(np.float32))
                        assert ds.attrs["k"] == (2, 0)[head] and ds.attrs["bias"] == LABELS[layer][head]
                        assert (ds.attrs["layer"], ds.attrs["head"], ds.attrs["kind"]) == (layer, head, kind)
                        assert ds.attrs["mask_scale"] == CFG.mask_scale and ds.attrs["target"] == t.name


def test_image_maps_are_stored_per_image_layer_and_head(tmp_path):
    rng = np.random.default_rng(2)
    im = ImageMaps(name="image_0", attrs={"target": "image 0", "image_id": 7, "label": 3, "query": 0},
                   attention=[rng.random((2, 5, 5)) for _ in range(2)], grids=[rng.random((2, 2, 2)) for _ in range(2)])
    path = write_image_maps(tmp_path / "maps.h5", [im], CFG, {"level": "image"})
    with h5py.File(path, "r") as f:
        assert json.loads(f.attrs["meta"]) == {"level": "image"}
        g = f["image_0"]
        assert {k: g.attrs[k] for k in im.attrs} == im.attrs
        for layer in range(2):
            for head in range(2):
                hg = g[f"layer_{layer}/head_{head}"]
                np.testing.assert_array_equal(hg["attention"][()], im.attention[layer][head].astype(np.float32))
                np.testing.assert_array_equal(hg["grid"][()], im.grids[layer][head].astype(np.float32))
                assert hg.attrs["k"] == (2, 0)[head] and hg.attrs["bias"] == LABELS[layer][head]


def test_a_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    bad = _target("node_1", 3, 0)
    bad.maps[1] = {}  # layer 1 lacks its maps: the write fails half-way
    with pytest.raises(KeyError):
        write_maps(tmp_path / "maps.h5", [bad], CFG, {})
    assert list(tmp_path.iterdir()) == []
    old = write_maps(tmp_path / "maps.h5", [_target("node_2", 3, 0)], CFG, {"v": 1})
    with pytest.raises(KeyError):
        write_maps(old, [bad], CFG, {"v": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps.h5"]
    with h5py.File(old, "r") as f:
        assert json.loads(f.attrs["meta"]) == {"v": 1} and list(f) == ["node_2"]
