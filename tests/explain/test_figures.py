"""explain.figures: the PNG grid per target; matplotlib is a runtime dependency."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.explain.runs import graph_batch, reload_model
from xmask_cli.explain.figures import plot_target
from xmask_cli.explain.record import KINDS, Recorded, record_terms, to_numpy
from xmask_cli.model.batches import DenseBatch


def test_png_grid(mutag):
    import matplotlib.image as mpimg

    result = mutag["result"]
    for name in ("graph_0", "graph_5"):
        img = mpimg.imread(result["files"]["figures"][name])
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    model = reload_model(mutag)
    batch, _, n = graph_batch(mutag, 0)
    _, layers = record_terms(model, DenseBatch(batch.x, batch.powers, batch.mask))
    from xmask_cli.explain.targets import TargetMaps

    rec = Recorded(n=n, layers=[to_numpy(t, 0) for t in layers])
    t = TargetMaps("graph_0", "graph", {"graph": 0}, np.arange(n), n, rec.crop(np.arange(n)))
    fig, axes = plot_target(t, model.cfg)
    assert axes.shape == (2 * len(KINDS), 2)
    assert "head 1 · Â^2" in axes[0, 1].get_title() and "graph 0" in fig._suptitle.get_text()


def test_matplotlib_is_a_runtime_dependency():
    """Issue 14, item 14: `explain` draws PNGs, so `pip install .` (no extras) must bring matplotlib.

    .ci/run checks the installed metadata after a plain install; this checks the declaration."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    names = [d.split(";")[0].replace(" ", "").lower() for d in project["dependencies"]]
    assert any(n.startswith("matplotlib") for n in names), names
