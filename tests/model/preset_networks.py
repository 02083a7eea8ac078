"""Every shipped preset's network, as ``xmask train`` builds it, pinned: names, shapes and outputs.

``python -m tests.model.preset_networks`` (from the repository root, with ``XMASK_TEST_DATA`` set to the
benchmark datasets) writes ``tests/model/preset_networks.json`` (per preset: the run fields the model was
built with, its state dict's names and shapes) and ``tests/model/preset_networks.npz`` (per preset: its
outputs on a fixed small input). ``tests/model/test_preset_networks.py`` rebuilds every preset with the
code of the day and compares. The fixture's header says which commit and command wrote it; rewrite it
only when a network is meant to change.

How a network is built: the preset is resolved (``config_resolve.resolve``), its level resolved as the
engine does (``engine.runs.plan.resolve_level``) and its :class:`ModelConfig` built by the engine's own
``experiment._model_config`` (``encoder: auto`` resolved against the dataset, ``eps`` and ``rrwp_dim`` from
``structure``). The run fields that come from data are the dataset's own where its files are under
``XMASK_TEST_DATA`` (feature width, classes); elsewhere stand-ins (:data:`STAND_IN`), and images their
real channel count and size. Structural node channels (``model.node_struct``) are given a stand-in
width of 3 per channel kind, and a ``sum`` readout with ``readout_norm: size`` a readout scale of 0.25:
the fixture pins the network, not the data.

Weights: every state-dict entry is drawn from a generator seeded by a hash of its NAME, so the values
do not depend on the order parameters are created in. Outputs are computed in eval mode, float64, on
a fixed input per level (:func:`forward_fixed`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.model.graphs import PATH_TRIANGLE, adjacency, norm_powers, union_pairs

REPO = Path(__file__).resolve().parents[2]
FIXTURE_JSON = Path(__file__).with_name("preset_networks.json")
FIXTURE_NPZ = Path(__file__).with_name("preset_networks.npz")
#: Where a shipped preset may live: the packaged presets, or the benchmark pages' superseded recipes.
PRESET_DIRS = (REPO / "presets", REPO / "benchmarks" / "presets")
#: in_dim, out_dim for a level whose dataset is not under XMASK_TEST_DATA.
STAND_IN = {"node": (12, 5), "graph": (7, 2), "link": (12, 1), "edge": (6, 2)}
#: Image datasets: channels, height, width, classes (the real ones).
IMAGES = {"digits": (1, 8, 8, 10), "cifar10": (3, 32, 32, 10)}
STRUCT_WIDTH = 3
READOUT_SCALE = 0.25


def find_preset(name: str) -> Path:
    """``<name>.yaml`` in presets/ or benchmarks/presets/."""
    for folder in PRESET_DIRS:
        path = folder / f"{name}.yaml"
        if path.is_file():
            return path
    raise FileNotFoundError(f"preset {name} is in neither of {[str(p) for p in PRESET_DIRS]}")


def name_seed(name: str) -> int:
    """A 63-bit seed from a state-dict entry's name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") >> 1


def load_named_weights(model: torch.nn.Module) -> None:
    """Fill every floating state-dict entry from a generator keyed by its name (scale 0.3)."""
    state = model.state_dict()
    new = {}
    for name, value in state.items():
        if value.is_floating_point():
            gen = torch.Generator().manual_seed(name_seed(name))
            new[name] = (0.3 * torch.randn(value.shape, generator=gen, dtype=torch.float64)).to(value.dtype)
        else:
            new[name] = value
    model.load_state_dict(new)


def _dataset_dims(dataset: str, level: str) -> tuple[int, int] | None:
    """The dataset's feature width and classes where its files are under XMASK_TEST_DATA; else None."""
    root = os.environ.get("XMASK_TEST_DATA")
    if not root:
        return None
    from xmask_cli.data.load import has_raw_files, load_graphs
    from xmask_cli.data.registry import get_dataset

    try:
        spec = get_dataset(dataset)
    except Exception:  # noqa: BLE001  a folder or unknown name: stand-ins
        return None
    if not has_raw_files(spec, Path(root)):
        return None
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        graphs = load_graphs(spec, data_root=Path(root), cache_dir=Path(tmp), offline=True)
        in_dim = graphs.feature_info().dim
        ds = graphs.dataset
        out_dim = 1 if level == "link" else int(ds.num_classes)
    return int(in_dim), out_dim


