"""The distribution as the package index sees it: its own name (the index's ``xmask`` is another project) in
every install hint, loose pins, ogb an extra, the licence, the typing marker, and typer's public API only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from xmask_cli.versions import DISTRIBUTION

tomllib = pytest.importorskip("tomllib", reason="pyproject.toml is read with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: A pip install line naming the bare ``xmask`` (``xmask``, ``"xmask[tensorboard]"``, ``-U xmask``), not
#: ``xmask-cli`` nor a path such as ``./xmask_src``.
BARE = re.compile(r"""pip3?\s+install\b[^\n`&;|]*?(?<![\w./-])["']?xmask(?![\w-])""")


def _texts() -> dict[str, str]:
    """README, the docs, the code's messages and CI; the generated CLI reference as the generator writes it
    (tests/cli/test_reference.py holds docs/cli.md to that)."""
    from xmask_cli.cli.reference import render

    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "xmask_cli").rglob("*.py")),
             ROOT / ".ci" / "run"]
    return {**{str(p.relative_to(ROOT)): p.read_text() for p in paths}, "docs/cli.md": render()}


def test_the_bare_name_pattern_catches_what_it_should():
    for bad in ('pip install "xmask[tensorboard]"', "pip install xmask", "pip install -U 'xmask[parquet]'",
                "pip3 install --user xmask==0.1", "pip install torch && pip install xmask"):
        assert BARE.search(bad), bad
    for good in ('pip install "xmask-cli[tensorboard]"', "pip install .", "pip install xmask-cli",
                 "pip install ./xmask_src", 'pip install ".[test]" && xmask train'):
        assert not BARE.search(good), good


def test_no_message_or_page_installs_the_bare_name():
    found = [f"{name}: {m.group(0)}" for name, text in _texts().items() for m in BARE.finditer(text)]
    assert not found, found


def test_the_distribution_is_named_xmask_cli_and_ships_its_licence_and_types():
    assert PROJECT["name"] == DISTRIBUTION == "xmask-cli"
    assert PROJECT["scripts"] == {"xmask": "xmask_cli.cli:main"}
    assert PROJECT["license"] == {"text": "MIT"} and "MIT License" in (ROOT / "LICENSE").read_text()
    assert "License :: OSI Approved :: MIT License" in PROJECT["classifiers"]
    assert "Operating System :: POSIX" in PROJECT["classifiers"]  # fcntl locks: no Windows
    assert (ROOT / "xmask_cli" / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["xmask_cli"]


def _requirement(name: str, reqs: list[str]) -> str:
    (req,) = [r for r in reqs if re.match(rf"{name}\b", r, flags=re.I) and not r[len(name):][:1].isalnum()]
    return req


def test_pins_are_loose_and_ogb_is_an_extra():
    deps = PROJECT["dependencies"]
    assert _requirement("torch_geometric", deps) == "torch_geometric>=2.6"  # no upper cap
    assert _requirement("typer", deps) == "typer>=0.29,<1.0"
    assert _requirement("optuna", deps).startswith("optuna>=4.0")
    assert not [r for r in deps if r.lower().startswith("ogb")]
    extras = PROJECT["optional-dependencies"]
    assert [r for r in extras["ogb"] if r.startswith("ogb")] and [r for r in extras["test"] if r.startswith("ogb")]


def test_the_cli_uses_typers_public_api_only():
    """No module path of click (typer vendors it as typer._click) and no lookup of typer's modules by name."""
    for path in sorted((ROOT / "xmask_cli").rglob("*.py")):
        text = path.read_text()
        assert "_click" not in text and "import click" not in text and "sys.modules[typer" not in text, path
