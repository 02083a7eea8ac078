"""The named architectures: the registry against the schema's names and keys, what each builds, and every
path (padded, packed, sparse) giving the same numbers for each architecture that runs on it."""
from __future__ import annotations

import typing

import numpy as np
import pytest
import torch

from tests.model.graphs import PATH_TRIANGLE, TWO_PARTS, disjoint_union, padded
from xmask_cli.config import ModelSection
from xmask_cli.config_arch import ARCHS as ARCH_NAMES
from xmask_cli.config_arch import keys_read
from xmask_cli.errors import ConfigError
from xmask_cli.model.archs import ARCHS, get_arch
from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.network import ModelConfig, XMaskNet


def test_registry_holds_the_schema_names_and_keys() -> None:
    assert tuple(ARCHS) == ARCH_NAMES
    assert typing.get_args(typing.get_type_hints(ModelSection)["arch"]) == ("auto", *ARCH_NAMES)
    for name, arch in ARCHS.items():
        assert arch.name == name and arch.KEYS == keys_read(name), name
    with pytest.raises(ValueError, match="no architecture 'auto'"):
        get_arch("auto")


def _cfg(**kw) -> ModelConfig:
    base = dict(in_dim=5, out_dim=3, hidden=8, heads=2, layers=2, dropout=0.0, task="node")
    return ModelConfig(**{**base, **kw})


def _block_parts(block: TransformerBlock) -> set[str]:
    return {name.split(".")[0] for name, _ in block.named_parameters()}


def test_each_architecture_builds_its_own_layer() -> None:
    transformer = XMaskNet(_cfg())
    assert transformer.cfg.arch == "transformer" and transformer.cfg.ffn
    assert _block_parts(transformer.blocks[0]) == {"attn", "ffn", "norm1", "norm2"}
    gat = XMaskNet(_cfg(arch="gat", norm="none", residual=False, activation="elu", combine="concat"))
    assert gat.cfg.arch == "gat" and not gat.cfg.ffn  # the saved config says what was built
    assert _block_parts(gat.blocks[0]) == {"attn"} and gat.blocks[0].attn.out is None
    assert gat.blocks[0].activation == "elu"
    experts = XMaskNet(_cfg(experts=("local", "global")))
    assert experts.cfg.arch == "experts" and set(experts.blocks[0].attn.experts) == {"local", "global"}
    vit = XMaskNet(_cfg(task="image", in_dim=3, image_size=(4, 4), patch_size=2, readout="cls", norm="pre"))
    assert vit.cfg.arch == "vit" and vit.encoder.offset == 1  # the class token first


