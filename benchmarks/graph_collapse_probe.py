#!/usr/bin/env python
"""Per-epoch probe of graph-level training: where a collapse to a constant output starts.

Trains one seed of a graph dataset's shipped preset exactly as ``xmask train``
does (same split, seeding, AdamW, warm-up, clipping) and prints one JSON line
per epoch: loss, train/val accuracy, median gradient norm (before clipping),
mean / max |entry| of the raw pooled readout, how many of the head MLP's
hidden ReLUs are active for some training graph and the share of
(graph, unit) pairs active, the spread of the outputs across graphs, and a
few per-layer gradient norms.

``--input degree`` replaces the node features by the one-hot degree (the input
the TU sets once got alone); ``--input features+degree`` appends it (
the same as ``--set model.node_struct=degree``, which it sets).
Anything else goes through ``--set`` (e.g. ``model.readout_norm=none`` for the
raw sum readout).

Usage::

    python benchmarks/graph_collapse_probe.py NCI1 --seed 0 --epochs 25 --input degree \\
        --set model.readout_norm=none --data-root ../shared/datasets > probe.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--input", choices=("features", "degree", "features+degree"), default="features")
    p.add_argument("--set", dest="sets", action="append", default=[])
    p.add_argument("--data-root", default="../shared/datasets")
    p.add_argument("--cache-dir", default="/tmp/xmask-probe-cache")
    args = p.parse_args()
    torch.set_num_threads(1)

    import xmask_cli.engine.tasks.graph as graph_mod
    from xmask_cli import config_resolve as R
    from xmask_cli.data.load import one_hot_degrees
    from xmask_cli.engine.runs.experiment import Experiment, _train_config
    from xmask_cli.engine.training.loop import seed_everything
    from xmask_cli.engine.training.optimisation import warmup
    from xmask_cli.model.network import XMaskNet

    if args.input == "features+degree":
        args.sets.append("model.node_struct=degree")
    elif args.input == "degree":  # patch the one function the graph-level task reads its features from
        def features(graphs, node_struct="none", cache_path=None):
            return one_hot_degrees(graphs.edge_index, graphs.num_nodes), 0

        graph_mod.input_features = features

    cfg = R.resolve(args.dataset.lower(), args.sets)
    exp = Experiment.load(cfg, cache_dir=Path(args.cache_dir), data_root=args.data_root, offline=True)
    seed_everything(args.seed)
    task = exp.task(args.seed, "cpu")
    seed_everything(args.seed)  # as train_task: the model is built right after seeding
    model = XMaskNet(exp.model_config(task))
    tc = _train_config(cfg, args.seed, "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup(tc.warmup_epochs))

    pre: list[torch.Tensor] = []
    pooled: list[torch.Tensor] = []
    model.head[0].register_forward_hook(lambda m, i, o: pre.append(o.detach()))
    readout = model.readout_dense
    model.readout_dense = lambda h, mask: (lambda out: pooled.append(out.detach()) or out)(readout(h, mask))
    for epoch in range(args.epochs):
        model.train()
        pre.clear(), pooled.clear()
        total = count = 0.0
        norms, grads = [], {}
        for batch in task.train_batches(epoch):
            opt.zero_grad(set_to_none=True)
            loss, n = task.loss(model, batch)
            loss.backward()
            grads = {k: float(v.grad.norm()) for k, v in model.named_parameters() if v.grad is not None}
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)))
            opt.step()
            total, count = total + float(loss.detach()) * n, count + n
        sched.step()
        h, pl = torch.cat(pre), torch.cat(pooled)
        model.eval()
        with torch.no_grad():
            out = torch.cat([model(b.inputs()) for b in task.eval_streams["train"].epoch(0)])
        print(json.dumps({
            "ep": epoch, "loss": round(total / count, 4), "train": round(task.score(model, "train"), 3),
            "val": round(task.score(model, "val"), 3), "gnorm_med": round(float(np.median(norms)), 3),
            "pooled_abs_mean": round(float(pl.abs().mean()), 2), "pooled_abs_max": round(float(pl.abs().max()), 1),
            "head_units_alive": int((h > 0).any(0).sum()), "head_frac_active": round(float((h > 0).float().mean()), 3),
            "logit_std_across_graphs": round(float(out.std(0).mean()), 4),
            "grad_encoder": round(grads.get("encoder.weight", 0.0), 5),
            "grad_head0": round(grads.get("head.0.weight", 0.0), 5),
            "grad_blk0_q": round(grads.get("blocks.0.attn.q.weight", 0.0), 5),
        }), flush=True)


if __name__ == "__main__":
    main()
