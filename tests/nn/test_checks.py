"""The public layers refuse what they cannot compute, naming the argument, before the wrapped layer runs;
and a state dict of another shape or switch set does not load."""
from __future__ import annotations

import io

import pytest
import torch
from torch_geometric.data import Data

from xmask_cli.errors import UsageError, XMaskError
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.nn import XLogSMaskAttention, XLogSMaskBlock
from xmask_cli.transforms import AddLogSMask

N, WIDTH = 5, 8


@pytest.fixture(scope="module")
def ring() -> Data:
    """A 5-node ring with Â^1..Â^2 on its pairs."""
    edges = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    return AddLogSMask(k=2)(Data(edge_index=edges, num_nodes=N))


def _layers(attention: str) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [XLogSMaskAttention(WIDTH, WIDTH, 2, attention=attention),
            XLogSMaskBlock(WIDTH, WIDTH, 2, attention=attention)]


def _bad_inputs(ring: Data) -> list[tuple[str, dict, str]]:
    """(case, the forward's keyword arguments, the start of the message)."""
    x, index, values = torch.randn(N, WIDTH), ring.logsmask_index, ring.logsmask_values
    node5, node99 = index.clone(), index.clone()
    node5[1, 3], node99[0, 0] = 5, 99
    negative = index.clone()
    negative[0, 2] = -1
    twice = torch.cat([index, index[:, :1]], dim=1)
    return [
        ("node 5 of 5", dict(x=x, logsmask_index=node5, logsmask_values=values),
         r"logsmask_index: expected node ids in \[0, 5\) \(x has 5 rows\); got 5"),
        ("node 99", dict(x=x, logsmask_index=node99, logsmask_values=values), r"logsmask_index: .*got 99"),
        ("node -1", dict(x=x, logsmask_index=negative, logsmask_values=values), r"logsmask_index: .*got -1"),
        ("float index", dict(x=x, logsmask_index=index.float(), logsmask_values=values),
         r"logsmask_index: expected an integer tensor \[2, P\].*got float32"),
        ("pair twice", dict(x=x, logsmask_index=twice, logsmask_values=torch.cat([values, values[:1]])),
         "logsmask_index: a pair is listed twice"),
        ("x too wide", dict(x=torch.randn(N, WIDTH + 1), logsmask_index=index, logsmask_values=values),
         r"x: expected 8 features per node \(in_channels\); got 9"),
        ("x of ints", dict(x=torch.ones(N, WIDTH, dtype=torch.long), logsmask_index=index, logsmask_values=values),
         r"x: expected a dense float tensor \[N, 8\]; got int64"),
        ("too few powers", dict(x=x, logsmask_index=index, logsmask_values=values[:, :1]),
         r"logsmask_values: expected at least 2 powers per pair \(the largest head power\); got 1"),
        ("a row per pair", dict(x=x, logsmask_index=index, logsmask_values=values[:-1]),
         r"logsmask_values: expected a float tensor \[P=\d+, K\]"),
        ("batch across", dict(x=x, logsmask_index=index, logsmask_values=values,
                              batch=torch.tensor([0, 0, 0, 1, 1])), r"logsmask_index: pair \(\d, \d\) joins two graphs"),
        ("batch unsorted", dict(x=x, logsmask_index=index, logsmask_values=values,
                                batch=torch.tensor([1, 1, 0, 0, 0])), "batch: expected graph ids >= 0 in ascending"),
        ("batch float", dict(x=x, logsmask_index=index, logsmask_values=values, batch=torch.zeros(N)),
         r"batch: expected an integer tensor \[N=5\]"),
    ]


@pytest.mark.parametrize("attention", ["dense", "sparse"])
def test_bad_inputs_name_the_argument_before_any_arithmetic(ring, attention):
    for layer in _layers(attention):
        ran: list[int] = []
        layer.layer.register_forward_pre_hook(lambda *_, calls=ran: calls.append(1))
        for case, kwargs, said in _bad_inputs(ring):
            with pytest.raises(UsageError, match="^" + said) as err:
                layer(**kwargs)
            assert isinstance(err.value, XMaskError), case
        assert not ran  # the wrapped layer never ran
        # The good input runs on the path asked for, and the check did not change its numbers.
        x = torch.randn(N, WIDTH)
        out = layer(x, ring.logsmask_index, ring.logsmask_values)
        assert out.shape == (N, WIDTH) and ran == [1]


def test_a_block_too_large_for_memory_names_its_setting():
    with pytest.raises(UsageError, match=r"^ffn_mult: the layer's .* float32 weights need .* GiB, more than this "
                                         r"machine's .* GiB; got ffn_mult=1000000000000$"):
        XLogSMaskBlock(8, 8, 2, ffn_mult=10**12)
    with pytest.raises(UsageError, match="^in_channels: .*got in_channels=10000000000$"):
        XLogSMaskAttention(10**10, 8, 2)


