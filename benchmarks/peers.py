#!/usr/bin/env python
"""PyG peer baselines under xmask's evaluation protocol: one command over the peer families.

What is measured: test metrics of standard PyG models, trained under the same protocol as ``xmask train``,
so the figures sit beside xmask's in one table. Each family is a module of its own, and all share
``peers_common.py`` (xmask's loader, seeding, splits, metrics and selection rule):

* ``peers_gnn.py``: the protocol peers ``tune_study.py`` searches: GCN and GAT (node), GIN (graph), a GCN
  link encoder with a dot (``GCN+dot``) or Hadamard-MLP (``GCN+MLP``) decoder;
* ``peers_transformers.py``: PyG's GCN / GAT example recipes and the graph transformers SGFormer,
  Polynormer (node) and GPS (node and graph), at the budget of the dataset's xmask preset;
* ``peers_folds.py``: the fold protocol (``--folds K``): GIN and the structure-agnostic baseline.

The splits are xmask's own: ``node_split`` (the dataset's registry split), ``graph_split`` and
``edge_split`` (fractions 0.85 / 0.05 / 0.10, one negative per positive): seed ``s`` gets the split of
xmask's run with seed ``s``. Selection reads validation only; test is computed once on the selected state.
AdamW by default (``--optimizer adam-l2``: Adam with L2, the optimiser the GCN / GAT / GIN papers report);
node and link peers read the raw features as xmask does (``--normalize-features``: row-normalised, as
PyG's examples). Mean and population std (``ddof=0``, as ``xmask`` reports) over the seeds.

Usage (from the repository root)::

    python benchmarks/peers.py                        # everything, seeds 0-4
    python benchmarks/peers.py --only node --seeds 0-1
    python benchmarks/peers.py --only graph --folds 10 --seeds 0 --graph-datasets MUTAG,PROTEINS,IMDB-BINARY
    python benchmarks/peers.py --only link,graph --threads 1
    python benchmarks/peers.py --only node --optimizer adam-l2 --normalize-features \
        --out benchmarks/out/peers-published-recipe.json
    python benchmarks/peers.py --only node --node-models GCN-example,GAT-example,SGFormer,Polynormer --seeds 0-2
    python benchmarks/peers.py --only node --node-datasets Computers --node-models SGFormer --epochs 100
    python benchmarks/peers.py --only node --node-models GPS --probe-epochs 2     # s / epoch only
    python benchmarks/peers.py --only graph --graph-datasets PROTEINS --graph-models GIN,GPS --seeds 0-2
    python benchmarks/peers.py --only node --node-datasets Computers --node-models GCN-tuned,GAT-tuned \
        --epochs 1000 --patience 1000 --resume --checkpoint-every 10 --out benchmarks/out/peers-tuned-computers.json

``--resume`` (the fold protocol and the node peers of ``peers_transformers.run_node_peer``) keeps the runs
``--out`` holds at the same budget and split and goes on with a killed run from its checkpoint in
``--checkpoint-dir`` (``peers_common.fit_selected``), ending as the uninterrupted run would.

Prints a markdown table and writes JSON to ``benchmarks/out/peers.json`` (every run, plus mean / std per row).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402
from peers_folds import FOLD_MODELS, checkpoint_name, finished_fold, run_graph_fold  # noqa: E402
from peers_gnn import run_graph, run_link, run_node  # noqa: E402
from peers_transformers import NODE_PEERS, gps_graph_data, run_graph_gps, run_node_peer  # noqa: E402

TASKS = ("node", "graph", "link")
NODE_DATASETS = ("Cora", "CiteSeer")
GRAPH_DATASETS = ("MUTAG", "PROTEINS")
LINK_DATASETS = ("Cora",)
#: Every node peer: the protocol GCN / GAT (``peers_gnn.py``), then the recipes and graph transformers.
NODE_MODELS = ("GCN", "GAT", *NODE_PEERS)
#: Graph peers: GIN (``peers_gnn.py``) and GPS (``peers_transformers.py``).
GRAPH_MODELS = ("GIN", "GPS")
#: Graph sets with a shipped preset of their own; others read ``graph-level``'s input.
_GRAPH_PRESETS = ("mutag", "proteins", "nci1", "dd", "imdb-binary")


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean / population std of val and test per (task, dataset, model), in first-seen order."""
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        rows.setdefault((r["task"], r["dataset"], r["model"]), []).append(r)
    out = []
    for (task, ds, model), rs in rows.items():
        row: dict[str, Any] = {"task": task, "dataset": ds, "model": model, "metric": rs[0]["metric"],
                               "seeds": [r["seed"] for r in rs]}
        scored = [r for r in rs if r["metrics"] is not None]  # a probe (--probe-epochs) scores nothing
        for part in ("val", "test"):
            vals = np.array([r["metrics"][part] for r in scored], dtype=np.float64)
            row[part] = ({"mean": float(vals.mean()), "std": float(vals.std()), "values": vals.tolist()}
                         if scored else None)
        row["epochs_run_mean"] = float(np.mean([r["epochs_run"] for r in rs]))
        row["seconds_per_run_mean"] = float(np.mean([r["seconds"] for r in rs]))
        for key in ("seconds_per_epoch", "precompute_seconds", "params"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
        row["probe"] = not scored
        out.append(row)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table ``peers.py`` prints: one row per (task, dataset, model)."""
    head = ["task", "dataset", "model", "metric", "seeds", "val (mean ± std)", "test (mean ± std)", "epochs", "s / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 5 + ["---:"] * 4) + "|"]
    for r in rows:
        scale = 100.0 if r["metric"] == "accuracy" else 1.0
        fmt = "{:.2f} ± {:.2f}" if scale == 100.0 else "{:.4f} ± {:.4f}"

        def cell(v: dict[str, Any] | None, fmt: str = fmt, scale: float = scale) -> str:
            return "probe only" if v is None else fmt.format(v["mean"] * scale, v["std"] * scale)

        cells = [r["task"], r["dataset"], r["model"], r["metric"] + (" (%)" if scale == 100.0 else ""),
                 str(len(r["seeds"])), cell(r["val"]), cell(r["test"]),
                 f"{r['epochs_run_mean']:.0f}", f"{r['seconds_per_run_mean']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(args: argparse.Namespace) -> dict[str, Any]:
    """The run's versions, threads, load and settings, recorded beside its results."""
    import torch
    import torch_geometric

    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "seeds": args.seeds, "only": args.only, "optimizer": args.optimizer,
            "normalize_features": args.normalize_features, "data_root": str(args.data_root),
            "epochs": {"node": [args.node_epochs, args.node_patience], "graph": [args.graph_epochs, args.graph_patience],
                       "link": [args.link_epochs, args.link_patience]},
            "node_models": args.node_models, "graph_models": args.graph_models,
            "node_datasets": args.node_datasets, "budget_override": [args.epochs, args.patience],
            "probe": {"epochs": args.probe_epochs, "batches": args.probe_batches},
            "command": " ".join([Path(sys.executable).name, *sys.argv])}



