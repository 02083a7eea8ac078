"""Graph-level training: seeded, early-stopped on validation, resumable.

Example::

    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=cache_dir)
    split = graph_split(graphs.spec.split, graphs.dataset, seed=0)
    model_cfg = ModelConfig(in_dim=node_features(graphs)[0].size(1), out_dim=graphs.dataset.num_classes)
    summary = train_graph_level(cache_path, graphs, split, model_cfg, TrainConfig(seed=0), "runs/mutag/0")

Selection reads the validation metric only: the best epoch, early stopping
and the state restored at the end. The test metric is computed once, on that
restored state, and only reported.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from xmask_cli.data.load import GraphSet
from xmask_cli.engine.metrics import HIGHER_IS_BETTER, METRICS
from xmask_cli.engine.runs import RunDir
from xmask_cli.engine.splits import Split
from xmask_cli.engine.stream import GraphLevelStream
from xmask_cli.model.network import ModelConfig, XMaskNet

__all__ = ["TrainConfig", "node_features", "graph_labels", "evaluate", "train_graph_level"]

#: Metrics of classification tasks (trained with cross-entropy).
CLASSIFICATION_METRICS = ("accuracy", "rocauc")
#: Degrees above this share the last one-hot slot (as PyG's ``OneHotDegree`` with a cap).
MAX_DEGREE = 64


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one run.

    Attributes:
        epochs: maximum number of epochs.
        lr: AdamW peak learning rate.
        weight_decay: AdamW decoupled weight decay.
        warmup_epochs: linear warm-up length; constant learning rate afterwards.
        clip_norm: max global gradient norm (``<= 0`` disables clipping).
        batch_size: graphs per batch.
        patience: stop after this many epochs without a validation improvement.
        seed: seeds torch, numpy and the batch order.
        device: ``'cpu'``, ``'cuda'``, ...
    """

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_epochs: int = 5
    clip_norm: float = 1.0
    batch_size: int = 32
    patience: int = 20
    seed: int = 0
    device: str = "cpu"


def node_features(graphs: GraphSet) -> list[Tensor]:
    """Float ``[n_g, F]`` node features of every graph.

    The dataset's ``x`` when it has one; otherwise (e.g. the bundled MUTAG,
    IMDB) a one-hot node degree, capped at :data:`MAX_DEGREE`, as PyG's
    ``OneHotDegree`` transform does for featureless TU sets.
    """
    ds = graphs.dataset
    if getattr(ds._data, "x", None) is not None:
        return [ds[i].x.float() for i in range(len(ds))]
    degrees = [np.bincount(e[0], minlength=int(n)) if e.size else np.zeros(int(n), dtype=np.int64)
               for e, n in zip(graphs.edge_index, graphs.num_nodes)]
    width = min(max((int(d.max()) for d in degrees if d.size), default=0), MAX_DEGREE) + 1
    eye = torch.eye(width)
    return [eye[torch.from_numpy(np.minimum(d, width - 1).astype(np.int64))] for d in degrees]