def run_fields(cfg: Any, level: str, dims_of: dict[tuple[str, str], tuple[int, int] | None]) -> dict[str, Any]:
    """The fields ``xmask train`` adds to the model section (see the module docstring for stand-ins)."""
    dataset = cfg.data.dataset
    if level == "image":
        c, h, w, classes = IMAGES[dataset.lower()]
        return {"in_dim": c, "out_dim": classes, "image_size": [h, w], "patch_size": cfg.image.patch}
    if (dataset, level) not in dims_of:
        dims_of[dataset, level] = None if level == "edge" else _dataset_dims(dataset, level)
    in_dim, out_dim = dims_of[dataset, level] or STAND_IN[level]
    struct = 0 if cfg.model.node_struct == "none" else STRUCT_WIDTH * len(cfg.model.node_struct.split("+"))
    fields: dict[str, Any] = {"in_dim": in_dim + struct, "out_dim": out_dim, "struct_dim": struct}
    if level == "graph" and cfg.model.readout == "sum" and cfg.model.readout_norm == "size":
        fields["readout_scale"] = READOUT_SCALE
    return fields


def level_of(cfg: Any) -> str:
    """The task level as the engine resolves it (an edge preset names its level; its file comes with --set)."""
    from xmask_cli.engine.runs.plan import resolve_level

    return "edge" if cfg.task.level == "edge" else resolve_level(cfg)


def model_config(preset: str, fields: dict[str, Any]) -> Any:
    """The preset's :class:`ModelConfig` as the engine builds it, with the given run fields."""
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import _model_config

    cfg = resolve(str(find_preset(preset)))
    level = level_of(cfg)
    extra = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()
             if k not in ("in_dim", "out_dim", "readout_scale")}
    return _model_config(cfg, level, fields["in_dim"], fields["out_dim"], cfg.data.dataset,
                         fields.get("readout_scale", 1.0), **extra)


def build(preset: str, fields: dict[str, Any]) -> torch.nn.Module:
    """The preset's network with name-keyed weights, float64, eval mode."""
    from xmask_cli.model.network import XMaskNet

    torch.manual_seed(0)
    cfg = model_config(preset, fields)
    # float64, but OGB's atom input casts its structural channels to float32: that network stays float32.
    model = XMaskNet(cfg) if cfg.encoder == "atom" else XMaskNet(cfg).double()
    load_named_weights(model)
    return model.eval()


# ------------------------------------------------------------------ inputs
_SMALL = adjacency(4, [(0, 1), (1, 2), (2, 3)])


