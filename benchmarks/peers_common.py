"""What every PyG peer family of ``peers.py`` shares: the dataset loader, xmask's seeding, the input
features, the optimiser switch, graph loaders on xmask's splits and training under xmask's selection rule.

Splits, seeding, metrics and selection are xmask's own (:mod:`xmask_cli.engine.scoring.splits`,
:func:`xmask_cli.engine.training.loop.seed_everything`, :mod:`xmask_cli.engine.scoring.metrics`,
:class:`xmask_cli.engine.training.selection.Selection`): a peer's seed ``s`` gets the split and the seeding of
xmask's run with seed ``s``.
"""
from __future__ import annotations

import copy
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

DEFAULT_DATA_ROOT = Path(os.environ.get("XMASK_DATA_ROOT") or REPO.parent / "shared" / "datasets")

#: ``adamw`` (the protocol's) or ``adam-l2`` (Adam with coupled L2, the peers' published recipes).
OPTIMIZERS = ("adamw", "adam-l2")
#: The run's switches, set once by ``peers.py``'s command line: ``optimizer`` (one of :data:`OPTIMIZERS`)
#: and ``normalize`` (row-normalise Planetoid features, as PyG's GCN / GAT examples do; off: xmask's input).
OPTIONS: dict[str, Any] = {"optimizer": "adamw", "normalize": False}


def parse_seeds(text: str) -> list[int]:
    """``--seeds`` as ``xmask train`` reads it (:func:`xmask_cli.engine.runs.plan.parse_seeds`), for argparse."""
    import argparse

    from xmask_cli.engine.runs.plan import parse_seeds as xmask_seeds
    from xmask_cli.errors import UsageError

    try:
        return xmask_seeds(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def load(name: str, data_root: Path, cache_dir: Path) -> Any:
    """The dataset as ``xmask`` loads it (offline)."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    return load_graphs(get_dataset(name), data_root=data_root, cache_dir=cache_dir, offline=True)


def seed(value: int) -> None:
    """Seed torch and numpy exactly as ``xmask train`` seeds a run."""
    from xmask_cli.engine.training.loop import seed_everything

    seed_everything(value)


def make_optimizer(params: Any, lr: float, weight_decay: float) -> Any:
    """AdamW (decoupled decay) by default; ``--optimizer adam-l2`` gives Adam with L2 ``weight_decay``."""
    import torch

    cls = torch.optim.AdamW if OPTIONS["optimizer"] == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, weight_decay=weight_decay)


def row_normalize(x: Any) -> Any:
    """Each row divided by its sum (PyG's ``NormalizeFeatures``; an all-zero row stays zero)."""
    return x / x.sum(-1, keepdim=True).clamp(min=1.0)


def features(data: Any) -> Any:
    """A node / link peer's input: the raw features, row-normalised under ``--normalize-features``."""
    x = data.x.float()
    return row_normalize(x) if OPTIONS["normalize"] else x


def count_parameters(model: Any) -> int:
    """Trainable parameters of a torch module."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def split_info(split: Any, seed_value: int) -> dict[str, Any]:
    """A split's name, seed and part sizes, as each run records them."""
    return {"name": split.name, "seed": seed_value, **dict(zip(("train", "val", "test"), split.sizes()))}


def preset_name(dataset: str) -> str:
    """The xmask preset whose budget a dataset's row shares (``cora``, ``computers``, ``ogbg-molhiv``, ...)."""
    return dataset.lower()


def preset_budget(dataset: str, preset: str | None = None) -> dict[str, int]:
    """``train.epochs``, ``train.patience`` and ``train.batch_size`` of the dataset's xmask preset (or ``preset``)."""
    from xmask_cli.config_resolve import resolve

    t = resolve(preset or preset_name(dataset)).train
    return {"epochs": int(t.epochs), "patience": int(t.patience), "batch_size": int(t.batch_size)}


# ------------------------------------------------------------------ graph sets
def graph_data_list(graphs: Any, node_struct: str = "none") -> list[Any]:
    """PyG ``Data`` per graph with xmask's node features (dataset ``x`` or one-hot degree), plus the
    ``model.node_struct`` channels a preset appends (``degree``: what ``graph-level`` gives its model)."""
    import torch
    from torch_geometric.data import Data

    from xmask_cli.engine.batching.features import input_features
    from xmask_cli.engine.tasks.graph import graph_labels

    feats, labels = input_features(graphs, node_struct)[0], graph_labels(graphs)
    return [Data(x=f, edge_index=torch.from_numpy(np.ascontiguousarray(e, dtype=np.int64)), y=labels[i].view(1),
                 num_nodes=int(n))
            for i, (f, e, n) in enumerate(zip(feats, graphs.edge_index, graphs.num_nodes))]


def graph_loaders(data_list: list[Any], split: Any, parts: tuple[str, ...], batch_size: int,
                  seed_value: int) -> tuple[Any, dict[str, Any], int]:
    """``(train loader, eval loaders by part, number of classes)`` of a graph peer on ``split``.

    Seeds the run first (:func:`seed`), then shuffles the training graphs with a generator seeded by it, so
    a peer's batches depend on its seed only."""
    import torch
    from torch_geometric.loader import DataLoader

    sets = {p: [data_list[int(i)] for i in getattr(split, p)] for p in parts}
    seed(seed_value)
    gen = torch.Generator().manual_seed(seed_value)
    train_loader = DataLoader(sets["train"], batch_size=batch_size, shuffle=True, generator=gen)
    eval_loaders = {p: DataLoader(s, batch_size=batch_size, shuffle=False) for p, s in sets.items()}
    return train_loader, eval_loaders, int(max(int(d.y) for d in data_list)) + 1


def graph_epoch(model: Any, opt: Any, loader: Any, clip_norm: float) -> None:
    """One training pass of a graph classifier over ``loader`` (cross-entropy; the gradient norm clipped at
    ``clip_norm`` when > 0)."""
    import torch

    model.train()
    for b in loader:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index, b.batch, b.num_graphs), b.y)
        loss.backward()
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()


