"""Image level: a ViT over patch tokens whose attention reads the patch grid's ``log(Â^k + eps)``.

Every image has the same grid graph, so the task reads its cached powers
once (``[1, K, N, N]``, on the device) and hands that one tensor to every
batch: no structure work per image or per batch. Images stay ``uint8`` in
memory and are normalised per batch on the device with the training split's
per-channel mean and std.

Example::

    images = load_images(get_dataset("digits"))
    split = image_split(images, seed=0)  # this module's
    task = ImageTask(cache_path, images, split, "accuracy", batch_size=64, seed=0, device="cpu")
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.data.images import ImageSet, channel_stats
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import METRICS
from xmask_cli.engine.splits import Split
from xmask_cli.engine.tasks.base import ExperimentView, ModelFields, Task
from xmask_cli.errors import UsageError
from xmask_cli.model.batches import DenseBatch

__all__ = ["ImageBatch", "ImageTask", "augment_batch", "image_split"]


def image_split(images: ImageSet, seed: int) -> Split:
    """Train / val / test split: the dataset's fixed test images; validation carved from the rest by ``seed``.

    CIFAR-10: ``test_batch``, 5,000 validation images. Digits: a 20 % test set
    drawn once with seed 0, validation 10 % of all images.
    """
    info = images.info
    n_val = info.val if isinstance(info.val, int) else int(round(info.val * len(images.labels)))
    if n_val >= len(images.pool):
        raise UsageError(f"{images.spec.name} ({images.source}): {len(images.pool)} training images leave none "
                         f"after the {n_val} validation images; are the files complete?")
    pool = images.pool[np.random.default_rng(int(seed)).permutation(len(images.pool))]
    return Split(train=np.sort(pool[n_val:]), val=np.sort(pool[:n_val]), test=images.test,
                 name=images.spec.split, seed=int(seed))


@dataclass
class ImageBatch:
    """Images of one batch.

    Attributes:
        x: ``uint8 [B, C, H, W]`` raw images (normalised by the task on its device).
        y: ``int64 [B]`` labels.
        index: ``int64 [B]`` image ids in the dataset.
    """

    x: Tensor
    y: Tensor
    index: Tensor

    @property
    def num_graphs(self) -> int:
        return int(self.index.numel())


def augment_batch(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random crop after zero padding by 1/8 of the side, and random horizontal flip (``uint8 [B, C, H, W]``).

    Off by default (``image.augment``): the paper trained without augmentation.
    """
    b, _, h, w = x.shape
    pad_h, pad_w = max(1, h // 8), max(1, w // 8)
    padded = np.pad(x, ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)))
    top = rng.integers(0, 2 * pad_h + 1, size=b)
    left = rng.integers(0, 2 * pad_w + 1, size=b)
    flip = rng.random(size=(b,)) < 0.5
    out = np.empty_like(x)
    for i in range(b):
        crop = padded[i, :, top[i]:top[i] + h, left[i]:left[i] + w]
        out[i] = crop[:, :, ::-1] if flip[i] else crop
    return out


