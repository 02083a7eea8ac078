#!/usr/bin/env python
"""ogbg-molhiv peers at OGB's own example recipe: ``GIN-ogb`` and ``GIN-VN-ogb`` (``peers_ogb_gin.py``).

What is measured: the test ROC-AUC of OGB's GIN and GIN-virtual examples, trained as OGB's
``examples/graphproppred/mol/main_pyg.py`` trains them, on the split xmask's molhiv runs use:

* data: ``PygGraphPropPredDataset`` as ``xmask`` loads it (offline; the raw files staged from the data root
  into ``--cache-dir``), OGB's scaffold split (:func:`xmask_cli.engine.scoring.splits.graph_split`, which
  reads ``get_idx_split()``), the 9 atom and 3 bond features;
* training: Adam lr 1e-3, batch 32 (shuffled by a generator seeded with the run's seed; a batch of one
  graph is skipped, as OGB's loop does), BCE-with-logits on the labelled entries, 100 epochs, no early stop;
* selection: OGB's rule, the first epoch with the highest validation ROC-AUC (OGB's
  ``Evaluator("ogbg-molhiv")``); the test ROC-AUC is read once, on that epoch's state (OGB scores test every
  epoch and reads the selected one: the same number). Evaluation batches hold 256 graphs (eval mode: a
  graph's logit does not depend on its batch).

Resumable: after each epoch the model, optimiser, RNG states (torch, numpy, the loader's generator), the
best state and the curves are written atomically to ``--checkpoint-dir``; ``--resume`` goes on from there
to the numbers an uninterrupted run gives, and keeps seeds whose result JSON already exists at this
configuration. Each seed's result is written atomically to ``--out-dir/<model>-seed<s>.json`` as it ends.

Usage (repository root)::

    OMP_NUM_THREADS=1 python benchmarks/peers_ogb.py --models GIN-VN-ogb --seeds 0 --threads 1 --resume
    OMP_NUM_THREADS=1 python benchmarks/peers_ogb.py --models GIN-ogb --time-epochs 1 --threads 1 \\
        --timing-out benchmarks/out/ogb-peers/timing/GIN-ogb-r0.json
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_common as common  # noqa: E402
from peers_ogb_gin import RECIPE, MolGIN, batch_logits  # noqa: E402

#: The two peers: OGB's ``--gnn gin`` and ``--gnn gin-virtual``.
MODELS = {"GIN-ogb": False, "GIN-VN-ogb": True}
EVAL_BATCH = 256
DATASET = "ogbg-molhiv"


def load_molhiv(data_root: Path, cache_dir: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """``(PygGraphPropPredDataset, {"train", "val", "test": graph indices})``: xmask's loader and split."""
    from xmask_cli.engine.scoring.splits import graph_split

    graphs = common.load(DATASET, data_root, cache_dir)
    split = graph_split(graphs.spec.split, graphs.dataset)
    return graphs.dataset, {p: np.asarray(getattr(split, p), dtype=np.int64) for p in ("train", "val", "test")}


def graph_labels(dataset: Any) -> np.ndarray:
    """Every graph's 0/1 label, in dataset order (molhiv has one task, every entry labelled)."""
    return dataset.y.view(-1).numpy()


