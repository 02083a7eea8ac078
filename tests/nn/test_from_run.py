"""XLogSMaskBlock.from_run (and XLogSMaskAttention.from_run) rebuild a trained run's block (its attention): every
distinct block the shipped node and graph presets build, trained for one epoch, computes the run's own outputs
through the public classes, on both paths.

The kinds of block are read off the presets (the switches a block is built from), one run per kind on the
preset's stand-in (tests/test_presets_train.py) at ``model.hidden=8``; blocks the public class does not compute
(M3Dphormer's experts, learned biases) are refused by name.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_dense_adj

import xmask_cli
from tests.test_presets_train import stand_in_overrides
from xmask_cli.config import Config
from xmask_cli.config_resolve import packaged_presets_dir, resolve
from xmask_cli.engine.runs.plan import resolve_level
from xmask_cli.errors import UsageError
from xmask_cli.model.logsmask import DenseStructure
from xmask_cli.model.model_config import ModelConfig, plain_heads
from xmask_cli.model.network import XMaskNet
from xmask_cli.nn import XLogSMaskAttention, XLogSMaskBlock
from xmask_cli.nn.from_run import block_settings
from xmask_cli.transforms import AddLogSMask

LEVELS = ("node", "graph")


@functools.cache
def _preset(name: str) -> Config:
    return resolve(name)


NODE_LEVEL = {name: "edge" if _preset(name).task.level == "edge" else resolve_level(_preset(name))
              for name in sorted(p.stem for p in packaged_presets_dir().glob("*.yaml"))}
PRESETS = [name for name, level in NODE_LEVEL.items() if level in LEVELS]


def _kind(name: str) -> tuple[Any, ...]:
    """The switches a preset's blocks are built from (widths aside): two presets of one kind build the same blocks."""
    m = _preset(name).model
    return (m.residual, m.norm, m.ffn, m.activation, m.combine, m.mask_scale, m.outside_support, m.use_bias,
            m.encoder == "none", bool(plain_heads(m)), m.output, bool(m.experts), bool(m.biases))


def _refused(name: str) -> bool:
    m = _preset(name).model
    return bool(m.experts or m.biases)


KINDS: dict[tuple[Any, ...], str] = {}
for _name in PRESETS:
    KINDS.setdefault(_kind(_name), _name)
REBUILT = sorted(name for name in KINDS.values() if not _refused(name))
REFUSED = sorted(name for name in PRESETS if _refused(name))


def test_the_kinds_cover_the_shipped_switches():
    # Every switch value a shipped node or graph preset uses appears in a rebuilt kind (read, not listed).
    for position in range(8):
        used = {_kind(name)[position] for name in PRESETS if not _refused(name)}
        assert used == {_kind(name)[position] for name in REBUILT}
    assert len(REBUILT) >= 5 and REFUSED


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Any]:
    """One run per kind: the preset on its stand-in, hidden 8, one epoch; read back with load_run."""
    root = tmp_path_factory.mktemp("from-run")
    out = {}
    for name in REBUILT:
        sets = [*stand_in_overrides(name, root), "model.hidden=8", "train.epochs=1"]
        result = xmask_cli.train(name, sets, seeds=0, device="cpu", name=name, runs_dir=root / "runs",
                                 cache_dir=root / "cache")
        out[name] = xmask_cli.load_run(result.runs[0].run_dir, cache_dir=root / "cache")
    out["cache"] = root / "cache"
    return out


def _graph(run: Any, n: int = 14, seed: int = 0) -> Data:
    """A random graph with the run's input width and its structure's powers."""
    g = torch.Generator().manual_seed(seed)
    powers = run.config.structure.powers
    data = Data(x=torch.randn(n, run.model.cfg.in_dim, generator=g), edge_index=torch.randint(0, n, (2, 2 * n),
                                                                                                generator=g), num_nodes=n)
    return AddLogSMask(k=powers.k, normalization=powers.normalization)(data)


