"""A dataset entry's derived names (its default level, the reference that finds it again, its folder key) and
the files of a TU-format graph set."""
from __future__ import annotations

from pathlib import Path

from xmask_cli.data.spec import DatasetSpec, tu_raw_files


def _spec(**kw: object) -> DatasetSpec:
    base: dict = {"name": "ogbg-molhiv", "family": "ogbg", "levels": ("graph", "node"), "split": "scaffold",
                  "folder": "ogbg_molhiv", "raw_files": (), "metric": "rocauc"}
    return DatasetSpec(**{**base, **kw})


def test_the_first_level_is_the_default() -> None:
    assert _spec().level == "graph"
    assert _spec(levels=("node",)).level == "node"


def test_ref_is_the_name_a_folder_path_or_the_root_joined_with_the_folder(tmp_path: Path) -> None:
    """A registry name finds itself; a user's folder its absolute path; a TU set given by path ``root/folder``."""
    assert _spec().ref == "ogbg-molhiv"
    assert _spec(family="folder", name="mine", folder=str(tmp_path / "mine")).ref == str(tmp_path / "mine")
    assert _spec(family="tu", name="MUTAG", folder="MUTAG", root="./sets").ref == str(Path("./sets") / "MUTAG")


def test_key_is_lower_case_without_colons() -> None:
    assert _spec(name="GraphQA:Cycle").key == "graphqa-cycle"
    assert _spec().key == "ogbg-molhiv"


def test_tu_raw_files_are_the_three_files_of_the_tu_format() -> None:
    assert tu_raw_files("MUTAG") == ("raw/MUTAG_A.txt", "raw/MUTAG_graph_indicator.txt",
                                     "raw/MUTAG_graph_labels.txt")
