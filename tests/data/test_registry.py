"""Dataset registry: names, aliases, levels, splits."""
from __future__ import annotations

import pytest

from xmask_cli.data.registry import all_datasets, get_dataset
from xmask_cli.errors import UsageError

EXPECTED = {
    "Cora": "node", "CiteSeer": "node", "PubMed": "node", "Computers": "node", "Photo": "node", "CS": "node",
    "Physics": "node", "WikiCS": "node", "MUTAG": "graph", "PROTEINS": "graph", "NCI1": "graph", "DD": "graph",
    "IMDB-BINARY": "graph", "COLLAB": "graph", "ogbg-molhiv": "graph", "digits": "image", "CIFAR10": "image",
    "ogbn-arxiv": "node", "ogbn-products": "node",
}


def test_every_required_dataset_is_registered_with_its_level():
    got = {s.name: s.level for s in all_datasets()}
    assert got == EXPECTED


@pytest.mark.parametrize(
    "query, name",
    [("cora", "Cora"), ("CORA", "Cora"), ("citeseer", "CiteSeer"), ("molhiv", "ogbg-molhiv"),
     ("ogbg_molhiv", "ogbg-molhiv"), ("imdb-b", "IMDB-BINARY"), ("amazon-computers", "Computers"),
     ("coauthor-physics", "Physics"), ("d&d", "DD"), (" mutag ", "MUTAG"), ("cifar-10", "CIFAR10"),
     ("cifar10", "CIFAR10"), ("Digits", "digits")],
)
def test_lookup_is_case_insensitive_with_aliases(query, name):
    assert get_dataset(query).name == name


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UsageError, match="unknown dataset 'protiens': did you mean 'PROTEINS'"):
        get_dataset("protiens")


def test_default_splits_follow_the_protocols():
    assert get_dataset("cora").split == "public"
    assert get_dataset("wikics").split == "official-0"
    assert get_dataset("photo").split == "random-60-20-20"
    assert get_dataset("nci1").split == "random-8-1-1"
    assert get_dataset("molhiv").split == "scaffold"
    assert get_dataset("molhiv").metric == "rocauc"


def test_node_datasets_also_serve_link_prediction():
    assert "link" in get_dataset("cora").levels
    assert get_dataset("mutag").levels == ("graph",)