class ImageTask(Task[ImageBatch]):
    """Image classification over the shared patch grid, as a :class:`~xmask_cli.engine.tasks.base.Task`.

    Training batches are a permutation of the training images drawn from
    ``(seed, epoch)`` (so resume is exact); evaluation batches are the split's
    images in order, so the numbers are the same at every call.

    Args:
        cache_path: the grid's structure cache (:func:`~xmask_cli.prepare.prepare_grid`).
        images: the dataset.
        split: train / val / test image ids (:func:`image_split`).
        metric: ``accuracy``.
        batch_size: images per batch.
        seed: batch order and augmentation draws.
        device: torch device.
        augment: random crop and flip of training images.
    """

    model_task = "image"

    def __init__(self, cache_path: str | os.PathLike, images: ImageSet, split: Split, metric: str, batch_size: int,
                 seed: int, device: torch.device | str, augment: bool = False):
        if metric != "accuracy":
            raise ValueError(f"the image level computes accuracy, got {metric!r}")
        self.cache_path, self.images, self.split, self.metric = str(cache_path), images, split, metric
        self.batch_size, self.seed, self.augment = int(batch_size), int(seed), bool(augment)
        self.device = torch.device(device)
        with StructureCache(cache_path) as cache:
            if cache.num_graphs != 1:
                raise ValueError(f"{cache_path} holds {cache.num_graphs} graphs, not one patch grid")
            grid = cache.dense_powers(0)  # [K, N, N]
        # One tensor for every batch: [1, K, N, N] broadcasts over the images.
        self.powers = torch.from_numpy(grid)[None].to(self.device)
        self.mean, self.std = channel_stats(images.images, split.train)
        shape = (1, -1, 1, 1)
        self._mean = torch.tensor(self.mean, dtype=torch.float32, device=self.device).view(shape)
        self._std = torch.tensor(self.std, dtype=torch.float32, device=self.device).view(shape)
        self.x = torch.from_numpy(np.ascontiguousarray(images.images))
        self.y = torch.from_numpy(np.asarray(images.labels, dtype=np.int64))
        self.in_dim = int(images.images.shape[1])
        self.out_dim = images.num_classes
        self.image_size = tuple(int(s) for s in images.images.shape[2:])

    def describe(self) -> dict[str, object]:
        return {"dataset": self.images.spec.name, "cache_path": self.cache_path, "split": self.split.to_dict(),
                "normalization": {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std],
                                  "from": "train"},
                "augment": self.augment}

    def split_sizes(self) -> dict[str, int]:
        return dict(zip(PARTS, self.split.sizes()))

    def batch(self, ids: np.ndarray | Tensor) -> ImageBatch:
        """The images ``ids`` as one (unaugmented) batch."""
        idx = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        return ImageBatch(x=self.x[idx], y=self.y[idx], index=idx)

    def train_batches(self, epoch: int) -> Iterator[ImageBatch]:
        rng = np.random.default_rng([self.seed, int(epoch)])
        order = self.split.train[rng.permutation(len(self.split.train))]
        for start in range(0, len(order), self.batch_size):
            b = self.batch(order[start:start + self.batch_size])
            if self.augment:
                b.x = torch.from_numpy(augment_batch(b.x.numpy(), rng))
            yield b

    def inputs(self, batch: ImageBatch) -> DenseBatch:
        """What the model reads: normalised float images on the device and the shared grid powers."""
        x = batch.x.to(self.device, non_blocking=True).float()
        return DenseBatch(x=(x - self._mean) / self._std, powers=self.powers)

    def loss(self, model: torch.nn.Module, batch: ImageBatch) -> tuple[Tensor, int]:
        out = model(self.inputs(batch))
        return torch.nn.functional.cross_entropy(out, batch.y.to(self.device)), batch.num_graphs

    @torch.no_grad()
    def predict(self, model: torch.nn.Module, ids: np.ndarray) -> Tensor:
        """``[len(ids), classes]`` outputs of ``model`` on images ``ids``, in that order (eval batches)."""
        outs = []
        for start in range(0, len(ids), self.batch_size):
            outs.append(model(self.inputs(self.batch(ids[start:start + self.batch_size]))).float().cpu())
        return torch.cat(outs) if outs else torch.zeros(0, self.out_dim)

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor]:
        """``(outputs [n, classes], labels [n])`` of the images of ``part``, in the split's order."""
        ids = getattr(self.split, part)
        return self.predict(model, ids), self.y[torch.as_tensor(ids)]

    def score(self, model: torch.nn.Module, part: str) -> float:
        return METRICS[self.metric](*self.outputs(model, part))

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric, mean cross-entropy)`` on ``part`` from one forward: what selection reads."""
        out, y = self.outputs(model, part)
        loss = float(torch.nn.functional.cross_entropy(out, y.long())) if len(y) else float("nan")
        return METRICS[self.metric](out, y), loss


def from_experiment(exp: ExperimentView[ImageSet], seed: int, device: str, dense_only: str | None = None) -> ImageTask:
    """The image task of ``exp`` for ``seed`` (the level registry's builder)."""
    cfg = exp.cfg
    if exp.cache_path is None:
        raise ValueError("the image level reads the dataset's structure cache; this experiment has none")
    return ImageTask(exp.cache_path, exp.graphs, image_split(exp.graphs, seed), exp.metric, cfg.train.batch_size, seed,
                     device, augment=cfg.image.augment)


def model_fields(exp: ExperimentView[ImageSet], task: ImageTask) -> ModelFields:
    """Model dimensions of an image run: patch features, classes, and the image and patch sizes."""
    height, width = task.image_size
    return {"in_dim": task.in_dim, "out_dim": task.out_dim, "image_size": (height, width),
            "patch_size": exp.cfg.image.patch}
