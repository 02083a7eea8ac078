"""Image level: the cached patch grid, the task's batches, and a tiny digits run that learns."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.images import load_images
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.runs.experiment import Experiment, _model_config
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.engine.tasks.image import ImageTask, augment_batch, image_split
from xmask_cli.errors import UsageError
from xmask_cli.prepare import prepare_grid

TINY = ["model.hidden=32", "model.layers=2", "model.dropout=0.0", "train.lr=3e-3", "train.epochs=5"]


def dense_grid_powers(rows: int, cols: int, connectivity: int, k: int) -> np.ndarray:
    """``Â^1..Â^k`` by dense numpy, the grid's adjacency built from patch coordinates."""
    n = rows * cols
    r, c = np.divmod(np.arange(n), cols)
    dr, dc = np.abs(r[:, None] - r[None]), np.abs(c[:, None] - c[None])
    hop = dr + dc if connectivity == 4 else np.maximum(dr, dc)
    ai = (hop <= 1).astype(np.float64)  # A + I
    d = ai.sum(1) ** -0.5
    a_hat = d[:, None] * ai * d[None]
    return np.stack([np.linalg.matrix_power(a_hat, i) for i in range(1, k + 1)])


@pytest.mark.parametrize("connectivity, image, patch", [(4, (32, 32), 2), (8, (32, 32), 2), (4, (8, 12), 2)])
def test_cached_grid_powers_equal_dense_numpy_powers(tmp_path, connectivity, image, patch):
    cfg = resolve("image-level", ["structure.powers.k=5"]).structure
    s = prepare_grid(dataset_key="grid", image_size=image, patch=patch, connectivity=connectivity, cfg=cfg,
                     cache_dir=tmp_path)
    rows, cols = image[0] // patch, image[1] // patch
    with StructureCache(s.path) as c:
        got = c.dense_powers(0)
        assert c.num_graphs == 1 and c.num_nodes(0) == rows * cols
    np.testing.assert_allclose(got, dense_grid_powers(rows, cols, connectivity, 5), rtol=1e-5, atol=1e-7)


def test_the_grid_is_cached_once_per_geometry_and_k(tmp_path):
    cfg = resolve("image-level").structure
    kw = dict(dataset_key="digits", cfg=cfg, cache_dir=tmp_path)
    first = prepare_grid(image_size=(8, 8), patch=2, connectivity=4, **kw)
    again = prepare_grid(image_size=(8, 8), patch=2, connectivity=4, **kw)
    assert not first.cached and again.cached and again.path == first.path
    others = {prepare_grid(image_size=(8, 8), patch=2, connectivity=8, **kw).path,
              prepare_grid(image_size=(8, 8), patch=4, connectivity=4, **kw).path,
              prepare_grid(image_size=(16, 16), patch=4, connectivity=4, **kw).path,  # same 4x4 grid, other image
              prepare_grid(image_size=(8, 8), patch=2, connectivity=4, cfg=resolve("image-level", [
                  "structure.powers.k=3"]).structure, cache_dir=tmp_path, dataset_key="digits").path}
    assert first.path not in others and len(others) == 4
    with pytest.raises(UsageError, match="image.patch=3: patch size 3 does not divide the image"):
        prepare_grid(image_size=(8, 8), patch=3, connectivity=4, **kw)


def test_digits_split_fixed_test_seeded_validation():
    ds = load_images(get_dataset("digits"))
    a, b = image_split(ds, seed=0), image_split(ds, seed=1)
    for s in (a, b):
        assert s.sizes() == (1797 - 359 - 180, 180, 359)
        every = np.concatenate([s.train, s.val, s.test])
        assert len(np.unique(every)) == 1797  # disjoint and complete
    np.testing.assert_array_equal(a.test, b.test)  # the test set is the same for every run
    assert not np.array_equal(a.val, b.val)  # validation is carved by the run's seed
    np.testing.assert_array_equal(image_split(ds, seed=1).val, b.val)


@pytest.fixture(scope="module")
def digits_task(tmp_path_factory) -> ImageTask:
    cache = tmp_path_factory.mktemp("cache")
    exp = Experiment.load(resolve("vit-digits", ["train.batch_size=50"]), cache_dir=cache)
    return exp.task(0, "cpu")


def test_every_batch_reads_the_one_cached_grid_tensor(digits_task, monkeypatch):
    calls = []
    monkeypatch.setattr(StructureCache, "dense_powers", lambda *a, **k: calls.append(a))
    seen = {id(digits_task.inputs(b).powers) for b in digits_task.train_batches(0)}
    assert seen == {id(digits_task.powers)} and not calls  # no structure work per batch
    assert tuple(digits_task.powers.shape) == (1, 4, 16, 16)


def test_batches_are_normalised_with_training_statistics_and_cover_the_split(digits_task):
    batches = list(digits_task.train_batches(3))
    ids = np.concatenate([b.index.numpy() for b in batches])
    np.testing.assert_array_equal(np.sort(ids), digits_task.split.train)
    x = torch.cat([digits_task.inputs(b).x for b in batches])
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std(unbiased=False)) - 1) < 1e-4
    again = np.concatenate([b.index.numpy() for b in digits_task.train_batches(3)])
    np.testing.assert_array_equal(ids, again)  # (seed, epoch) fixes the order: resume is exact


def test_task_outputs_follow_a_permutation_of_the_images(digits_task):
    from xmask_cli.model.network import XMaskNet

    exp_cfg = resolve("vit-digits", TINY)
    torch.manual_seed(0)
    model = XMaskNet(_model_config(exp_cfg, "image", 1, 10, "digits", image_size=(8, 8), patch_size=2)).eval()
    ids = digits_task.split.val[:120]  # several evaluation batches of 50
    perm = np.random.default_rng(1).permutation(len(ids))
    out, out_p = digits_task.predict(model, ids), digits_task.predict(model, ids[perm])
    torch.testing.assert_close(out_p, out[perm], rtol=1e-5, atol=1e-5)


def test_augmentation_crops_and_flips_within_the_padded_image():
    rng = np.random.default_rng(0)
    x = np.arange(2 * 1 * 8 * 8, dtype=np.uint8).reshape(2, 1, 8, 8)
    out = augment_batch(x, rng)
    assert out.shape == x.shape
    for i in range(2):  # every output pixel is an input pixel of that image or padding
        assert set(out[i].ravel()) <= set(x[i].ravel()) | {0}


def test_a_tiny_digits_run_learns_well_above_chance(tmp_path):
    result = train_seeds(resolve("vit-digits", TINY), [0], device="cpu", cache_dir=tmp_path / "cache",
                         run_root=tmp_path / "runs")
    metrics = result["runs"][0]["metrics"]
    assert result["level"] == "image" and result["metric"] == "accuracy"
    assert metrics["val"] > 0.35 and metrics["test"] > 0.35  # chance is 0.10
