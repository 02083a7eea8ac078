"""The engine's function signatures keep to a budget of ``Any``: a typed contract, once typed, stays typed.

An AST walk over ``xmask_cli/engine/**.py`` counts the functions (and methods) whose parameter or return
annotations mention ``typing.Any``, quoted annotations included. The budget only goes down.
"""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "xmask_cli" / "engine"

#: Functions under xmask_cli/engine whose signature mentions Any. Lower it when a signature is typed;
#: never raise it (type the new code instead).
BUDGET = 18


def _mentions_any(annotation: ast.expr | None) -> bool:
    """Whether an annotation names ``Any`` (``Any``, ``typing.Any``, or inside a quoted annotation)."""
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                quoted = ast.parse(node.value, mode="eval").body
            except SyntaxError:  # a Literal["..."] string, not an annotation
                continue
            if _mentions_any(quoted):
                return True
    return False


def any_signatures(source: str) -> list[str]:
    """``name:line`` of every function in ``source`` whose parameters or return annotation mention ``Any``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
        if any(_mentions_any(p.annotation) for p in params) or _mentions_any(node.returns):
            found.append(f"{node.name}:{node.lineno}")
    return found


def engine_any_signatures() -> list[str]:
    """:func:`any_signatures` over every module of the engine, each entry prefixed with its file."""
    return [f"{path.relative_to(ENGINE.parent)}:{hit}" for path in sorted(ENGINE.rglob("*.py"))
            for hit in any_signatures(path.read_text())]


def test_counter_finds_any_in_parameters_returns_and_quoted_annotations():
    source = '''
import typing
from typing import Any, Literal

def plain(x: int, *args: str, **kw: float) -> list[int]: ...
def param(x: Any) -> int: ...
def returns() -> dict[str, Any]: ...
def dotted(x: typing.Any) -> None: ...
def quoted(x: "list[Any]") -> None: ...
def star(*args: Any) -> None: ...
def double_star(**kw: Any) -> None: ...
def keyword_only(*, x: int | Any) -> None: ...
def positional_only(x: Any, /) -> None: ...
async def coroutine() -> Any: ...
def look_alike(x: Anything, y: Literal["Any thing"]) -> AnyStr: ...
def untyped(x, y=1): ...

class Holder:
    def method(self, x: Any) -> None:
        def inner() -> Any: ...
    def fine(self) -> object: ...
'''
    assert sorted(any_signatures(source)) == sorted([
        "param:6", "returns:7", "dotted:8", "quoted:9", "star:10", "double_star:11", "keyword_only:12",
        "positional_only:13", "coroutine:14", "method:19", "inner:20",
    ])


def test_engine_signatures_keep_to_the_any_budget():
    assert len(list(ENGINE.rglob("*.py"))) > 20, f"no engine modules under {ENGINE}"
    hits = engine_any_signatures()
    assert len(hits) <= BUDGET, (f"{len(hits)} engine signatures mention Any, over the budget of {BUDGET}; "
                                 f"type the new ones:\n" + "\n".join(hits))