def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Graph-transformer peers: SGFormer, Polynormer (--node-models), GPS "
                                       "(--node-models, --graph-models).")
    p.add_argument("--data-root", type=Path, default=common.DEFAULT_DATA_ROOT,
                   help="raw datasets (default: %(default)s)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the loaders write processed/ (default: a temporary dir)")
    p.add_argument("--seeds", type=common.parse_seeds, default=list(range(5)), help="e.g. 0-4 or 0,3 (default: 0-4)")
    p.add_argument("--only", default=",".join(TASKS), help="comma-separated subset of node,graph,link (default: all)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--optimizer", choices=common.OPTIMIZERS, default="adamw",
                   help="adamw: the protocol's (decoupled weight decay); adam-l2: Adam with L2, as the peers' "
                        "papers train (default: %(default)s)")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise Cora / CiteSeer features for node and link peers, as PyG's examples do "
                        "(default: raw features, the input xmask gets)")
    p.add_argument("--node-epochs", type=int, default=300)
    p.add_argument("--node-patience", type=int, default=50)
    p.add_argument("--graph-datasets", default=",".join(GRAPH_DATASETS),
                   help="comma-separated graph datasets for GIN (default: %(default)s; NCI1 also works)")
    p.add_argument("--graph-epochs", type=int, default=150)
    p.add_argument("--graph-patience", type=int, default=30)
    p.add_argument("--folds", type=int, default=0,
                   help="graph: run the fold protocol (Errica et al.) with this many outer folds on "
                        "--graph-datasets for GIN (5 layers) and the structure-agnostic baseline, on xmask's folds")
    p.add_argument("--resume", action="store_true",
                   help="fold protocol and node peers other than GCN / GAT: keep the runs --out already holds at this "
                        "budget (checked against the split and budget of this run) and train only the others; a run "
                        "killed mid-way goes on from its checkpoint in --checkpoint-dir (without --resume, a "
                        "run starts over)")
    p.add_argument("--checkpoint-dir", type=Path, default=None,
                   help="checkpoints of the runs being trained (default: runs/peers-folds for the fold protocol, "
                        "runs/peers-node for node peers)")
    p.add_argument("--checkpoint-every", type=int, default=1,
                   help="write a run's checkpoint every this many epochs (default: %(default)s)")
    p.add_argument("--clip-norm", type=float, default=1.0, help="fold protocol: gradient clipping (xmask's default)")
    p.add_argument("--link-epochs", type=int, default=300)
    p.add_argument("--link-patience", type=int, default=50)
    p.add_argument("--out", type=Path, default=common.HERE / "out" / "peers.json",
                   help="JSON results (default: %(default)s)")
    p.add_argument("--node-datasets", default=",".join(NODE_DATASETS),
                   help="comma-separated node datasets (default: %(default)s; Computers, Physics also work)")
    p.add_argument("--node-models", default="GCN,GAT",
                   help=f"comma-separated node peers among {', '.join(NODE_MODELS)} (default: %(default)s). "
                        "GCN-example / GAT-example: PyG's examples/gcn.py and gat.py recipes; graph transformers: "
                        "SGFormer, Polynormer (PyG's classes, the authors' settings), GPS (GPSConv, PyG's "
                        "graph_gps.py configuration) on the whole graph")
    p.add_argument("--graph-models", default="GIN",
                   help=f"comma-separated graph peers among {', '.join(GRAPH_MODELS)} (default: %(default)s); "
                        "GPS: GPSConv with a GIN local layer and 4-head attention, PyG's graph_gps.py configuration")
    p.add_argument("--epochs", type=int, default=None,
                   help="epoch budget of the published-recipe and graph-transformer peers (default: the train.epochs "
                        "of the dataset's xmask preset)")
    p.add_argument("--patience", type=int, default=None,
                   help="their patience (default: the train.patience of the dataset's xmask preset)")
    p.add_argument("--probe-epochs", type=int, default=0,
                   help="node transformer / recipe peers and graph GPS: train this many whole epochs and report "
                        "their time only (no selection, no test): for rows too slow to finish")
    p.add_argument("--probe-batches", type=int, default=0,
                   help="graph GPS: time this many training batches and extrapolate an epoch (no test)")
    return p


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


