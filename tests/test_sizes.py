"""The house's size rule: every module of xmask_cli/ under 450 lines, every function under 80.

Why: a module past a few hundred lines has stopped doing one job, and a function past a screen or so
is several steps that want names; both are where the next change goes wrong. The rule is measured on
the source as committed (docstrings and comments count: they are read too).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xmask_cli"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function or method in ``source`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_and_functions_are_small(module: Path) -> None:
    source = module.read_text()
    assert source.count("\n") <= MAX_MODULE_LINES, f"{module.name}: {source.count(chr(10))} lines"
    assert long_functions(source, MAX_FUNCTION_LINES) == []


def test_long_function_rule_on_hand_made_source() -> None:
    """Decorated, nested and async functions are measured from their def to their last line."""
    body = "".join(f"        x{i} = {i}\n" for i in range(5))
    source = ("def short():\n    return 0\n\n\nclass A:\n    @staticmethod\n    async def m():\n"
              f"{body}{body}        return 1\n")
    assert long_functions(source, 6) == [("m", 12)]  # def line, ten assignments, return
    assert long_functions(source, 12) == []
