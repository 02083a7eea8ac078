#!/usr/bin/env python
"""Whole epochs of the tuned classic GNNs (``peers_tuned.py``) on one thread: what Luo et al.'s 1,000-epoch
recipe costs here, and the GCN's one-graph path checked against PyG's GCNConv as it is.

An epoch is what ``peers.py`` runs per epoch: one full-batch training step (forward, backward, Adam) and the
validation pass the selection reads (metric and loss). ``GCN-tuned`` is run twice from one initialisation,
``plain`` (PyG's GCNConv: the adjacency normalised at every call, autograd's transpose in every backward)
and ``one-graph`` (``tuned_setup``'s), alternated epoch by epoch (which goes first swaps each epoch) so the
machine's load falls on both; each side keeps its own random state, so both draw the same dropout masks
and the largest difference of their validation logits is recorded per epoch. ``GAT-tuned`` has one path.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/peers_tuned_speed.py --epochs 6

Writes ``benchmarks/out/peers-tuned-speed.json``: per side the epoch seconds, median and range, the load
average around each epoch, and the projected wall time of the recipe (1,000 epochs x 5 seeds).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402
from peers_tuned import tuned_hp, tuned_setup  # noqa: E402

#: Sides timed per model: name -> ``tuned_setup``'s ``one_graph``.
SIDES = {"GCN-tuned": {"plain": False, "one-graph": True}, "GAT-tuned": {"one-graph": True}}


def side(kind: str, data: Any, split: Any, one_graph: bool, seed: int) -> Any:
    """One side: its ``epoch()`` (train step, then the validation logits and loss) and random state."""
    import torch
    import torch.nn.functional as F

    x, y = data.x.float(), data.y.view(-1)
    common.seed(seed)
    peer = tuned_setup(kind, "Computers", data, x.to_dense() if x.is_sparse else x, int(y.max()) + 1, one_graph)
    tr, va = torch.as_tensor(split.train), torch.as_tensor(split.val)

    def epoch() -> tuple[Any, float]:
        peer.model.train()
        peer.opt.zero_grad(set_to_none=True)
        F.cross_entropy(peer.forward()[tr], y[tr]).backward()
        peer.opt.step()
        peer.model.eval()
        with torch.no_grad():
            out = peer.forward()[va]
            return out, float(F.cross_entropy(out, y[va]))

    peer.epoch, peer.rng = epoch, torch.get_rng_state()
    return peer


def run(kind: str, graphs: Any, epochs: int, seed: int) -> dict[str, Any]:
    """``epochs`` whole epochs of each side of ``kind``, alternated; seconds, loads and logit differences."""
    import torch

    from xmask_cli.engine.scoring.splits import node_split

    data = graphs.dataset[0]
    split = node_split(graphs.spec.split, data, seed=seed)
    sides = {name: side(kind, data, split, flag, seed) for name, flag in SIDES[kind].items()}
    times: dict[str, list[float]] = {name: [] for name in sides}
    loads, diffs = [], []
    for e in range(epochs):
        order = list(sides) if e % 2 == 0 else list(reversed(sides))
        logits = {}
        for name in order:
            s = sides[name]
            torch.set_rng_state(s.rng)
            t = time.perf_counter()
            logits[name] = s.epoch()[0]
            times[name].append(time.perf_counter() - t)
            s.rng = torch.get_rng_state()
            loads.append(os.getloadavg()[0])
        if len(logits) == 2:
            a, b = logits.values()
            diffs.append(float((a - b).abs().max()))
        print(f"{kind} epoch {e}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in times)
              + f", load {loads[-1]:.1f}", file=sys.stderr, flush=True)
    recipe = int(tuned_hp("Computers", kind)["epochs"]) * 5
    return {"sides": {n: {"epoch_seconds": ts, "median": float(np.median(ts)), "min": min(ts), "max": max(ts),
                          "recipe_hours": float(np.median(ts)) * recipe / 3600} for n, ts in times.items()},
            "val_logit_max_abs_diff": diffs, "load_1min": [min(loads), max(loads)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=6, help="whole epochs per side (default: %(default)s)")
    p.add_argument("--models", default="GCN-tuned,GAT-tuned", help="comma-separated (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", type=Path, default=common.DEFAULT_DATA_ROOT)
    p.add_argument("--out", type=Path, default=common.HERE / "out" / "peers-tuned-speed.json")
    args = p.parse_args(argv)
    import torch

    from xmask_cli.fs import atomic_write

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="xmask-tuned-") as cache:
        graphs = common.load("Computers", args.data_root, Path(cache))
        res = {k: run(k, graphs, args.epochs, args.seed) for k in args.models.split(",")}
    meta = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__}
    text = json.dumps({"meta": meta, "models": res}, indent=2) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, lambda f: f.write(text.encode()))
    for k, r in res.items():
        for n, s in r["sides"].items():
            print(f"{k} {n}: median {s['median']:.2f} s (range {s['min']:.2f}-{s['max']:.2f}), recipe "
                  f"{s['recipe_hours']:.1f} h for 5 seeds; load {r['load_1min'][0]:.1f}-{r['load_1min'][1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