@pytest.mark.parametrize(("kw", "named"), [
    ({"arch": "transformer", "combine": "concat"}, "model.arch=gat"),
    ({"arch": "gat", "ffn_mult": 4}, "model.arch=transformer or model.arch=experts or model.arch=vit"),
    ({"arch": "gat", "experts": ("local",)}, "model.arch=experts"),
    ({"arch": "experts"}, "model.arch=experts needs model.experts"),
    ({"arch": "transformer", "ffn": False}, "model.arch=gat"),
    ({"experts": ("local",), "output": "attention"}, "model.arch=transformer or model.arch=gat"),
])
def test_a_key_the_architecture_does_not_read_is_refused_naming_the_one_that_does(kw: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")) as err:
        _cfg(**kw)
    assert "model.arch" in err.value.keys


def test_the_old_spelling_maps_with_one_note(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from xmask_cli import config_arch

    monkeypatch.setattr(config_arch, "_NOTED", set())
    old = _cfg(ffn=False, activation="elu")
    new = _cfg(arch="gat", activation="elu")
    _cfg(ffn=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: model.ffn=false is the old spelling of model.arch=gat; read as model.arch=gat"]
    assert old == new  # the same network: arch gat, no feed-forward layer
    torch.manual_seed(0)
    a = XMaskNet(old)
    b = XMaskNet(new)
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}


#: A value away from the default for each key only some architectures read (expert_attention is left out: its
#: three modes compute the same numbers, tested in test_experts.py).
OTHER_VALUE = {"ffn_mult": 3, "activation": "elu", "combine": "concat", "output": "attention", "positional": "learned",
               "routing": "flat", "experts": ("local", "global")}


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_every_key_an_architecture_reads_changes_its_network(arch: str) -> None:
    """What READ_BY says an architecture reads, it reads: the key moves its parameters or its outputs."""
    base = {"transformer": {}, "gat": {"arch": "gat"}, "experts": {"arch": "experts", "experts": ("local",)},
            "vit": {"arch": "vit", "task": "image", "in_dim": 3, "image_size": (4, 4), "patch_size": 2},
            "gps": {"arch": "gps", "task": "graph", "edge_encoding": "index", "edge_dims": (3,)}}[arch]

    def fingerprint(**kw) -> tuple[dict, torch.Tensor | None]:
        torch.manual_seed(0)
        model = XMaskNet(_cfg(**{**base, **kw})).double().eval()
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        if arch not in ("transformer", "gat", "gps"):
            return shapes, None
        powers, mask = padded([PATH_TRIANGLE], 2)
        x = torch.randn(1, 6, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        joined = torch.from_numpy(PATH_TRIANGLE > 0).unsqueeze(0)
        edges = {"edge_mask": joined, "edge_attr": (joined.long() * 2).unsqueeze(-1)}  # gps reads the edges
        with torch.no_grad():
            return shapes, model(DenseBatch(x, powers.expand(-1, 2, -1, -1), mask, extras=edges))

    keys = keys_read(arch) - {"expert_attention"}
    assert keys, arch
    start = fingerprint(head_powers=(1, 2))
    for key in sorted(keys):
        moved = fingerprint(head_powers=(1, 2), **{key: OTHER_VALUE[key]})
        same_out = start[1] is not None and moved[1] is not None and moved[1].shape == start[1].shape \
            and torch.allclose(moved[1], start[1])
        assert moved[0] != start[0] or not same_out, (arch, key)


# ------------------------------------------------------------------ paths agree, per architecture
#: Graph-level architectures and the switches each is run with here (every key away from its default).
GRAPH_ARCHS = {
    "transformer": {"norm": "pre", "residual": True, "ffn_mult": 3},
    "gat": {"arch": "gat", "norm": "none", "residual": False, "activation": "elu", "combine": "concat"},
    "gat-post": {"arch": "gat", "norm": "post", "residual": True, "activation": "gelu"},
}


@pytest.mark.parametrize("name", sorted(GRAPH_ARCHS))
@pytest.mark.parametrize("readout", ["sum", "mean", "max"])
def test_padded_packed_and_sparse_agree_for_every_graph_architecture(name: str, readout: str) -> None:
    """The same graphs through the padded, packed and sparse (disjoint union) paths: the same outputs."""
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, head_powers=(1, 2), layers=2, dropout=0.0,
                      task="graph", readout=readout, **GRAPH_ARCHS[name])
    packed_model = XMaskNet(cfg).double().eval()
    padded_model = XMaskNet(ModelConfig(**{**cfg.to_dict(), "graph_layout": "padded"})).double().eval()
    padded_model.load_state_dict(packed_model.state_dict())
    graphs = [PATH_TRIANGLE, TWO_PARTS, PATH_TRIANGLE[:4, :4]]
    powers, mask = padded(graphs, 2)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*mask.shape, 5, generator=gen, dtype=torch.float64).masked_fill(~mask.unsqueeze(-1), 0.0)
    with torch.no_grad():
        out_packed = packed_model(DenseBatch(x, powers, mask))
        out_padded = padded_model(DenseBatch(x, powers, mask))
        edge_index, values = disjoint_union(graphs, 2)
        batch = torch.cat([torch.full((len(a),), g) for g, a in enumerate(graphs)])
        out_sparse = packed_model.forward_sparse(x[mask], edge_index, values, batch, len(graphs))
    assert packed_model.packs() and not padded_model.packs()
    assert float(out_padded.std()) > 1e-3  # outputs that differ between graphs: a comparison that can fail
    np.testing.assert_allclose(out_packed.numpy(), out_padded.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(out_sparse.numpy(), out_padded.numpy(), rtol=1e-9, atol=1e-10)
