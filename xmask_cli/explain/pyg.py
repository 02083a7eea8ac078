"""A recorded target as a ``torch_geometric.explain.Explanation`` (``xmask explain --pyg``).

Built from the maps ``explain`` recorded (:class:`~xmask_cli.explain.targets.TargetMaps`, the numbers
``maps.h5`` holds); nothing is recomputed. On the target's crop of ``m`` nodes:

- ``x``: ``[m, F]`` input features of the crop's nodes, in ``node_ids`` order;
- ``edge_index``: ``[2, 2E]`` the structure's edges among them (``graph/edges`` of ``maps.h5``), both
  directions, PyG's convention: row 0 the source (key), row 1 the target (query);
- ``edge_mask``: ``[2E]`` the attention the target node of each edge pays to its source,
  ``attention[layer][head][dst, src]``, or its mean over the layer's heads when no head is chosen;
- ``node_mask``: ``[m, 1]`` the query node's attention row over the crop (``attention[layer][head][query, :]``,
  or the heads' mean), the same numbers the graph view colours nodes by;
- ``node_ids`` (``[m]`` global ids), ``query`` (position of the query node in ``node_ids``), ``target_name``
  (``graph_17``, ``node_5``, ``edge_3_9``; PyG keeps ``target`` for the model's target), ``layer`` and ``head`` (``-1`` for the mean over heads) as further attributes.

Layer and head are numbered from 0; the default layer is the last.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from xmask_cli.errors import UsageError
from xmask_cli.explain.targets import TargetMaps
from xmask_cli.fs import atomic_write

__all__ = ["EXPLANATION_SUFFIX", "explanation_name", "save_explanation", "to_explanation"]

#: Suffix of a target's saved Explanation, ``<target>_explanation.pt``.
EXPLANATION_SUFFIX = "_explanation.pt"


def explanation_name(target: str) -> str:
    """File name of ``target``'s saved Explanation beside ``maps.h5``."""
    return f"{target}{EXPLANATION_SUFFIX}"


def _head_map(t: TargetMaps, layer: int, head: int | None) -> np.ndarray:
    """``[m, m]`` attention of ``head`` of ``layer`` (the heads' mean when ``head`` is None)."""
    att = t.maps[layer]["attention"]
    if head is None:
        return np.asarray(att, dtype=np.float64).mean(axis=0)
    if not 0 <= head < att.shape[0]:
        raise UsageError(f"--head {head}: the run's model has heads 0..{att.shape[0] - 1}")
    return np.asarray(att[head], dtype=np.float64)


def to_explanation(t: TargetMaps, layer: int | None = None, head: int | None = None) -> Any:
    """``t`` as a ``torch_geometric.explain.Explanation`` (see the module docstring for its fields).

    Raises:
        UsageError: ``layer`` or ``head`` out of range, or a target recorded without its features.
    """
    import torch
    from torch_geometric.explain import Explanation

    layers = len(t.maps)
    chosen = layers - 1 if layer is None else int(layer)
    if not 0 <= chosen < layers:
        raise UsageError(f"--layer {chosen}: the run's model has layers 0..{layers - 1}")
    m = len(t.node_ids)
    if t.x.shape[0] != m:
        raise UsageError(f"{t.name}: recorded without its node features; record it again with explain")
    att = _head_map(t, chosen, head)
    und = np.asarray(t.edges, dtype=np.int64).reshape(2, -1)
    src = np.concatenate([und[0], und[1]])
    dst = np.concatenate([und[1], und[0]])
    query = int(np.flatnonzero(np.asarray(t.node_ids) == t.query)[0])
    # Cropped rows sum to at most 1, and pairs the sparse path did not attend are 0: the masks stay in [0, 1].
    return Explanation(
        x=torch.as_tensor(np.asarray(t.x, dtype=np.float32)),
        edge_index=torch.as_tensor(np.stack([src, dst])),
        edge_mask=torch.as_tensor(att[dst, src], dtype=torch.float32),
        node_mask=torch.as_tensor(att[query], dtype=torch.float32).unsqueeze(1),
        node_ids=torch.as_tensor(np.asarray(t.node_ids, dtype=np.int64)),
        query=query, target_name=t.name, layer=chosen, head=-1 if head is None else int(head),
    )


def save_explanation(explanation: Any, path: Path) -> Path:
    """``torch.save`` of ``explanation`` to ``path`` through the shared atomic writer (whole or not at all)."""
    import torch

    buf = io.BytesIO()
    torch.save(explanation, buf)
    atomic_write(path, lambda f: f.write(buf.getvalue()), "pass another --out")
    return path
