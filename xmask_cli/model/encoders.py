"""The input encoders and the head MLP of :class:`~xmask_cli.model.network.XMaskNet` (besides the patch encoder)."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["AtomInput", "mlp"]


class AtomInput(torch.nn.Module):
    """OGB ``AtomEncoder`` on padded ``[B, N, 9]`` or flat ``[N, 9]`` integer features.

    With ``struct_dim > 0`` the last ``struct_dim`` columns are float structural
    channels (``model.node_struct``): a linear map of them is added to the atom embedding.
    """

    def __init__(self, atom_encoder: torch.nn.Module, struct_dim: int = 0, hidden: int = 0):
        super().__init__()
        self.atom = atom_encoder
        self.struct_dim = int(struct_dim)
        self.struct = torch.nn.Linear(self.struct_dim, hidden) if self.struct_dim else None

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape[:-1]
        atoms = x[..., :x.size(-1) - self.struct_dim]
        # Features may arrive as float (padding zeros are valid atom ids, masked later).
        h = self.atom(atoms.reshape(-1, atoms.size(-1)).long()).view(*shape, -1)
        if self.struct is not None:
            h = h + self.struct(x[..., x.size(-1) - self.struct_dim:].float())
        return h


def mlp(in_dim: int, dim: int, out_dim: int, dropout: float) -> torch.nn.Sequential:
    """``Linear -> ReLU -> Dropout -> Linear``: the node / graph / pair head."""
    return torch.nn.Sequential(
        torch.nn.Linear(in_dim, dim),
        torch.nn.ReLU(),
        torch.nn.Dropout(dropout),
        torch.nn.Linear(dim, out_dim),
    )
