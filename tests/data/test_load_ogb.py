"""ogb is an optional extra ([ogb]): without it an OGB dataset, OGB's evaluator and the molecules' atom encoder
are refused with exit 2 naming the extra, before any file is read or written; every other dataset loads."""
from __future__ import annotations

import sys

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.errors import UsageError

HINT = 'needs ogb, an optional dependency: pip install "xmask-cli[ogb]"'


@pytest.fixture
def no_ogb(monkeypatch):
    """As if ogb were not installed: every import of it (or of a submodule) raises ImportError."""
    for name in [m for m in sys.modules if m == "ogb" or m.startswith("ogb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ogb", None)


@pytest.mark.parametrize("name", ["ogbg-molhiv", "ogbn-arxiv"])
def test_an_ogb_dataset_without_ogb_is_exit_2_naming_the_extra(name, no_ogb, tmp_path):
    with pytest.raises(UsageError, match=r"\(an OGB dataset\) " + HINT.replace("[", r"\[").replace("]", r"\]")):
        load_graphs(get_dataset(name), data_root=tmp_path / "data", cache_dir=tmp_path / "cache", offline=True)
    r = run("prepare", name, "--data-root", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache"), "--offline")
    assert r.exit_code == 2 and HINT in one_error_line(r)
    # Refused before any work: the cache folder prepare checks first is empty, the data root never made.
    assert not list((tmp_path / "cache").rglob("*")) and not (tmp_path / "data").exists()


def test_other_datasets_load_without_ogb(no_ogb, tmp_path):
    graphs = load_graphs(get_dataset("MUTAG"), data_root=None, cache_dir=tmp_path / "cache", offline=True)
    assert len(graphs.num_nodes) == 188  # MUTAG ships inside the package


def test_ogb_evaluator_and_atom_encoder_without_ogb_name_the_extra(no_ogb):
    from xmask_cli.engine.scoring.metrics import ogb_node_accuracy, rocauc
    from xmask_cli.model.network import ModelConfig, XMaskNet

    with pytest.raises(UsageError, match="ogbn-arxiv's accuracy"):
        ogb_node_accuracy("ogbn-arxiv")
    with pytest.raises(UsageError, match="model.encoder=atom"):
        XMaskNet(ModelConfig(in_dim=9, out_dim=2, hidden=8, heads=2, encoder="atom"))
    # ROC-AUC falls back to its own rank statistic: 3 of the 4 (positive, negative) pairs ordered right.
    assert rocauc([0.9, 0.2, 0.8, 0.7], [1, 0, 0, 1]) == pytest.approx(0.75)