def graph_labels(graphs: GraphSet) -> Tensor:
    """``[G]`` (or ``[G, T]``) graph labels of the dataset."""
    y = graphs.dataset._data.y
    return y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def _rng_state() -> dict[str, Any]:
    """Torch and numpy global RNG states as tensors and plain values (``weights_only``-safe)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
            "numpy_pos": int(pos), "numpy_has_gauss": int(has_gauss), "numpy_cached": float(cached)}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy_pos"], state["numpy_has_gauss"], state["numpy_cached"]))


def _warmup(warmup_epochs: int) -> Callable[[int], float]:
    """LambdaLR factor: linear from ``1/warmup`` to 1 over ``warmup`` epochs, then 1."""
    def factor(epoch: int) -> float:
        return 1.0 if warmup_epochs <= 0 else min(1.0, (epoch + 1) / warmup_epochs)
    return factor


@torch.no_grad()
def _predict(model: XMaskNet, stream: GraphLevelStream, device: torch.device) -> tuple[Tensor, Tensor]:
    """Outputs and labels of every graph of ``stream``, in its (fixed) order."""
    model.eval()
    outs, ys = [], []
    for batch in stream.epoch(0):
        batch = batch.to(device)
        outs.append(model(batch).float().cpu())
        ys.append(batch.y.cpu())
    return torch.cat(outs), torch.cat(ys)


def _score(model: XMaskNet, stream: GraphLevelStream, device: torch.device, metric: str) -> float:
    out, y = _predict(model, stream, device)
    return METRICS[metric](out, y)


def _eval_stream(cache_path: str | os.PathLike, features: Sequence[Tensor], labels: Tensor,
                 indices: Any, batch_size: int) -> GraphLevelStream:
    # Unshuffled: evaluation batches, hence the numbers, are the same at every call.
    return GraphLevelStream(cache_path, features, labels, indices, batch_size, shuffle=False, seed=0,
                            load_in_memory=True)


def evaluate(
    cache_path: str | os.PathLike,
    graphs: GraphSet,
    indices: Any,
    model_cfg: ModelConfig,
    state_dict: dict[str, Tensor],
    metric: str = "accuracy",
    *,
    batch_size: int = 32,
    device: str = "cpu",
) -> float:
    """``metric`` of the model ``state_dict`` (e.g. ``best.pt``'s ``"model"``) on graphs ``indices``.

    Uses the same unshuffled batches as training's evaluation, so with the
    run's ``batch_size`` it reproduces the recorded numbers.
    """
    dev = torch.device(device)
    model = XMaskNet(model_cfg).to(dev)
    model.load_state_dict(state_dict)
    stream = _eval_stream(cache_path, node_features(graphs), graph_labels(graphs), indices, batch_size)
    return _score(model, stream, dev, metric)


def _better(a: float, b: float | None, higher: bool) -> bool:
    """Is ``a`` a strict improvement on ``b``? (ties keep the earlier epoch)"""
    if b is None:
        return True
    return a > b if higher else a < b


def _cpu_state(model: torch.nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def train_graph_level(
    cache_path: str | os.PathLike,
    graphs: GraphSet,
    split: Split,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    run_dir: RunDir | str | os.PathLike,
    metric: str = "accuracy",
    resume: bool = False,
    log: Callable[[dict[str, Any]], None] = lambda m: None,
) -> dict[str, Any]:
    """Train :class:`XMaskNet` on one graph-level split; returns (and writes) the run summary.

    Every epoch: one pass over the shuffled training batches (AdamW, linear
    warm-up then constant learning rate, gradient clipping, cross-entropy),
    then the validation metric. The best epoch by validation is kept; the run
    stops after ``patience`` epochs without improvement or at ``epochs``. The
    best state is then restored and its train/val/test metrics reported.

    ``last.pt`` is written after every epoch (model, optimizer, scheduler,
    RNG states, early-stopping counters); with ``resume=True`` a killed run
    continues from it and ends exactly as an uninterrupted run would (on CPU).
    ``log`` receives each epoch's metrics row after it has been checkpointed.

    Raises:
        ValueError: ``metric`` is not a classification metric, ``epochs < 1``, or
            ``resume`` finds a run with another dataset, split, model or seed.
    """
    if train_cfg.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {train_cfg.epochs}")
    if metric not in CLASSIFICATION_METRICS:
        raise ValueError(f"graph-level training supports {CLASSIFICATION_METRICS}, got {metric!r}")
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    higher = HIGHER_IS_BETTER[metric]
    device = torch.device(train_cfg.device)

    _seed_everything(train_cfg.seed)
    features, labels = node_features(graphs), graph_labels(graphs)
    model = XMaskNet(model_cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup(train_cfg.warmup_epochs))
    train_stream = GraphLevelStream(cache_path, features, labels, split.train, train_cfg.batch_size,
                                    shuffle=True, seed=train_cfg.seed, load_in_memory=True)
    eval_streams = {part: _eval_stream(cache_path, features, labels, getattr(split, part), train_cfg.batch_size)
                    for part in ("train", "val", "test")}

    config = {
        "dataset": graphs.spec.name, "cache_path": str(cache_path), "metric": metric,
        "split": split.to_dict(), "model": asdict(model_cfg), "train": asdict(train_cfg),
    }
    start, best, best_epoch, bad_epochs = 0, None, -1, 0
    if resume and run.has_checkpoint(RunDir.LAST):
        # JSON round trip so tuples compare equal to the lists read back.
        saved, now = run.load_config(), json.loads(json.dumps(config))
        for key in ("dataset", "metric", "split", "model"):
            if saved[key] != now[key]:
                raise ValueError(f"cannot resume {run.path}: its {key!r} differs from this run's")
        if saved["train"]["seed"] != train_cfg.seed:
            raise ValueError(f"cannot resume {run.path}: it was trained with seed {saved['train']['seed']}")
        ckpt = run.load_checkpoint(RunDir.LAST)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        _set_rng_state(ckpt["rng"])
        start, best, best_epoch, bad_epochs = ckpt["epoch"] + 1, ckpt["best"], ckpt["best_epoch"], ckpt["bad_epochs"]
        run.truncate_metrics(start)
    else:
        run.truncate_metrics(0)
        run.save_config(config)

    epoch = start - 1
    stopped_early = start > 0 and bad_epochs >= train_cfg.patience
    # A resumed run that had already stopped early trains no further epoch.
    end = start if stopped_early else train_cfg.epochs
    for epoch in range(start, end):
        train_stream.set_epoch(epoch)  # the batch order depends on (seed, epoch) only: resumable
        model.train()
        total, count = 0.0, 0
        for batch in train_stream:
            batch = batch.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(batch), batch.y.long())
            loss.backward()
            if train_cfg.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.clip_norm)
            optimizer.step()
            total += float(loss.detach()) * batch.num_graphs
            count += batch.num_graphs
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()

        val = _score(model, eval_streams["val"], device, metric)
        if _better(val, best, higher):
            best, best_epoch, bad_epochs = val, epoch, 0
            run.save_checkpoint({"model": _cpu_state(model), "epoch": epoch, "val": val}, RunDir.BEST)
        else:
            bad_epochs += 1
        stopped_early = bad_epochs >= train_cfg.patience
        row = {"epoch": epoch, "loss": total / max(count, 1), "lr": lr, f"val_{metric}": val,
               "best_epoch": best_epoch}
        run.append_metrics(row)
        # RNG states after the epoch: the next one (dropout) draws exactly what it would have uninterrupted.
        run.save_checkpoint({
            "model": _cpu_state(model), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "rng": _rng_state(), "epoch": epoch, "best": best, "best_epoch": best_epoch, "bad_epochs": bad_epochs,
        }, RunDir.LAST)
        log(row)
        if stopped_early:
            break

    # Whatever ended the run, report the best state by validation.
    best_ckpt = run.load_checkpoint(RunDir.BEST)
    model.load_state_dict(best_ckpt["model"])
    metrics = {part: _score(model, stream, device, metric) for part, stream in eval_streams.items()}
    summary = {
        "dataset": graphs.spec.name, "metric": metric, "seed": train_cfg.seed,
        "best_epoch": int(best_ckpt["epoch"]), "epochs_run": epoch + 1, "stopped_early": bool(stopped_early),
        "split": {"name": split.name, "seed": split.seed, "train": len(split.train), "val": len(split.val),
                  "test": len(split.test)},
        "metrics": metrics,
    }
    run.write_summary(summary)
    return summary
