"""node.sparse_features: Cora's bag-of-words features as a sparse tensor on the sparse full-graph path."""
from __future__ import annotations

from pathlib import Path

import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.experiment import Experiment
from xmask_cli.model.network import XMaskNet


def _task_and_model(tmp_path: Path, sparse: bool):
    cfg = resolve("node-level", ["data.dataset=cora", "node.attention=sparse", "data.normalize_features=true",
                                 f"node.sparse_features={str(sparse).lower()}", "model.input_dropout=0.5"])
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache", offline=True)
    task = exp.task(0, "cpu")
    torch.manual_seed(0)
    return task, XMaskNet(exp.model_config(task))


def test_sparse_features_give_the_dense_numbers_in_evaluation(tmp_path: Path) -> None:
    dense_task, model = _task_and_model(tmp_path, False)
    sparse_task, _ = _task_and_model(tmp_path, True)
    assert dense_task.batcher.x_sparse is None and sparse_task.batcher.x_sparse is not None
    assert sparse_task.batcher.x_sparse.is_sparse and sparse_task.batcher.x_sparse.shape == (2708, 1433)
    torch.testing.assert_close(sparse_task.predict(model), dense_task.predict(model), rtol=1e-5, atol=1e-6)
    # Training: input dropout acts on the stored entries; a gradient reaches the encoder through the sparse product.
    model.train()
    loss, _ = sparse_task.loss(model, next(iter(sparse_task.train_batches(0))))
    loss.backward()
    assert model.encoder.weight.grad is not None and float(model.encoder.weight.grad.abs().sum()) > 0
