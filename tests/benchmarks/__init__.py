"""Tests of the scripts under ``benchmarks/`` (loaded from their files: they are not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(stem: str, module_name: str | None = None) -> ModuleType:
    """Import ``benchmarks/<stem>.py`` as ``module_name`` (registered in ``sys.modules`` while loading:
    torch_geometric looks model classes up by their module's name)."""
    name = module_name or stem
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
