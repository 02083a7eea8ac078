"""The house's size rule on ``xmask_cli/tune/``: every module under 450 lines, every function under 80."""
from __future__ import annotations

import ast
from pathlib import Path

import xmask_cli.tune

PACKAGE = Path(xmask_cli.tune.__file__).parent
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80


def test_every_tune_module_and_function_is_within_the_house_sizes():
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) >= MAX_MODULE_LINES:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines")
    assert len(list(PACKAGE.glob("*.py"))) >= 10  # the walk sees the package
    assert not too_long, too_long
