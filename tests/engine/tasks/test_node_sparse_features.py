"""node.sparse_features: Cora's bag-of-words features as a sparse tensor on the sparse full-graph path."""
from __future__ import annotations

from pathlib import Path

import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.experiment import Experiment
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


def _direct(tmp_path: Path, sparse: bool, dropout: float):
    """The shipped GAT-shaped ``cora`` (``model.encoder: none``): the first block's q, k, v read the raw features."""
    cfg = resolve("cora", [f"node.sparse_features={str(sparse).lower()}", f"model.layer_dropout={dropout}",
                           f"model.attn_dropout={dropout}"])
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache", offline=True)
    task = exp.task(0, "cpu")
    torch.manual_seed(0)
    return task, XMaskNet(exp.model_config(task))


def test_encoder_none_reads_sparse_features_as_the_dense_ones(tmp_path: Path) -> None:
    dense_task, model = _direct(tmp_path, False, 0.0)
    sparse_task, _ = _direct(tmp_path, True, 0.0)
    assert model.cfg.encoder == "none" and dense_task.batcher.x_sparse is None and sparse_task.batcher.x_sparse is not None
    # Weights at a trained scale (q.k spread of several units), so a difference in the logits would show.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    torch.testing.assert_close(sparse_task.predict(model), dense_task.predict(model), rtol=1e-5, atol=1e-5)
    # One training step without dropout: the same loss and the same gradient on every parameter.
    grads = []
    for task in (dense_task, sparse_task):
        model.zero_grad()
        model.train()
        loss, _ = task.loss(model, next(iter(task.train_batches(0))))
        loss.backward()
        grads.append((float(loss.detach()), [p.grad.clone() for p in model.parameters()]))
    assert abs(grads[0][0] - grads[1][0]) < 1e-5
    for g_dense, g_sparse in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(g_sparse, g_dense, rtol=1e-4, atol=1e-6)
    first_q = model.blocks[0].attn.q.weight.grad
    assert first_q is not None and first_q.shape[1] == 1433 and float(first_q.abs().sum()) > 0


def test_encoder_none_drops_the_stored_features_only(tmp_path: Path) -> None:
    task, model = _direct(tmp_path, True, 0.6)
    x = task.batcher.x_sparse
    block = model.blocks[0].train()
    dropped = block.drop_input(x).coalesce()
    kept = dropped.values() != 0
    # Same pattern, the survivors scaled by 1 / (1 - p), about 1 - p of them kept.
    assert torch.equal(dropped.indices(), x.indices())
    torch.testing.assert_close(dropped.values()[kept], x.values()[kept] / 0.4)
    assert abs(float(kept.float().mean()) - 0.4) < 0.02
