"""Dataset registry: name (case-insensitive, with aliases) -> how to load it.

A plain table of :class:`~xmask_cli.data.spec.DatasetSpec` (defined in :mod:`xmask_cli.data.spec`, which
:mod:`xmask_cli.data.folder` reads too); loading lives in :mod:`xmask_cli.data.load`.
"""
from __future__ import annotations

import difflib

from xmask_cli.data.folder import folder_spec, is_folder_ref
from xmask_cli.data.spec import DatasetSpec, tu_raw_files
from xmask_cli.errors import UsageError

__all__ = ["DatasetSpec", "all_datasets", "get_dataset", "graphqa_spec", "tu_raw_files"]


def _planetoid(name: str) -> tuple[str, ...]:
    n = name.lower()
    return tuple(f"raw/ind.{n}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"))


_OGB_MOLHIV = tuple(
    f"raw/{f}.csv.gz" for f in ("edge", "edge-feat", "node-feat", "graph-label", "num-node-list", "num-edge-list")
) + tuple(f"split/scaffold/{s}.csv.gz" for s in ("train", "valid", "test")) + ("RELEASE_v1.txt",)

def _ogbn(split: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The files ``PygNodePropPredDataset`` (ogb 1.3.6) reads for a CSV node set, and its split files."""
    raw = ("edge", "node-feat", "node-label", "num-node-list", "num-edge-list") + extra
    return (tuple(f"raw/{f}.csv.gz" for f in raw) + tuple(f"split/{split}/{s}.csv.gz" for s in ("train", "valid", "test"))
            + ("RELEASE_v1.txt",))


_NODE = ("node", "link")
_SPECS: tuple[DatasetSpec, ...] = (
    DatasetSpec("Cora", "planetoid", _NODE, "public", "Cora", _planetoid("Cora"), "accuracy", embedded=True),
    DatasetSpec("CiteSeer", "planetoid", _NODE, "public", "CiteSeer", _planetoid("CiteSeer"), "accuracy"),
    DatasetSpec("PubMed", "planetoid", _NODE, "public", "PubMed", _planetoid("PubMed"), "accuracy"),
    DatasetSpec("Computers", "amazon", _NODE, "random-60-20-20", "Computers",
                ("raw/amazon_electronics_computers.npz",), "accuracy", aliases=("amazon-computers",)),
    DatasetSpec("Photo", "amazon", _NODE, "random-60-20-20", "Photo",
                ("raw/amazon_electronics_photo.npz",), "accuracy", aliases=("amazon-photo",)),
    DatasetSpec("CS", "coauthor", _NODE, "random-60-20-20", "CS", ("raw/ms_academic_cs.npz",), "accuracy",
                aliases=("coauthor-cs",)),
    DatasetSpec("Physics", "coauthor", _NODE, "random-60-20-20", "Physics", ("raw/ms_academic_phy.npz",),
                "accuracy", aliases=("coauthor-physics",)),
    DatasetSpec("WikiCS", "wikics", _NODE, "official-0", "WikiCS", ("raw/data.json",), "accuracy",
                aliases=("wiki-cs",)),
    DatasetSpec("ogbn-arxiv", "ogbn", ("node",), "ogb-official", "ogbn_arxiv", _ogbn("time", ("node_year",)),
                "accuracy", aliases=("arxiv",)),
    DatasetSpec("ogbn-products", "ogbn", ("node",), "ogb-official", "ogbn_products", _ogbn("sales_ranking"),
                "accuracy", aliases=("products",)),
    DatasetSpec("MUTAG", "tu", ("graph",), "random-8-1-1", "MUTAG", tu_raw_files("MUTAG"), "accuracy", embedded=True),
    DatasetSpec("PROTEINS", "tu", ("graph",), "random-8-1-1", "PROTEINS", tu_raw_files("PROTEINS"), "accuracy"),
    DatasetSpec("NCI1", "tu", ("graph",), "random-8-1-1", "NCI1", tu_raw_files("NCI1"), "accuracy"),
    DatasetSpec("DD", "tu", ("graph",), "random-8-1-1", "DD", tu_raw_files("DD"), "accuracy", aliases=("d&d",)),
    DatasetSpec("IMDB-BINARY", "tu", ("graph",), "random-8-1-1", "IMDB-BINARY", tu_raw_files("IMDB-BINARY"), "accuracy",
                aliases=("imdb-b", "imdb")),
    DatasetSpec("COLLAB", "tu", ("graph",), "random-8-1-1", "COLLAB", tu_raw_files("COLLAB"), "accuracy"),
    DatasetSpec("ogbg-molhiv", "ogbg", ("graph",), "scaffold", "ogbg_molhiv", _OGB_MOLHIV, "rocauc",
                aliases=("molhiv", "hiv")),
    # Image level (ViT over the patch grid; loaders in data/images.py).
    DatasetSpec("digits", "images", ("image",), "fixed-test-20+val-10", "", (), "accuracy",
                aliases=("sklearn-digits",), embedded=True),
    DatasetSpec("CIFAR10", "images", ("image",), "official-test+val-5000", "cifar-10-batches-py",
                tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",), "accuracy",
                aliases=("cifar-10", "cifar")),
)

_BY_NAME: dict[str, DatasetSpec] = {}
for _s in _SPECS:
    for _n in (_s.name, *_s.aliases):
        _BY_NAME[_n.lower().replace("_", "-")] = _s


def all_datasets() -> tuple[DatasetSpec, ...]:
    """Every registered dataset, in display order."""
    return _SPECS


def graphqa_spec(task: str) -> DatasetSpec:
    """The generated ``graphqa:<task>`` dataset (see :mod:`xmask_cli.data.graphqa`)."""
    from xmask_cli.data.graphqa import TASKS

    task = task.strip().lower().replace("-", "_")
    if task not in TASKS:
        close = difflib.get_close_matches(task, TASKS, n=1)
        hint = f"did you mean 'graphqa:{close[0]}'? " if close else ""
        raise UsageError(f"unknown GraphQA task '{task}': {hint}tasks: {', '.join(TASKS)}")
    return DatasetSpec(f"graphqa:{task}", "graphqa", ("graph",), "fixed-8-1-1", f"graphqa-{task}", (), "accuracy",
                       embedded=True)


def get_dataset(name: str) -> DatasetSpec:
    """Look a dataset up by name or alias, ignoring case; unknown names fail with a suggestion.

    ``graphqa:<task>`` names a generated structural-reasoning dataset; a value holding ``/`` or
    starting with ``.`` or ``~`` is a folder of files (:func:`xmask_cli.data.folder.folder_spec`).
    """
    if is_folder_ref(name):
        return folder_spec(name)
    if name.strip().lower().startswith("graphqa:"):
        return graphqa_spec(name.split(":", 1)[1])
    key = name.strip().lower().replace("_", "-")
    if key in _BY_NAME:
        return _BY_NAME[key]
    close = difflib.get_close_matches(key, list(_BY_NAME), n=1, cutoff=0.6)
    hint = f"did you mean '{_BY_NAME[close[0]].name}'? " if close else ""
    names = ", ".join(s.name for s in _SPECS)
    raise UsageError(f"unknown dataset '{name}': {hint}known: {names}, graphqa:<task>, or a folder of files "
                     f"as ./{name} (see docs/datasets-from-files.md)")