#: ``record(task, dataset, model, metric, seed, fn, *args, **kwargs)``: run one seed and save.
Record = Callable[..., None]


def _checkpoint(args: argparse.Namespace, task: str, name: str) -> Path:
    """A run's checkpoint file in ``--checkpoint-dir`` (its name holds the budget, so another budget starts
    over); without ``--resume`` one left by a killed run is removed: the run starts over."""
    folder = args.checkpoint_dir or common.REPO / "runs" / f"peers-{task}"
    path = folder / name
    if not args.resume:
        path.unlink(missing_ok=True)
    return path


def _node_rows(args: argparse.Namespace, load: Callable[[str], Any], record: Record,
               keep: Callable[[dict[str, Any]], None]) -> None:
    """Every node peer on every node dataset: GCN / GAT at their own budget flags, the rest at the preset's;
    with ``--resume`` the latter's runs ``args.finished`` holds at this budget and split go to ``keep``."""
    from xmask_cli.engine.scoring.splits import node_split

    for ds in _names(args.node_datasets):
        graphs = load(ds)
        budget = common.preset_budget(ds)
        epochs, patience = args.epochs or budget["epochs"], args.patience or budget["patience"]
        for model in _names(args.node_models):
            for s in args.seeds:
                if model in ("GCN", "GAT"):
                    record("node", ds, model, "accuracy", s,
                           run_node, graphs, model, s, args.node_epochs, args.node_patience)
                    continue
                if args.probe_epochs:
                    record("node", ds, model, graphs.spec.metric, s,
                           run_node_peer, graphs, model, s, epochs, patience, probe_epochs=args.probe_epochs)
                    continue
                split = common.split_info(node_split(graphs.spec.split, graphs.dataset[0], seed=s), s)
                match = {"dataset": ds, "model": model, "seed": s, "epochs": epochs, "patience": patience}
                done = common.finished_run(args.finished, match, split, epochs)
                if done is not None:
                    keep(done)
                    continue
                ckpt = _checkpoint(args, "node", f"{ds}-{model}-seed{s}-e{epochs}-p{patience}.pt")
                record("node", ds, model, graphs.spec.metric, s, run_node_peer, graphs, model, s, epochs, patience,
                       checkpoint=ckpt, checkpoint_every=args.checkpoint_every)


