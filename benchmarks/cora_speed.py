#!/usr/bin/env python
"""Seconds per Cora epoch: ``xmask train --preset cora`` against PyG's GAT example, alternated, one thread.

Each round runs both sides in turn (xmask first on even rounds, GAT first on odd ones), so that load
from other processes falls on both alike:

- **xmask**: ``xmask train --preset <preset> --seeds 0`` in a child process with every thread variable at
  1 and ``train.epochs`` / ``train.patience`` set to ``--epochs``; its seconds per epoch are the median of
  the run's own ``epoch_s`` (``metrics.jsonl``: the training pass, the validation forward and the
  per-epoch checkpoint), first epoch left out (the CSR plans are built there).
- **GAT**: PyG's ``examples/gat.py`` network (``GATConv`` 8 heads x 8, ELU, dropout 0.6 on every layer's
  input and on the attention weights, a 1-head output layer; Adam, lr 0.005, L2 5e-4) on the same
  row-normalised features and public split, in this process with ``torch.set_num_threads(1)``. One
  epoch = one training step on the 140 training nodes and one evaluation forward over the whole graph,
  as the example's ``train()`` and ``test()``; median over epochs after the first.

The ratio is the median of the per-round ratios (xmask / GAT; below 1: xmask's epoch is shorter).
Prints a markdown line per round and the summary; writes ``benchmarks/out/cora_speed.json``.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/cora_speed.py --data-root /work/shared/datasets \\
        --cache-dir /tmp/xcs --rounds 3 --epochs 60
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def xmask_epoch(preset: str, epochs: int, data_root: str, cache_dir: str, runs: Path, sets: list[str]) -> float:
    """Median ``epoch_s`` of one ``xmask train`` run (first epoch left out)."""
    env = {**os.environ, **THREADS, "XMASK_CACHE": cache_dir}
    cmd = [sys.executable, "-m", "xmask_cli", "train", "--preset", preset, "--seeds", "0", "--data-root", data_root,
           "--runs-dir", str(runs), "--overwrite", "--set", f"train.epochs={epochs}",
           "--set", f"train.patience={epochs}", "--set", "run.name=speed", "--format", "json"]
    cmd += [a for kv in sets for a in ("--set", kv)]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = (runs / "speed" / "0" / "metrics.jsonl").read_text().splitlines()
    times = [json.loads(ln)["epoch_s"] for ln in lines if '"epoch_s"' in ln][1:]
    return statistics.median(times)


def gat_epoch(data, epochs: int) -> float:
    """Median seconds of a train step + evaluation forward of PyG's GAT example network."""
    from torch_geometric.nn import GATConv

    class GAT(torch.nn.Module):
        def __init__(self, in_dim: int, out_dim: int):
            super().__init__()
            self.conv1 = GATConv(in_dim, 8, heads=8, dropout=0.6)
            self.conv2 = GATConv(64, out_dim, heads=1, concat=False, dropout=0.6)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            x = torch.nn.functional.dropout(x, p=0.6, training=self.training)
            x = torch.nn.functional.elu(self.conv1(x, edge_index))
            x = torch.nn.functional.dropout(x, p=0.6, training=self.training)
            return self.conv2(x, edge_index)

    torch.manual_seed(0)
    model = GAT(data.num_features, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        t = time.perf_counter()
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(data.x, data.edge_index).argmax(-1)
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="cora")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="an override of xmask's preset (repeatable), e.g. node.sparse_features=true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "cora_speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    from torch_geometric.transforms import NormalizeFeatures

    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    graphs = load_graphs(get_dataset("cora"), data_root=Path(args.data_root), cache_dir=Path(args.cache_dir), offline=True)
    data = NormalizeFeatures()(graphs.dataset[0])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            sides = {}
            order = ("xmask", "gat") if r % 2 == 0 else ("gat", "xmask")
            for side in order:
                if side == "xmask":
                    sides[side] = xmask_epoch(args.preset, args.epochs, args.data_root, args.cache_dir, Path(tmp),
                                              args.sets)
                else:
                    sides[side] = gat_epoch(data, args.epochs)
            load = os.getloadavg()[0]
            rows.append({"round": r, **sides, "ratio": sides["xmask"] / sides["gat"], "load1": load})
            print(f"| {r} | {sides['xmask']:.4f} | {sides['gat']:.4f} | {sides['xmask'] / sides['gat']:.2f} | "
                  f"{load:.2f} |", flush=True)
    summary = {"preset": args.preset, "set": args.sets, "epochs": args.epochs, "rounds": rows,
               "xmask_s": statistics.median(r["xmask"] for r in rows),
               "gat_s": statistics.median(r["gat"] for r in rows),
               "ratio": statistics.median(r["ratio"] for r in rows)}
    print(f"xmask {summary['xmask_s']:.4f} s/epoch, PyG GAT example {summary['gat_s']:.4f} s/epoch, "
          f"ratio {summary['ratio']:.2f} (median of rounds)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(summary, indent=2))
    os.replace(tmp_out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