def graph_logits(model: Any, loader: Any) -> tuple[Any, Any]:
    """``(logits, labels)`` of every graph of ``loader``, in its order, in eval mode."""
    import torch

    model.eval()
    outs, ys = [], []
    with torch.no_grad():
        for b in loader:
            outs.append(model(b.x, b.edge_index, b.batch, b.num_graphs))
            ys.append(b.y)
    return torch.cat(outs), torch.cat(ys)


# ------------------------------------------------------------------ selection
def _save_epoch(path: Path, epoch: int, model: Any, opt: Any, fit: Any, gen: Any) -> None:
    """Everything :func:`fit_selected` needs to go on after ``epoch`` as if never stopped, written atomically:
    model, optimiser, selection and best state, the torch / numpy / python RNG states, the loader's generator,
    the curves and the seconds spent so far."""
    import io
    import random

    import torch

    from xmask_cli.engine.training.resume import rng_state
    from xmask_cli.fs import atomic_write

    state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict(), "best_state": fit.state,
             "best_opt_state": fit.opt_state, "selection": fit.sel.state(), "times": fit.times, "rng": rng_state(),
             "python_rng": random.getstate(), "loader_rng": None if gen is None else gen.get_state(),
             "val_curve": fit.val_curve, "val_loss_curve": fit.val_loss_curve,
             "seconds": fit.seconds + time.perf_counter() - fit.since}
    buf = io.BytesIO()
    torch.save(state, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(buf.getvalue()))