def _fold_rows(args: argparse.Namespace, load: Callable[[str], Any], record: Record,
               keep: Callable[[dict[str, Any]], None]) -> None:
    """The fold protocol on each graph set, on the input the set's shipped preset reads; with ``--resume``
    the folds ``args.finished`` holds at this budget go to ``keep``, not trained again."""
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.tasks.graph import graph_labels

    for ds in args.graph_datasets.split(","):
        graphs = load(ds)
        preset = ds.lower() if ds.lower() in _GRAPH_PRESETS else "graph-level"
        data_list = common.graph_data_list(graphs, resolve(preset).model.node_struct)
        labels = graph_labels(graphs)
        for model in FOLD_MODELS:
            for s in args.seeds:
                for i in range(args.folds):
                    budget = (args.folds, i, args.graph_epochs, args.graph_patience)
                    done = finished_fold(args.finished, labels, ds, model, s, *budget)
                    if done is not None:
                        keep(done)
                        continue
                    ckpt = _checkpoint(args, "folds", checkpoint_name(ds, model, s, *budget))
                    record("graph-folds", ds, model, "accuracy", s, run_graph_fold, data_list, labels, model, s,
                           args.folds, i, args.graph_epochs, args.graph_patience, args.clip_norm, checkpoint=ckpt,
                           checkpoint_every=args.checkpoint_every)


def _graph_rows(args: argparse.Namespace, load: Callable[[str], Any], record: Record) -> None:
    """GIN (its own budget flags, xmask's input without node_struct) and GPS (the preset's budget and input)."""
    from xmask_cli.config_resolve import resolve

    graph_models = _names(args.graph_models)
    for ds in args.graph_datasets.split(","):
        graphs = load(ds)
        if "GIN" in graph_models:
            data_list = common.graph_data_list(graphs)
            for s in args.seeds:
                record("graph", ds, "GIN", graphs.spec.metric, s,
                       run_graph, graphs, data_list, s, args.graph_epochs, args.graph_patience)
        if "GPS" in graph_models:
            budget = common.preset_budget(ds)
            epochs, patience = args.epochs or budget["epochs"], args.patience or budget["patience"]
            gps_list, pe_seconds = gps_graph_data(
                common.graph_data_list(graphs, resolve(common.preset_name(ds)).model.node_struct))
            for s in args.seeds:
                record("graph", ds, "GPS", graphs.spec.metric, s,
                       run_graph_gps, graphs, gps_list, s, epochs, patience, budget["batch_size"],
                       probe_batches=args.probe_batches, precompute_seconds=pe_seconds,
                       probe_epochs=args.probe_epochs)


