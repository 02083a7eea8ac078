#!/usr/bin/env python
"""Matrix-product arithmetic of one training epoch: xmask's preset against the 5-layer GIN of graph_speed.py.

Counts multiply-adds of the forward pass (the backward costs about twice the forward on both sides, so the
ratio is the training step's) over the very batches an epoch runs: xmask's size-bucketed batches of the
preset, packed as the model packs them (dense attention groups from ``plan_groups``, large sparse graphs
on their stored pairs), and the GIN's per-node MLPs. Element-wise work (norms, dropout, message sums) is
left out on both sides. What the arithmetic alone says about the epoch ratio ``graph_speed.py`` measures.

Usage (from the repository root)::

    python benchmarks/graph_flops.py --data-root ../shared/datasets
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import graph_speed as gs  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def epoch_macs(dataset: str, args: argparse.Namespace) -> dict[str, float]:
    """Forward multiply-adds of one training epoch of each side (GMAC), split by where they go."""
    from xmask_cli.config_arch import has_ffn
    from xmask_cli.engine.tasks.graph import GraphTask, log_mask_of
    from xmask_cli.model.packing import PAIR_DENSITY, PAIR_MIN_NODES, pair_attended, plan_groups

    exp = gs.load_experiment(dataset, args)
    split = gs.train_split(exp, 0)
    cfg, m = exp.cfg, exp.cfg.model
    task = GraphTask(exp.cache_path, exp.graphs, split, exp.metric, cfg.train.batch_size, 0, "cpu",
                     node_struct=m.node_struct, log_mask=log_mask_of(cfg))
    store = task.train_stream.store
    sizes_all = np.asarray(exp.graphs.num_nodes, dtype=np.int64)
    pairs_all = np.diff(store.pair_ptr) if getattr(store, "pair_ptr", None) is not None else sizes_all ** 2
    d, f_in, layers = m.hidden, task.in_dim, m.layers
    enc = 0 if m.encoder == "atom" else f_in * d  # per node; OGB's AtomEncoder is a lookup on both sides
    ffn = 2 * d * (m.ffn_mult * d) if has_ffn(m, "graph") else 0  # the FFN's two maps (none in a gat layer)
    per_layer = 4 * d * d + ffn  # Q, K, V, output, the FFN
    x = {"encoder": 0.0, "linear maps": 0.0, "attention (dense groups)": 0.0, "attention (stored pairs)": 0.0}
    for ids in task.train_stream.batches(0):
        sizes, pairs = sizes_all[ids], pairs_all[ids]
        n = int(sizes.sum())
        x["encoder"] += n * enc
        x["linear maps"] += layers * n * per_layer
        on_pairs = pair_attended(torch.from_numpy(sizes), torch.from_numpy(pairs), PAIR_DENSITY, PAIR_MIN_NODES)
        on = on_pairs.numpy()
        x["attention (stored pairs)"] += layers * 2 * d * int(pairs[on].sum())  # q·k and weight·v per pair
        for g in plan_groups(np.where(on, 0, sizes).tolist()):
            x["attention (dense groups)"] += layers * 2 * d * len(g) * int(sizes[g].max()) ** 2
    n_epoch = int(sizes_all[split.train].sum())
    gin_first = (f_in * d if m.encoder != "atom" else d * d) + d * d
    gin = {"MLPs": n_epoch * (gin_first + (gs.GIN_LAYERS - 1) * 2 * d * d)}
    gmac = {f"xmask {k}": v / 1e9 for k, v in x.items()} | {f"GIN {k}": v / 1e9 for k, v in gin.items()}
    gmac["xmask total"] = sum(x.values()) / 1e9
    gmac["GIN total"] = sum(gin.values()) / 1e9
    return gmac


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=lambda s: s.split(","), default=["ogbg-molhiv", "NCI1", "PROTEINS", "DD"])
    p.add_argument("--data-root", default=str(gs.REPO.parent / "shared" / "datasets"))
    p.add_argument("--cache-dir", default=str(gs.REPO / "cache"))
    a = p.parse_args(argv)
    args = gs.parse_args(["--data-root", a.data_root, "--cache-dir", a.cache_dir])
    print("| dataset | xmask linear maps | xmask attention, dense groups / stored pairs | xmask encoder | xmask total "
          "| GIN total | ratio |\n|---|---|---|---|---|---|---|")
    for ds in a.datasets:
        g = epoch_macs(ds, args)
        print(f"| {ds} | {g['xmask linear maps']:.2f} | {g['xmask attention (dense groups)']:.2f} / "
              f"{g['xmask attention (stored pairs)']:.2f} | {g['xmask encoder']:.2f} | {g['xmask total']:.2f} "
              f"| {g['GIN total']:.2f} | {g['xmask total'] / g['GIN total']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