def limit_parts(parts: dict[str, np.ndarray], labels: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """At most ``n`` graphs of each part for a quick run: its first ``max(1, n // 10)`` positives and the
    first negatives up to ``n``, in index order (so a small validation part still has both classes)."""
    out = {}
    for part, idx in parts.items():
        pos, neg = idx[labels[idx] == 1], idx[labels[idx] == 0]
        k = min(len(pos), max(1, n // 10))
        out[part] = np.sort(np.concatenate([pos[:k], neg[:n - k]]))
    return out


def loaders(dataset: Any, parts: dict[str, np.ndarray], batch_size: int,
            seed: int) -> tuple[Any, dict[str, Any], torch.Generator]:
    """``(shuffled training loader, evaluation loaders by part, the training loader's generator)``."""
    from torch_geometric.loader import DataLoader

    gen = torch.Generator().manual_seed(seed)
    train = DataLoader(dataset[torch.from_numpy(parts["train"])], batch_size=batch_size, shuffle=True, generator=gen)
    evals = {p: DataLoader(dataset[torch.from_numpy(idx)], batch_size=EVAL_BATCH, shuffle=False)
             for p, idx in parts.items()}
    return train, evals, gen


def train_epoch(model: MolGIN, opt: torch.optim.Optimizer, loader: Any) -> float:
    """One pass over ``loader`` (OGB's loop: a one-graph batch skipped, BCE on labelled entries); mean loss."""
    model.train()
    losses = []
    for b in loader:
        if b.x.size(0) == 1 or int(b.num_graphs) == 1:  # BatchNorm needs two rows
            continue
        y = b.y.to(torch.float32)
        labelled = y == y  # OGB marks a missing label with NaN
        loss = torch.nn.functional.binary_cross_entropy_with_logits(batch_logits(model, b)[labelled], y[labelled])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses)) if losses else float("nan")


@torch.no_grad()
def predict(model: MolGIN, loader: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(logits [N, 1], labels [N, 1])`` of every graph of ``loader``, in its order, in eval mode."""
    model.eval()
    out, ys = [], []
    for b in loader:
        out.append(batch_logits(model, b))
        ys.append(b.y.view(-1, 1))
    return torch.cat(out).numpy(), torch.cat(ys).numpy()


def rocauc(logits: np.ndarray, labels: np.ndarray) -> float:
    """ROC-AUC by OGB's ``Evaluator("ogbg-molhiv")`` (the leaderboard's number)."""
    from ogb.graphproppred import Evaluator

    return float(Evaluator(DATASET).eval({"y_true": labels.reshape(-1, 1), "y_pred": logits.reshape(-1, 1)})["rocauc"])


def score(model: MolGIN, loader: Any) -> float:
    """The ROC-AUC of ``model`` on one evaluation loader."""
    return rocauc(*predict(model, loader))


# ------------------------------------------------------------------ checkpoints
def save_checkpoint(path: Path, model: MolGIN, opt: torch.optim.Optimizer, gen: torch.Generator,
                    run: dict[str, Any]) -> None:
    """Everything :func:`train_seed` needs to go on after ``run["epoch"]`` as if never stopped, written atomically."""
    from xmask_cli.engine.training.resume import rng_state
    from xmask_cli.fs import atomic_write

    state = {**run, "model": model.state_dict(), "opt": opt.state_dict(), "rng": rng_state(),
             "loader_rng": gen.get_state()}
    buf = io.BytesIO()
    torch.save(state, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def load_checkpoint(path: Path, model: MolGIN, opt: torch.optim.Optimizer, gen: torch.Generator,
                    config: dict[str, Any]) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote; returns the run's record (epoch, curves, best state).

    Raises:
        UsageError: the checkpoint was written at another configuration."""
    from xmask_cli.engine.training.resume import set_rng_state
    from xmask_cli.errors import UsageError

    ck = torch.load(path, weights_only=True)
    if ck["config"] != config:
        raise UsageError(f"{path} was written at {ck['config']}, not {config}; remove it or leave out --resume")
    model.load_state_dict(ck.pop("model"))
    opt.load_state_dict(ck.pop("opt"))
    set_rng_state(ck.pop("rng"))
    gen.set_state(ck.pop("loader_rng"))
    return dict(ck)


# ------------------------------------------------------------------ one seed
def run_config(model_name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The settings a result and its checkpoint are tied to (a resume at other settings is refused)."""
    return {"model": model_name, "seed": seed, "hidden": args.hidden, "layers": args.layers,
            "dropout": args.dropout, "batch_size": args.batch_size, "lr": args.lr, "epochs": args.epochs,
            "limit": args.limit}


def build(model_name: str, config: dict[str, Any], dataset: Any,
          parts: dict[str, np.ndarray]) -> tuple[MolGIN, torch.optim.Optimizer, Any, dict[str, Any], torch.Generator]:
    """Seed as ``xmask train`` does, then the loaders, the model and Adam of one run."""
    common.seed(config["seed"])
    train, evals, gen = loaders(dataset, parts, config["batch_size"], config["seed"])
    model = MolGIN(num_tasks=1, hidden=config["hidden"], layers=config["layers"], dropout=config["dropout"],
                   virtual_node=MODELS[model_name])
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    return model, opt, train, evals, gen


def train_seed(dataset: Any, parts: dict[str, np.ndarray], config: dict[str, Any], checkpoint: Path,
               resume: bool, after_epoch: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One seed at ``config``: every epoch trained and validated, the first best one kept, test read on it.

    ``checkpoint`` is written after every epoch and removed once the result is made; with ``resume`` an
    existing one is continued (otherwise it is started over). ``after_epoch(epoch)`` runs after each
    epoch's checkpoint (a test stops a run there)."""
    model, opt, train, evals, gen = build(config["model"], config, dataset, parts)
    run: dict[str, Any] = {"config": config, "epoch": -1, "val_curve": [], "loss_curve": [], "train_seconds": [],
                           "val_seconds": [], "best_epoch": -1, "best_val": None, "best_state": None}
    if resume and checkpoint.is_file():
        run = load_checkpoint(checkpoint, model, opt, gen, config)
    for epoch in range(run["epoch"] + 1, config["epochs"]):
        t = time.perf_counter()
        run["loss_curve"].append(train_epoch(model, opt, train))
        run["train_seconds"].append(time.perf_counter() - t)
        t = time.perf_counter()
        val = score(model, evals["val"])
        run["val_seconds"].append(time.perf_counter() - t)
        run["val_curve"].append(val)
        if run["best_val"] is None or val > run["best_val"]:  # OGB's np.argmax: the first best epoch
            run["best_epoch"], run["best_val"] = epoch, val
            run["best_state"] = copy.deepcopy(model.state_dict())
        run["epoch"] = epoch
        save_checkpoint(checkpoint, model, opt, gen, run)
        print(f"{config['model']} seed {config['seed']} epoch {epoch}: loss {run['loss_curve'][-1]:.4f} val {val:.4f} "
              f"({run['train_seconds'][-1]:.0f} + {run['val_seconds'][-1]:.0f} s)", file=sys.stderr, flush=True)
        if after_epoch is not None:
            after_epoch(epoch)
    model.load_state_dict(run["best_state"])
    result = {"dataset": DATASET, **config, "metric": "rocauc",
              "metrics": {"val": score(model, evals["val"]), "test": score(model, evals["test"])},
              "best_epoch": run["best_epoch"], "epochs_run": run["epoch"] + 1, "val_curve": run["val_curve"],
              "loss_curve": run["loss_curve"], "train_seconds": run["train_seconds"],
              "val_seconds": run["val_seconds"], "params": common.count_parameters(model),
              "split": {"name": "scaffold", **{p: int(len(i)) for p, i in parts.items()}}}
    return result


def finished(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The result at ``path`` when it was made at ``config`` (a seed to keep on ``--resume``), else None."""
    if not path.is_file():
        return None
    res = json.loads(path.read_text())
    return res if {k: res.get(k) for k in config} == config and isinstance(res.get("metrics"), dict) else None


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """``obj`` as indented JSON at ``path``, written atomically."""
    from xmask_cli.fs import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=2) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()))


# ------------------------------------------------------------------ whole-epoch timing
def time_epochs(dataset: Any, parts: dict[str, np.ndarray], config: dict[str, Any], epochs: int) -> dict[str, Any]:
    """``epochs`` whole training epochs and validation passes of one model (seed 0's run), timed (wall and
    process CPU seconds), with the 1-minute load average before and after each and the process's peak RSS;
    no selection, no test. The projection is wall time at the load the epochs saw."""
    model, opt, train, evals, _ = build(config["model"], config, dataset, parts)
    rows = []
    for epoch in range(epochs):
        load0 = os.getloadavg()[0]
        t, c = time.perf_counter(), time.process_time()
        train_epoch(model, opt, train)
        train_s, train_cpu = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        score(model, evals["val"])
        rows.append({"epoch": epoch, "train_s": train_s, "val_s": time.perf_counter() - t, "train_cpu_s": train_cpu,
                     "val_cpu_s": time.process_time() - c, "load_1min": [load0, os.getloadavg()[0]]})
    per_epoch = float(np.median([r["train_s"] + r["val_s"] for r in rows]))
    return {"dataset": DATASET, **config, "epochs_timed": rows, "params": common.count_parameters(model),
            "seconds_per_epoch_with_val": per_epoch, "projected_hours_100x5": per_epoch * 100 * 5 / 3600,
            "peak_rss_mb": common.peak_rss_mb(), "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


# ------------------------------------------------------------------ command line
def parser() -> argparse.ArgumentParser:
    """The command line (recipe defaults: OGB's ``main_pyg.py``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="GIN-VN-ogb,GIN-ogb", help=f"comma-separated among {', '.join(MODELS)}")
    p.add_argument("--seeds", type=common.parse_seeds, default=list(range(5)), help="e.g. 0-4 or 0,3 (default: 0-4)")
    p.add_argument("--data-root", type=Path, default=common.DEFAULT_DATA_ROOT,
                   help="raw datasets, holding ogbg_molhiv/raw (default: %(default)s)")
    p.add_argument("--cache-dir", type=Path, default=common.HERE / "out" / "cache",
                   help="where the raw files are staged and processed (default: %(default)s)")
    p.add_argument("--out-dir", type=Path, default=common.HERE / "out" / "ogb-peers",
                   help="per-seed result JSON (default: %(default)s)")
    p.add_argument("--checkpoint-dir", type=Path, default=common.HERE / "out" / "runs" / "ogb-peers",
                   help="per-epoch checkpoints of the seeds being trained (default: %(default)s)")
    p.add_argument("--resume", action="store_true",
                   help="keep seeds whose result JSON exists at this configuration; continue a killed seed from "
                        "its checkpoint")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    for flag in ("hidden", "layers", "batch_size", "epochs"):
        p.add_argument("--" + flag.replace("_", "-"), type=int, default=RECIPE[flag], help="default: %(default)s")
    p.add_argument("--dropout", type=float, default=RECIPE["dropout"], help="default: %(default)s")
    p.add_argument("--lr", type=float, default=RECIPE["lr"], help="default: %(default)s")
    p.add_argument("--limit", type=int, default=0,
                   help="a quick run on at most this many graphs per part (0: all; see limit_parts)")
    p.add_argument("--time-epochs", type=int, default=0,
                   help="time this many whole epochs (with validation) of each model, seed 0; no test")
    p.add_argument("--timing-out", type=Path, default=None, help="with --time-epochs: the JSON written")
    return p


def main(argv: list[str] | None = None) -> int:
    """Train (or time) each asked-for model and seed: 0; one ``error:`` line and xmask's exit code on an
    xmask error (2: a bad argument or a checkpoint of another configuration; 3: data not found)."""
    from xmask_cli.errors import XMaskError

    try:
        return _main(argv)
    except XMaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(getattr(e, "exit_code", 1))


def _main(argv: list[str] | None) -> int:
    p = parser()
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or [m for m in models if m not in MODELS]:
        p.error(f"--models: expected some of {', '.join(MODELS)}, got {args.models!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, parts = load_molhiv(args.data_root, args.cache_dir)
    if args.limit:
        parts = limit_parts(parts, graph_labels(dataset), args.limit)
    if args.time_epochs:
        rows = [time_epochs(dataset, parts, run_config(m, 0, args), args.time_epochs) for m in models]
        text = json.dumps(rows, indent=2)
        if args.timing_out is not None:
            write_json(args.timing_out, {"timings": rows})
        print(text)
        return 0
    for m in models:
        for s in args.seeds:
            config, out = run_config(m, s, args), args.out_dir / f"{m}-seed{s}.json"
            if args.resume and finished(out, config) is not None:
                print(f"{m} seed {s}: kept {out}", file=sys.stderr, flush=True)
                continue
            ckpt = args.checkpoint_dir / f"{m}-seed{s}.pt"
            t = time.perf_counter()
            res = train_seed(dataset, parts, config, ckpt, args.resume)
            res.update(seconds=time.perf_counter() - t, peak_rss_mb=common.peak_rss_mb(), torch_threads=torch.get_num_threads())
            write_json(out, res)
            ckpt.unlink(missing_ok=True)
            print(f"{m} seed {s}: val {res['metrics']['val']:.4f} test {res['metrics']['test']:.4f} "
                  f"(best epoch {res['best_epoch']} of {res['epochs_run']})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
