"""The atom input and the head MLP, each against the same arithmetic written with plain torch ops on its own
weights (in float64; the atom input reads its structural channels as float32, so it runs in float32)."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.model.encoders import AtomInput, mlp

ogb_encoder = pytest.importorskip("ogb.graphproppred.mol_encoder")

HIDDEN = 6


def _atoms(shape: tuple[int, ...]) -> torch.Tensor:
    """Random valid OGB atom features ``[*shape, 9]`` (each column below its vocabulary size)."""
    sizes = torch.tensor([e.num_embeddings for e in ogb_encoder.AtomEncoder(1).atom_embedding_list])
    return (torch.rand(*shape, len(sizes)) * sizes).long()


def _by_hand(enc: AtomInput, atoms: torch.Tensor, struct: torch.Tensor | None) -> torch.Tensor:
    """Sum over columns of that column's embedding row, plus ``W s + b`` of the structural channels."""
    tables = [e.weight.double() for e in enc.atom.atom_embedding_list]
    out = torch.zeros(*atoms.shape[:-1], HIDDEN, dtype=torch.float64)
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in atoms.shape[:-1])).view(-1, atoms.dim() - 1):
        at = tuple(idx.tolist())
        out[at] = sum(tables[c][int(atoms[at][c])] for c in range(atoms.size(-1)))
        if struct is not None:
            assert enc.struct is not None
            out[at] += enc.struct.weight.double() @ struct[at].double() + enc.struct.bias.double()
    return out


def test_atom_input_sums_the_column_embeddings_of_padded_and_flat_features() -> None:
    torch.manual_seed(0)
    enc = AtomInput(ogb_encoder.AtomEncoder(HIDDEN))
    atoms = _atoms((2, 3))
    # Features arrive as float from a padded batch: the same ids.
    padded = enc(atoms.float())
    assert padded.shape == (2, 3, HIDDEN)
    torch.testing.assert_close(padded.double(), _by_hand(enc, atoms, None), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(enc(atoms.view(6, -1)), padded.view(6, HIDDEN))


def test_atom_input_adds_a_linear_map_of_the_structural_channels() -> None:
    torch.manual_seed(1)
    enc = AtomInput(ogb_encoder.AtomEncoder(HIDDEN), struct_dim=2, hidden=HIDDEN)
    atoms, struct = _atoms((2, 3)), torch.randn(2, 3, 2)
    out = enc(torch.cat([atoms.float(), struct], -1)).double()
    torch.testing.assert_close(out, _by_hand(enc, atoms, struct), rtol=1e-5, atol=1e-6)
    assert (out - _by_hand(enc, atoms, None)).abs().max() > 1e-3  # the channels do count


def test_mlp_is_linear_relu_dropout_linear() -> None:
    torch.manual_seed(2)
    head = mlp(4, 5, 3, dropout=1.0).double()
    x = torch.randn(7, 4, dtype=torch.float64)
    first, last = head[0], head[-1]
    expected = torch.clamp(x @ first.weight.T + first.bias, min=0) @ last.weight.T + last.bias
    torch.testing.assert_close(head.eval()(x), expected)
    # In training, dropout p=1 zeroes every hidden unit after the ReLU: only the last bias is left.
    torch.testing.assert_close(head.train()(x), last.bias.expand(7, 3))