@pytest.mark.parametrize("attention", ["dense", "sparse"])
@pytest.mark.parametrize("name", REBUILT)
@torch.no_grad()
def test_the_public_blocks_compute_the_runs_outputs(runs, name, attention):
    run = runs[name]
    model: XMaskNet = run.model
    data = _graph(run)
    dense = to_dense_adj(data.logsmask_index, edge_attr=data.logsmask_values, max_num_nodes=data.num_nodes)
    powers = dense.permute(0, 3, 1, 2)
    want = model.encode_dense(data.x[None], powers)[0]  # the run's model, every block
    h = model.embed(data.x)
    for layer in range(model.cfg.layers):
        block = XLogSMaskBlock.from_run(run, layer, attention=attention)
        assert not block.training and block.layer.state_dict().keys() == model.blocks[layer].state_dict().keys()
        h = block(h, data.logsmask_index, data.logsmask_values)
    torch.testing.assert_close(h, want, rtol=1e-4, atol=1e-5)
    assert want.abs().max() > 0.1
    # The attention alone: the run's first block's attention, with the run's log mask.
    mask = torch.ones(1, data.num_nodes, dtype=torch.bool)
    h0 = model.embed(data.x)
    attn = XLogSMaskAttention.from_run(run, 0, attention=attention)
    bias = None if model.bias is None else model.bias(DenseStructure(powers=powers, mask=mask))
    torch.testing.assert_close(attn(h0, data.logsmask_index, data.logsmask_values),
                               model.blocks[0].attn(h0[None], bias, mask=mask)[0], rtol=1e-4, atol=1e-5)
    if model.out_block is not None:  # the attention output layer too, as a block and as an attention
        want_out = model.output_dense(want[None], powers, mask)[0]
        for cls in (XLogSMaskBlock, XLogSMaskAttention):
            out = cls.from_run(run, "output", attention=attention)
            torch.testing.assert_close(out(h, data.logsmask_index, data.logsmask_values), want_out,
                                       rtol=1e-4, atol=1e-5)


def test_a_run_folder_and_its_loaded_run_give_the_same_block(runs):
    name = next(n for n in REBUILT if NODE_LEVEL[n] == "graph")
    run = runs[name]
    from_folder = XLogSMaskBlock.from_run(str(run.path), 0, cache_dir=runs["cache"])  # read with load_run
    from_loaded = XLogSMaskBlock.from_run(run, 0)
    for key, value in from_loaded.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, from_folder.state_dict()[key]), key
    with pytest.raises(UsageError, match=rf"^layer: expected a block of the run, 0\.\.{run.model.cfg.layers - 1} "
                                         r"or 'output'; got 9"):
        XLogSMaskBlock.from_run(run, 9)
    with pytest.raises(UsageError, match=r"^layer: 'output' is the attention output layer.*model\.output=mlp"):
        XLogSMaskBlock.from_run(run, "output")
    with pytest.raises(UsageError, match="^run: expected a run folder or a LoadedRun"):
        XLogSMaskBlock.from_run(42, 0)


@pytest.mark.parametrize("name", REFUSED)
def test_blocks_the_public_class_does_not_compute_are_refused(name):
    cfg = _preset(name)
    model = XMaskNet(ModelConfig.from_section(cfg.model, in_dim=5, out_dim=2, task=NODE_LEVEL[name]))
    said = r"^run: .*model\.experts" if cfg.model.experts else r"^layer: block 0 adds learned .* \(model\.biases\)"
    with pytest.raises(UsageError, match=said):
        block_settings(model, 0)


def test_a_runs_block_loaded_into_other_switches_fails(runs):
    """Weights of a run trained without residuals do not load into a block with them (they once did, silently)."""
    name = next(n for n in REBUILT if not _preset(n).model.residual and _preset(n).model.encoder != "none")
    block = XLogSMaskBlock.from_run(runs[name], 0)
    switches = {k: v for k, v in block.switches.items() if v is not None}  # ffn_mult is None without an FFN
    XLogSMaskBlock(**switches).load_state_dict(block.state_dict())  # the run's own switches load
    with pytest.raises(UsageError, match="^state_dict: recorded under other switches .*residual False"):
        XLogSMaskBlock(**{**switches, "residual": True}).load_state_dict(block.state_dict())


@pytest.mark.parametrize("attention", ["dense", "sparse"])
@torch.no_grad()
def test_a_model_without_the_log_mask_is_rebuilt_with_plain_heads(attention):
    """``model.use_bias: false`` (no shipped node or graph preset has it): every head plain, over every node."""
    torch.manual_seed(6)
    net = XMaskNet(ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, layers=2, use_bias=False, task="node")).eval()
    loaded = SimpleNamespace(model=net)  # what from_run reads of a LoadedRun
    data = AddLogSMask(k=2)(Data(x=torch.randn(9, 5), edge_index=torch.tensor([[0, 1, 2, 5], [1, 2, 3, 6]]),
                                 num_nodes=9))
    h = net.embed(data.x)
    for layer in range(2):
        block = XLogSMaskBlock.from_run(loaded, layer, attention=attention)
        assert block.head_powers == (0, 0) and block.log_mask is None
        h = block(h, data.logsmask_index, data.logsmask_values)
    torch.testing.assert_close(h, net.encode_dense(data.x[None], None)[0], rtol=1e-4, atol=1e-5)
