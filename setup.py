"""Package discovery: every subpackage of xmask_cli (metadata and options live in pyproject.toml)."""

from setuptools import find_packages, setup

# presets/ is mapped into the package as xmask_cli.presets by pyproject's package-dir.
setup(packages=find_packages(include=["xmask_cli", "xmask_cli.*"]) + ["xmask_cli.presets"])
