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
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]  # SPDX, not a classifier
    assert "MIT License" in (ROOT / "LICENSE").read_text()
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


def _setup_module():
    """setup.py as a module (its ``setup()`` runs only as a script)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("xmask_setup", ROOT / "setup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_text_turns_relative_images_and_links_into_captions_and_paths():
    index_readme = _setup_module().index_readme
    text = ("![A, in layer 0](docs/img/a.png)\n![remote](https://example.org/b.png) see [the page](docs/x.md#part),\n"
            "[docs/y.md](docs/y.md), [`docs/z.md`](docs/z.md), [up](#commands) and [site](https://example.org/).")
    assert index_readme(text).splitlines() == [
        "*Figure (`docs/img/a.png` in the source distribution): A, in layer 0*",
        "![remote](https://example.org/b.png) see the page (`docs/x.md#part`),",
        "`docs/y.md`, `docs/z.md`, [up](#commands) and [site](https://example.org/).",
    ]


def _built_metadata(tmp_path: Path) -> str:
    """The METADATA file setuptools builds for the wheel, from a copy of the source tree (no egg-info here)."""
    import shutil
    import subprocess
    import sys

    src = tmp_path / "src"
    keep = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.h5")
    for name in ("xmask_cli", "presets"):
        shutil.copytree(ROOT / name, src / name, ignore=keep)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, src / name)
    (tmp_path / "meta").mkdir()
    code = "import sys; from setuptools import build_meta as b; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "meta")], cwd=src, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return (tmp_path / "meta" / done.stdout.split()[-1] / "METADATA").read_text(encoding="utf-8")


def test_the_built_long_description_is_the_readme_with_no_relative_image_or_link(tmp_path):
    """What the package index shows: README.md line for line, where each line without a link is unchanged, each
    figure is its caption and path, and no image or link points at a relative path (it would break there)."""
    import email

    meta = email.message_from_string(_built_metadata(tmp_path))
    assert meta["Name"] == DISTRIBUTION and meta["Description-Content-Type"] == "text/markdown"
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    description = meta.get_payload()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    got, want = description.strip("\n").splitlines(), readme.strip("\n").splitlines()
    assert len(got) == len(want)
    for line, original in zip(got, want):
        if "](" not in original:
            assert line == original
    def targets(text: str) -> list[str]:
        return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"""src=["']([^"']+)""", text)

    assert [t for t in targets(readme) if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:|#", t)]  # what there is to fix
    assert all(re.match(r"[A-Za-z][A-Za-z0-9+.-]*:|#", t) for t in targets(description)), targets(description)
    figures = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", readme)
    assert figures
    for caption, path in figures:
        assert f"*Figure (`{path}` in the source distribution): {caption}*" in description
        assert (ROOT / path).is_file()  # and MANIFEST.in ships it in the sdist
