"""The package's typing keeps to budgets that only go down: a typed contract, once typed, stays typed.

* An AST walk over ``xmask_cli/engine/**.py`` counts the functions (and methods) whose parameter or return
  annotations mention ``typing.Any``, quoted annotations included.
* mypy checks the whole package (``files`` is ``xmask_cli``, nothing excluded), and pyproject.toml's
  ``[tool.mypy]`` overrides may switch error codes off only in the modules listed in
  :data:`DISABLED_CEILING`, and only those codes. The list must match pyproject exactly, so fixing a
  module means shrinking its entry here too, and a module cannot later slip back.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "xmask_cli" / "engine"

#: Functions under xmask_cli/engine whose signature mentions Any. Lower it when a signature is typed;
#: never raise it (type the new code instead).
BUDGET = 16


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



#: Module (as pyproject's overrides name it) -> the mypy error codes it may have switched off: none. Every
#: module is checked with every code; never add one (type the code instead).
DISABLED_CEILING: dict[str, frozenset[str]] = {}


def disabled_codes(pyproject: dict) -> dict[str, frozenset[str]]:
    """Module pattern -> error codes switched off for it by ``[[tool.mypy.overrides]]`` (``ignore_errors``
    counts as every code, spelled ``*``)."""
    out: dict[str, set[str]] = {}
    for override in pyproject.get("tool", {}).get("mypy", {}).get("overrides", []):
        modules = override.get("module", [])
        modules = [modules] if isinstance(modules, str) else modules
        codes = set(override.get("disable_error_code", []))
        if override.get("ignore_errors"):
            codes.add("*")
        for module in modules:
            if codes:
                out.setdefault(module, set()).update(codes)
    return {module: frozenset(codes) for module, codes in out.items()}


def over_ceiling(found: dict[str, frozenset[str]], ceiling: dict[str, frozenset[str]]) -> list[str]:
    """What ``found`` switches off beyond ``ceiling``: ``module: code, ...`` per offending module."""
    return [f"{module}: {', '.join(sorted(codes - ceiling.get(module, frozenset())))}"
            for module, codes in sorted(found.items()) if codes - ceiling.get(module, frozenset())]


def _toml(text: str) -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the lint job runs there
    return tomllib.loads(text)


def _pyproject() -> dict:
    return _toml((ROOT / "pyproject.toml").read_text())


def test_disabled_codes_read_from_overrides():
    pyproject = _toml('''
[tool.mypy]
files = ["pkg"]
disable_error_code = ["global-is-not-a-module-override"]
[[tool.mypy.overrides]]
module = ["numpy.*"]
ignore_missing_imports = true
[[tool.mypy.overrides]]
module = ["pkg.a", "pkg.b"]
disable_error_code = ["index", "misc"]
[[tool.mypy.overrides]]
module = "pkg.b"
disable_error_code = ["operator"]
[[tool.mypy.overrides]]
module = "pkg.c.*"
ignore_errors = true
''')
    found = disabled_codes(pyproject)
    assert found == {"pkg.a": {"index", "misc"}, "pkg.b": {"index", "misc", "operator"}, "pkg.c.*": {"*"}}
    ceiling = {"pkg.a": frozenset({"index", "misc"}), "pkg.b": frozenset({"misc"})}
    assert over_ceiling(found, ceiling) == ["pkg.b: index, operator", "pkg.c.*: *"]
    assert over_ceiling({"pkg.a": frozenset({"index"})}, ceiling) == []


def test_mypy_disables_no_code_beyond_the_ceiling():
    found = disabled_codes(_pyproject())
    too_many = over_ceiling(found, DISABLED_CEILING)
    assert not too_many, ("pyproject.toml switches mypy codes off beyond the ceiling; fix the type errors "
                          "instead:\n" + "\n".join(too_many))
    # The ratchet: a module (or code) fixed in pyproject comes off the ceiling too, so it cannot come back.
    stale = over_ceiling(DISABLED_CEILING, found)
    assert not stale, ("these modules pass without the codes the ceiling still allows them; remove them from "
                       "DISABLED_CEILING:\n" + "\n".join(stale))


def test_mypy_checks_the_whole_package():
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["files"] == ["xmask_cli"], f"mypy's files must be the whole package, got {mypy['files']}"
    assert "exclude" not in mypy, f"mypy excludes {mypy['exclude']}: check those modules instead"
    for override in mypy.get("overrides", []):
        modules = override.get("module", [])
        ours = [m for m in ([modules] if isinstance(modules, str) else modules) if m.startswith("xmask_cli")]
        assert not (ours and override.get("follow_imports") == "skip"), f"{ours} skipped by follow_imports"


def test_no_inline_mypy_switches():
    """A ``# mypy:`` comment in a module would switch codes off outside pyproject's overrides."""
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "xmask_cli").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if line.lstrip().startswith("# mypy:")]
    assert not found, "inline mypy configuration; use pyproject.toml (and the ceiling here):\n" + "\n".join(found)