def _features(n: tuple[int, ...], in_dim: int, cfg: Any, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if cfg.encoder == "atom":  # integer atom ids (small: valid for every OGB atom vocabulary), then struct channels
        atoms = torch.randint(0, 2, (*n, in_dim - cfg.struct_dim), generator=gen).double()
        return torch.cat([atoms, torch.rand(*n, cfg.struct_dim, generator=gen, dtype=torch.float64)], -1)
    return torch.randn(*n, in_dim, generator=gen, dtype=torch.float64)


def _dense_extras(powers: torch.Tensor, mask: torch.Tensor, rrwp_dim: int) -> dict[str, torch.Tensor]:
    """What every learned bias reads, dense: hop counts, walk channels, eigen- and magnetic pairs."""
    gen = torch.Generator().manual_seed(7)
    B, _, N, _ = powers.shape
    hops = torch.full((B, N, N), -1, dtype=torch.long)
    reach = torch.zeros(B, N, N, dtype=torch.bool)
    for k in range(powers.size(1)):
        new = (powers[:, k] > 0) & ~reach
        hops[new] = k + 1
        reach |= new
    hops[:, torch.arange(N), torch.arange(N)] = 0
    hops = hops.masked_fill(~(mask.unsqueeze(1) & mask.unsqueeze(2)), -1)
    m = 3
    return {
        "spd": hops,
        "rrwp": torch.rand(B, rrwp_dim, N, N, generator=gen, dtype=torch.float64),
        "eig_vals": torch.rand(B, m, generator=gen, dtype=torch.float64) * 2,
        "eig_vecs": torch.randn(B, N, m, generator=gen, dtype=torch.float64),
        "eig_mask": torch.ones(B, m, dtype=torch.bool),
        "mag_vals": torch.rand(B, m, generator=gen, dtype=torch.float64) * 2,
        "mag_vecs": torch.randn(B, N, m, generator=gen, dtype=torch.complex128),
        "mag_mask": torch.ones(B, m, dtype=torch.bool),
    }


def _padded_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """Two graphs (6 and 4 nodes) padded to 6: powers ``[2, 4, 6, 6]`` float64, mask ``[2, 6]``."""
    k = 4
    powers = torch.zeros(2, k, 6, 6, dtype=torch.float64)
    powers[0] = torch.from_numpy(norm_powers(PATH_TRIANGLE, k))
    powers[1, :, :4, :4] = torch.from_numpy(norm_powers(_SMALL, k))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[0], mask[1, :4] = True, True
    return powers, mask


def _grid_powers(h: int, w: int, k: int) -> torch.Tensor:
    """``[1, K, h w, h w]`` powers of the 4-neighbour patch grid."""
    edges = [(r * w + c, r * w + c + 1) for r in range(h) for c in range(w - 1)]
    edges += [(r * w + c, (r + 1) * w + c) for r in range(h - 1) for c in range(w)]
    return torch.from_numpy(norm_powers(adjacency(h * w, edges), k)).unsqueeze(0)


def forward_fixed(model: Any) -> torch.Tensor:
    """The model's outputs on the fixed input of its level (no grad)."""
    from xmask_cli.model.batches import DenseBatch, TokenBatch

    cfg = model.cfg
    k = max(4, cfg.max_power)
    with torch.no_grad():
        if cfg.task == "image":
            side = cfg.image_size[0] // cfg.patch_size, cfg.image_size[1] // cfg.patch_size
            gen = torch.Generator().manual_seed(3)
            x = torch.randn(2, cfg.in_dim, *cfg.image_size, generator=gen, dtype=torch.float64)
            return model(DenseBatch(x, _grid_powers(*side, k)))
        if cfg.experts:
            return _forward_tokens(model, TokenBatch)
        powers, mask = _padded_pair()
        if k > powers.size(1):
            powers = torch.cat([powers, powers[:, -1:].expand(-1, k - powers.size(1), -1, -1)], 1)
        extras = _dense_extras(powers, mask, cfg.rrwp_dim) if cfg.biases else None
        if cfg.task == "graph":
            x = _features((2, 6), cfg.in_dim, cfg, 1).to(next(model.parameters()).dtype)
            return model(DenseBatch(x, powers, mask, extras=extras))
        one = {key: v[:1] for key, v in extras.items()} if extras else None
        x = _features((1, 6), cfg.in_dim, cfg, 2)
        if cfg.task in ("link", "edge"):
            h = model.encode_dense(x, powers[:1], mask[:1], extras=one)[0]
            return model.score_pairs(h, torch.tensor([[0, 1, 2, 5], [3, 4, 0, 5]]))
        return model(DenseBatch(x, powers[:1], mask[:1], extras=one))


def _forward_tokens(model: Any, token_batch: type) -> torch.Tensor:
    """M3Dphormer: the tokens of a 10-node graph, 2 parts, 3 classes."""
    from xmask_cli.model.experts import hierarchical_tokens

    cfg = model.cfg
    n = 10
    a = adjacency(n, [(i, (i + 1) % n) for i in range(n)] + [(0, 5), (2, 7)])
    edge_index, values = union_pairs(norm_powers(a, max(4, cfg.max_power)))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(n, cfg.in_dim, generator=gen, dtype=torch.float64)
    part = torch.arange(n) * 2 // n
    train = torch.tensor([0, 3, 6, 9])
    masks = hierarchical_tokens(n, edge_index, part, train, torch.tensor([0, 1, 2, 1]), 3)
    return model(token_batch(masks.pool(x), masks, values if cfg.use_bias else None))


# ------------------------------------------------------------------ writer
def main() -> None:
    """Write the fixture for every preset in :data:`PRESET_DIRS` (see the module docstring)."""
    import json
    import subprocess
    import sys

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dims_of: dict[tuple[str, str], tuple[int, int] | None] = {}
    nets: dict[str, Any] = {}
    outputs: dict[str, np.ndarray] = {}
    from xmask_cli.config_resolve import resolve

    for path in sorted(p for folder in PRESET_DIRS for p in folder.glob("*.yaml")):
        name = path.stem
        cfg = resolve(str(path))
        level = level_of(cfg)
        fields = run_fields(cfg, level, dims_of)
        model = build(name, fields)
        out = forward_fixed(model)
        nets[name] = {"level": level, "fields": fields,
                      "state": {k: list(v.shape) for k, v in model.state_dict().items()}}
        outputs[name] = out.numpy()
        print(f"{name}: {level}, {len(nets[name]['state'])} entries, out {tuple(out.shape)}", file=sys.stderr)
    header = {"commit": commit, "command": "XMASK_TEST_DATA=<datasets> python -m tests.model.preset_networks",
              "what": "per preset: level, run fields, state-dict names and shapes; outputs in preset_networks.npz"}
    FIXTURE_JSON.write_text(json.dumps({"header": header, "presets": nets}, sort_keys=True, separators=(",", ":")) + "\n")
    np.savez_compressed(FIXTURE_NPZ, **outputs)


if __name__ == "__main__":
    main()
