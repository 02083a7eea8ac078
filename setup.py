"""Package discovery (every subpackage of xmask_cli; metadata and options live in pyproject.toml) and the long
description the package index shows: README.md with its figures and relative links, which the index cannot
show (they resolve against the repository, and the project has no public address), as their captions and
paths in the source distribution (MANIFEST.in ships the pages and figures they name)."""
from __future__ import annotations

import re
from pathlib import Path

from setuptools import find_packages, setup

#: ``![caption](path)`` with a relative path (no ``scheme:``).
IMAGE = re.compile(r"!\[([^\]]*)\]\(((?![A-Za-z][A-Za-z0-9+.-]*:)[^)\s]+)\)")
#: ``[text](path)`` with a relative path, not an image, not an in-page ``#anchor``.
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(((?![A-Za-z][A-Za-z0-9+.-]*:|#)[^)\s]+)\)")


def index_readme(text: str) -> str:
    """README text for the package index: each relative image becomes its caption, marked as a figure with
    its path in the source distribution; each relative link its text and that path."""
    def figure(m: re.Match[str]) -> str:
        return f"*Figure (`{m.group(2)}` in the source distribution): {m.group(1)}*"

    def link(m: re.Match[str]) -> str:
        text, path = m.group(1), m.group(2)
        return f"`{path}`" if text.strip("`") == path else f"{text} (`{path}`)"

    return LINK.sub(link, IMAGE.sub(figure, text))


if __name__ == "__main__":
    readme = (Path(__file__).resolve().parent / "README.md").read_text(encoding="utf-8")
    # presets/ is mapped into the package as xmask_cli.presets by pyproject's package-dir.
    setup(packages=find_packages(include=["xmask_cli", "xmask_cli.*"]) + ["xmask_cli.presets"],
          long_description=index_readme(readme), long_description_content_type="text/markdown")