def _load_epoch(path: Path, model: Any, opt: Any, fit: Any, gen: Any) -> None:
    """Restore what :func:`_save_epoch` wrote into ``model``, ``opt``, ``fit`` and ``gen``."""
    import random

    import torch

    from xmask_cli.engine.training.resume import set_rng_state
    from xmask_cli.engine.training.selection import Selection

    ck = torch.load(path, weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    fit.state, fit.opt_state = ck["best_state"], ck["best_opt_state"]
    fit.sel = Selection.from_checkpoint({"epoch": ck["epoch"], **ck["selection"]})
    set_rng_state(ck["rng"])
    if "python_rng" in ck:  # absent from checkpoints of an older fit_selected
        random.setstate(ck["python_rng"])
    if gen is not None:
        gen.set_state(ck["loader_rng"])
    fit.times, fit.seconds = list(ck["times"]), float(ck.get("seconds", 0.0))
    fit.val_curve, fit.val_loss_curve = list(ck.get("val_curve", [])), list(ck.get("val_loss_curve", []))
    fit.resumed_at = fit.sel.start


def fit_selected(model: Any, opt: Any, train_epoch: Callable[[], None],
                 evaluate: Callable[[str], tuple[float, float]], epochs: int, patience: int,
                 on_epoch: Callable[[int, Any], None] | None = None,
                 after_eval: Callable[[float, float], None] | None = None,
                 checkpoint: Path | None = None, loader_rng: Any = None, every: int = 1) -> dict[str, Any]:
    """Train under xmask's selection rule; the selected state is loaded into ``model`` on return.

    ``evaluate(part)`` gives ``(metric, loss)``; ``on_epoch(epoch, fit)`` runs before an epoch (Polynormer's
    phase switch; ``fit`` holds the best state and the :class:`Selection`); ``after_eval(val, val_loss)``
    after each validation (a scheduler). ``checkpoint``: a file written after every ``every``-th epoch
    (:func:`_save_epoch`) and resumed from when it exists, so a killed run goes on as an uninterrupted one
    would; removed at the end. Returns the best / run epochs, the training seconds per epoch, the validation
    curves, the epoch a run resumed at (None: never stopped) and the seconds spent before it (from the
    checkpoint; the time between the checkpoint and the kill is not counted)."""
    from xmask_cli.engine.training.selection import Selection

    fit = types.SimpleNamespace(sel=Selection(), state=None, opt_state=None, times=[], val_curve=[],
                                val_loss_curve=[], seconds=0.0, since=time.perf_counter(), resumed_at=None)
    if checkpoint is not None and checkpoint.is_file():
        _load_epoch(checkpoint, model, opt, fit, loader_rng)
    start = fit.sel.start
    epoch = start - 1
    stopped = start > 0 and fit.sel.bad_epochs >= patience
    for epoch in range(start, start if stopped else epochs):
        if on_epoch is not None:
            on_epoch(epoch, fit)
        t = time.perf_counter()
        train_epoch()
        fit.times.append(time.perf_counter() - t)
        val, val_loss = evaluate("val")
        fit.val_curve.append(val)
        fit.val_loss_curve.append(val_loss)
        if after_eval is not None:
            after_eval(val, val_loss)
        if fit.sel.update(val, val_loss, epoch, higher=True):
            fit.state, fit.opt_state = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
        if checkpoint is not None and (epoch + 1) % every == 0:
            _save_epoch(checkpoint, epoch, model, opt, fit, loader_rng)
        if fit.sel.bad_epochs >= patience:
            break
    model.load_state_dict(fit.state)
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return {"best_epoch": fit.sel.best_epoch, "epochs_run": epoch + 1, "epoch_seconds": fit.times,
            "seconds_per_epoch": float(np.median(fit.times)) if fit.times else None,
            "val_curve": fit.val_curve, "val_loss_curve": fit.val_loss_curve, "resumed_at": fit.resumed_at,
            "seconds_before_resume": fit.seconds}


# ------------------------------------------------------------------ resuming a sweep
def read_finished(path: Path, tasks: tuple[str, ...] = ("graph-folds", "node")) -> list[dict[str, Any]]:
    """The runs of ``tasks`` in an earlier ``peers.py --out path`` result (none if the file is absent); a file
    that is not such a result raises ValueError (it is never overwritten by a resume)."""
    import json

    if not path.is_file():
        return []
    runs = json.loads(path.read_text()).get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path}: not a peers.py result (no runs list); move it away or leave out --resume")
    return [r for r in runs if isinstance(r, dict) and r.get("task") in tasks]


def finished_run(runs: list[dict[str, Any]], match: dict[str, Any], split: dict[str, Any],
                 epochs: int) -> dict[str, Any] | None:
    """The run of ``runs`` whose fields equal ``match`` (dataset, model, seed, budget, ...), made on ``split``
    (:func:`split_info` of the split the run would get now), with a selected epoch inside the ``epochs``
    budget and train / val / test metrics in [0, 1]; None when there is none such (the run is trained)."""
    for r in runs:
        if any(r.get(k) != v for k, v in match.items()):
            continue
        metrics = r.get("metrics")
        ok = (r.get("split") == split and isinstance(metrics, dict)
              and all(isinstance(metrics.get(p), float) and 0.0 <= metrics[p] <= 1.0 for p in ("train", "val", "test"))
              and isinstance(r.get("best_epoch"), int) and isinstance(r.get("epochs_run"), int)
              and 0 <= r["best_epoch"] < r["epochs_run"] <= epochs)
        if ok:
            return r
    return None


def peak_rss_mb() -> float | None:
    """This process's peak resident set size so far, MB (``ru_maxrss``; None where unavailable)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