def test_a_dense_grid_too_large_for_memory_is_refused_before_it_is_made():
    # 300,000 nodes padded to one dense grid: terabytes. Refused by name; the sparse path is the way.
    n = 300_000
    index = torch.stack([torch.arange(n), torch.arange(n)])
    attn = XLogSMaskAttention(4, 4, 2, attention="dense")
    with pytest.raises(UsageError, match=r"^attention: the dense path pads 1 graph\(s\) to 300000 nodes, .* GiB of "
                                         r"grids, more than this machine's .* GiB; use attention='sparse'$"):
        attn(torch.randn(n, 4), index, torch.ones(n, 2))


def test_bad_settings_name_themselves():
    cases = [
        (lambda: XLogSMaskAttention(8, 6, 4), r"out_channels: expected a multiple of heads \(4\)"),
        (lambda: XLogSMaskAttention(8, 8, 2, head_powers=[1]), r"head_powers: expected one power per head \(2\)"),
        (lambda: XLogSMaskBlock(8, 8, 2, activation="tanh"), "activation: expected one of"),
        (lambda: XLogSMaskBlock(16, 8, 2), r"in_channels: 16 differs from out_channels \(8\)"),
        (lambda: XLogSMaskBlock(8, 4, 2, combine="mean"), "combine: 'mean' .* takes residual=False"),
    ]
    for build, said in cases:
        with pytest.raises(UsageError, match="^" + said):
            build()


def _trained_like(block: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return block.eval()


def test_a_state_dict_loads_only_into_the_same_shape_and_switches(ring):
    torch.manual_seed(1)
    source = _trained_like(XLogSMaskBlock(WIDTH, WIDTH, 2, residual=False, activation="elu"))
    state = source.state_dict()
    assert state["_extra_state"]["residual"] is False  # the switches travel with the weights
    # Through a file, as a user keeps it; weights_only loading reads the record too.
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    same = XLogSMaskBlock(WIDTH, WIDTH, 2, residual=False, activation="elu").eval()
    same.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.randn(N, WIDTH)
    torch.testing.assert_close(same(x, ring.logsmask_index, ring.logsmask_values),
                               source(x, ring.logsmask_index, ring.logsmask_values))
    # Another switch set: the loud failure names each differing switch.
    other = XLogSMaskBlock(WIDTH, WIDTH, 2)
    before = {k: v.clone() for k, v in other.layer.state_dict().items()}
    with pytest.raises(UsageError, match="^state_dict: recorded under other switches than this layer's: "
                                         "residual False .*activation 'elu'"):
        other.load_state_dict(state)
    assert all(torch.equal(before[k], v) for k, v in other.layer.state_dict().items())  # nothing copied
    with pytest.raises(UsageError, match=r"^state_dict: .*head_powers \[1, 2\] \(this layer: \[2, 2\]\)"):
        XLogSMaskBlock(WIDTH, WIDTH, 2, [2, 2], residual=False, activation="elu").load_state_dict(state)
    with pytest.raises(UsageError, match=r"^state_dict: .*out_channels 8 \(this layer: 16\)"):
        XLogSMaskBlock(WIDTH, 16, 2, residual=False, activation="elu", norm="post").load_state_dict(state)
    # A tensor of another shape under a matching record (an edited file) is refused by name too.
    state["layer.attn.q.weight"] = torch.zeros(3, 3)
    with pytest.raises(UsageError, match=r"^state_dict: layer\.attn\.q\.weight is \[3, 3\], this layer's is \[8, 8\]"):
        same.load_state_dict(state)


def test_a_model_blocks_weights_without_their_switches_are_refused():
    model_block = TransformerBlock(WIDTH, 2, residual=False, activation="elu")
    public = XLogSMaskBlock(WIDTH, WIDTH, 2)
    with pytest.raises(UsageError, match=r"^state_dict: _extra_state, the record .* XLogSMaskBlock\.from_run"):
        public.load_state_dict({f"layer.{k}": v for k, v in model_block.state_dict().items()})
    # Keys missing under the right record: torch's strict check, raised as a UsageError too.
    state = public.state_dict()
    del state["layer.attn.q.weight"]
    with pytest.raises(UsageError, match=r"^state_dict: .*Missing key\(s\).*layer\.attn\.q\.weight"):
        public.load_state_dict(state)
    public.load_state_dict(state, strict=False)  # a partial load as torch allows it


def test_inside_a_users_network_the_check_holds():
    torch.manual_seed(2)
    mine = torch.nn.Sequential(torch.nn.Linear(3, WIDTH), XLogSMaskBlock(WIDTH, WIDTH, 2, norm="pre"))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, WIDTH), XLogSMaskBlock(WIDTH, WIDTH, 2))
    with pytest.raises(UsageError, match=r"^state_dict: .*norm 'pre' \(this layer: 'post'\)"):
        theirs.load_state_dict(mine.state_dict())
    theirs[1] = XLogSMaskBlock(WIDTH, WIDTH, 2, norm="pre")
    theirs.load_state_dict(mine.state_dict())  # the same switches load
    # A partial load that holds nothing of the block (here: the first layer only) passes it by.
    theirs.load_state_dict({k: v for k, v in mine.state_dict().items() if k.startswith("0.")}, strict=False)
    assert torch.equal(theirs[1].layer.attn.q.weight, mine[1].layer.attn.q.weight)