def _link_rows(args: argparse.Namespace, load: Callable[[str], Any], record: Record) -> None:
    """The GCN link peer with each decoder on each link dataset (``edge_split`` at ``peers_gnn.LINK_FRACTIONS``)."""
    for ds in LINK_DATASETS:
        graphs = load(ds)
        for dec, name in (("dot", "GCN+dot"), ("mlp", "GCN+MLP")):
            for s in args.seeds:
                record("link", ds, name, "mrr", s, run_link, graphs, dec, s, args.link_epochs, args.link_patience)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    only = _names(args.only)
    if [t for t in only if t not in TASKS]:
        p.error(f"--only: unknown task(s) {[t for t in only if t not in TASKS]}; expected {', '.join(TASKS)}")
    for flag, got, known in (("--node-models", _names(args.node_models), NODE_MODELS),
                             ("--graph-models", _names(args.graph_models), GRAPH_MODELS)):
        if [m for m in got if m not in known]:
            p.error(f"{flag}: unknown peer(s) {[m for m in got if m not in known]}; expected {', '.join(known)}")

    if args.checkpoint_every < 1:
        p.error(f"--checkpoint-every: expected a positive number of epochs, got {args.checkpoint_every}")
    import torch

    from xmask_cli.fs import atomic_write

    if args.threads:
        torch.set_num_threads(args.threads)
    common.OPTIONS.update(optimizer=args.optimizer, normalize=args.normalize_features)
    meta = environment(args)
    tmp = tempfile.TemporaryDirectory(prefix="xmask-peers-") if args.cache_dir is None else None
    cache_dir = args.cache_dir or Path(tmp.name)  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    try:
        args.finished = common.read_finished(args.out) if args.resume else []
    except ValueError as e:  # an --out that is not a peers.py result: never overwritten
        p.error(f"--out: {e}")

    def save() -> list[dict[str, Any]]:
        rows = summarize(runs)
        meta["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        meta["peak_rss_mb"] = common.peak_rss_mb()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=2) + "\n"
        atomic_write(args.out, lambda f: f.write(text.encode()))
        return rows

    def record(task: str, ds: str, model: str, metric: str, seed: int, fn: Callable[..., dict[str, Any]],
               *fn_args: Any, **fn_kwargs: Any) -> None:
        t = time.perf_counter()
        res = fn(*fn_args, **fn_kwargs)
        # a resumed run's seconds: this process's plus those its checkpoint had spent
        res = {"task": task, "dataset": ds, "model": model, "metric": metric, "seed": seed,
               "seconds": time.perf_counter() - t + res.get("seconds_before_resume", 0.0), **res}
        runs.append(res)
        scores = ("probe" if res["metrics"] is None else
                  f"val {res['metrics']['val']:.4f} test {res['metrics']['test']:.4f}")
        print(f"{task} {ds} {model} seed {seed}: {scores} (best epoch {res['best_epoch']}, {res['epochs_run']} "
              f"epochs, {res['seconds']:.1f}s)", file=sys.stderr, flush=True)
        save()

    def keep(res: dict[str, Any]) -> None:
        runs.append(res)
        fold = f" fold {res['fold']}" if "fold" in res else ""
        print(f"{res['task']} {res['dataset']} {res['model']} seed {res['seed']}{fold}: kept from {args.out}",
              file=sys.stderr, flush=True)

    def load(ds: str) -> Any:
        return common.load(ds, args.data_root, cache_dir)

    try:
        if "node" in only:
            _node_rows(args, load, record, keep)
        if "graph" in only:
            if args.folds:
                _fold_rows(args, load, record, keep)
            else:
                _graph_rows(args, load, record)
        if "link" in only:
            _link_rows(args, load, record)
    finally:
        rows = save()
        if tmp is not None:
            tmp.cleanup()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
