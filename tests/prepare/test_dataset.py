"""A dataset or an image grid to its cache: where the cache goes, the patch grid (against networkx) and its key,
the refused patch sizes, the grid's cached powers (numpy), and a registered dataset's file (bundled MUTAG)."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from tests.model.graphs import norm_powers
from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.errors import UsageError
from xmask_cli.prepare import check_patch, grid_fingerprint, prepare_dataset, prepare_grid, resolve_cache_dir


def test_the_cache_dir_is_the_option_then_the_environment_then_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XMASK_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir(tmp_path / "cli") == tmp_path / "cli"
    assert resolve_cache_dir(None) == tmp_path / "env"
    monkeypatch.delenv("XMASK_CACHE")
    assert str(resolve_cache_dir(None)) == "cache"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_cache_dir("~/c") == tmp_path / "c"


def _nx_grid(rows: int, cols: int, connectivity: int) -> set[tuple[int, int]]:
    g = nx.grid_2d_graph(rows, cols)
    if connectivity == 8:
        g.add_edges_from(((r, c), (r + dr, c + 1)) for r in range(rows) for c in range(cols - 1) for dr in (-1, 1)
                         if 0 <= r + dr < rows)
    ids = {(r, c): r * cols + c for r in range(rows) for c in range(cols)}
    return {(ids[u], ids[v]) for u, v in g.edges()} | {(ids[v], ids[u]) for u, v in g.edges()}


@pytest.mark.parametrize("connectivity", [4, 8])
def test_the_grid_of_patches_is_networkxs_grid_graph(connectivity):
    fp, (edges,), nodes = grid_fingerprint((12, 8), 4, connectivity)  # 3 x 2 patches
    assert nodes.tolist() == [6]
    pairs = list(zip(edges[0].tolist(), edges[1].tolist()))
    assert len(pairs) == len(set(pairs)) and set(pairs) == _nx_grid(3, 2, connectivity)


def test_the_grid_key_depends_on_the_geometry_not_only_the_edges():
    a = grid_fingerprint((8, 8), 4, 4)  # 2 x 2 patches
    b = grid_fingerprint((16, 16), 8, 4)  # the same 2 x 2 grid from other images
    np.testing.assert_array_equal(a[1][0], b[1][0])
    assert a[0] != b[0] and a[0] != grid_fingerprint((8, 8), 4, 8)[0] and a[0] == grid_fingerprint((8, 8), 4, 4)[0]


def test_a_patch_that_does_not_divide_the_image_is_a_usage_error_naming_those_that_do():
    assert check_patch("img", (12, 8), 4) == (3, 2)
    with pytest.raises(UsageError) as err:
        check_patch("img", (12, 8), 3)
    msg = str(err.value)
    assert msg.startswith("img: image.patch=3: ") and "width 8" in msg and "1, 2, 4" in msg


def test_the_grid_is_cached_once_with_its_normalized_powers(tmp_path):
    cfg = resolve("graph-level", ["structure.powers.k=2", "structure.spd.enabled=false",
                                  "structure.spectrum.enabled=false"]).structure
    kw = dict(dataset_key="img", image_size=(12, 8), patch=4, connectivity=4, cfg=cfg, cache_dir=tmp_path)
    first, second = prepare_grid(**kw), prepare_grid(**kw)
    assert not first.cached and second.cached and first.path == second.path
    assert (first.graphs, first.nodes) == (1, 6)
    a = np.zeros((6, 6))
    for i, j in _nx_grid(3, 2, 4):
        a[i, j] = 1.0
    with StructureCache(first.path) as c:
        np.testing.assert_allclose(c.dense_powers(0), norm_powers(a, 2), rtol=1e-6, atol=1e-7)
    with pytest.raises(UsageError):
        prepare_grid(**{**kw, "patch": 5})


def test_a_registered_dataset_is_cached_under_its_key_with_every_graph(tmp_path):
    from xmask_cli.data.load import load_graphs, resolve_data_root
    from xmask_cli.data.registry import get_dataset

    cfg = resolve("graph-level", ["data.dataset=MUTAG", "structure.powers.k=2", "structure.spd.enabled=false",
                                  "structure.spectrum.enabled=false"])
    logs: list[str] = []
    s = prepare_dataset(cfg, cache_dir=tmp_path / "c", offline=True, log=logs.append)
    graphs = load_graphs(get_dataset("MUTAG"), data_root=resolve_data_root(None, cfg.data.root),
                         cache_dir=tmp_path / "c", offline=True)
    assert (s.graphs, s.nodes) == (graphs.num_graphs, int(graphs.num_nodes.sum())) == (188, 3371)
    assert s.features == graphs.feature_info().to_dict() and s.features["kind"] == "dataset"
    assert any(m.startswith("loaded MUTAG: 188 graph(s)") for m in logs)
    with StructureCache(s.path) as c:
        for i in (0, 187):
            e, n = graphs.edge_index[i], int(graphs.num_nodes[i])
            a = np.zeros((n, n))
            a[e[0], e[1]] = a[e[1], e[0]] = 1.0
            np.testing.assert_allclose(c.dense_powers(i), norm_powers(a, 2), rtol=1e-5, atol=1e-6)
    assert prepare_dataset(cfg, cache_dir=tmp_path / "c", offline=True).cached
