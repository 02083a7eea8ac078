"""benchmarks/graph_speed.py: its presets, its GIN peer's readouts and encoder, its memory reading."""
from __future__ import annotations

import pytest
import torch

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def graph_speed():
    return load_script("graph_speed")


def test_each_dataset_is_timed_on_the_preset_train_picks(graph_speed) -> None:
    from xmask_cli.config_resolve import resolve

    for dataset, preset in graph_speed.PRESETS.items():
        assert resolve(preset, [f"data.dataset={dataset}"]).data.dataset == dataset
    assert resolve("ogbg-molhiv").model.readout == "mean" and resolve("ogbg-molhiv").model.encoder == "atom"


@pytest.mark.parametrize("pool, reduce", [("sum", torch.sum), ("mean", torch.mean)])
def test_gin_peer_pools_as_asked_after_its_encoder(graph_speed, pool, reduce) -> None:
    """5 GIN layers at hidden 64; the readout is the node states' sum or mean, after the input encoder."""
    from peers_gnn import _gin  # benchmarks/ is on the path once the script is loaded

    encoder = torch.nn.Linear(7, 16)
    gin = _gin(16, 2, hidden=graph_speed.GIN_HIDDEN, layers=graph_speed.GIN_LAYERS, encoder=encoder, pool=pool)
    assert len(gin.convs) == 5 and graph_speed.GIN_HIDDEN == 64
    gin.eval()
    x, ei = torch.randn(3, 7), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    h = encoder(x)
    for conv in gin.convs:
        h = conv(h, ei)
    out = gin(x, ei, torch.zeros(3, dtype=torch.long), 1)
    torch.testing.assert_close(out, gin.head(reduce(h, 0, keepdim=True)))


def test_peak_rss_reads_this_process(graph_speed) -> None:
    import resource

    peak = graph_speed.peak_rss_mb()
    # VmHWM and ru_maxrss agree for a process that was not forked from a larger one.
    assert 10 < peak <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 + 1
