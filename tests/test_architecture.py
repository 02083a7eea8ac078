"""Import direction: ARCHITECTURE.md's layer diagram, as data, checked over every import of xmask_cli.

An AST walk reads every ``import`` of an ``xmask_cli`` module, at module level and inside functions, and
fails on an import that points up the diagram, on an import cycle between modules, and on an import
inside a function that is not in the short list of lazy imports with a reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "xmask_cli"

# The diagram: each layer and the layers right below it. A layer may import every layer it reaches
# through these arrows, and the leaves. Layer = the first name below xmask_cli (``engine`` for
# ``xmask_cli.engine.tasks.node``; ``api`` for ``xmask_cli.api``).
BELOW: dict[str, set[str]] = {
    "__main__": {"cli"},
    "cli": {"render", "api", "ablate", "explain", "export", "tune"},
    "render": {"cache"},
    "api": {"engine", "explain"},
    "transforms": {"prepare"},
    "nn": {"model", "api"},
    "ablate": {"engine"},
    "explain": {"engine"},
    "export": {"engine"},
    "tune": {"engine"},
    "engine": {"prepare", "model"},
    "prepare": {"cache", "model"},
    "cache": {"data", "structure"},
    "model": {"structure"},
    "data": set(),
    "structure": set(),
}
# Read by every layer; a leaf imports only leaves. (``xmask_cli`` itself: the package's __init__, which
# holds the version and loads the API's names on first use.)
LEAVES = {"arguments", "config", "config_arch", "config_build", "config_presets", "config_resolve", "config_rules", "config_section",
          "config_structure",
          "config_space", "errors", "fs", "jsonfile", "console", "results", "results_ablation", "versions", "xmask_cli"}

# Imports inside functions are allowed for start-up time (a command loads its library only when it runs,
# so `xmask --help` does not load torch) and for optional dependencies. Importer modules (or packages,
# ending in ".") where they are allowed, each with its reason:
LAZY_ALLOWED: dict[str, str] = {
    "xmask_cli.cli.": "start-up time: each command imports its library when it runs",
    "xmask_cli.render.": "start-up time: a renderer is imported by the CLI before any work",
    "xmask_cli.api": "start-up time: `import xmask_cli` and the CLI's option parsing (choose_preset) load no "
                     "torch; train and load_run load the engine when called",
    "xmask_cli.cache.reader": "start-up time: `xmask cache` reads files without numba/scipy; dense_spd loads "
                              "structure/ when called",
    "xmask_cli.data.load": "start-up time: GraphQA sets are built with torch; the other sets load without it",
    "xmask_cli.data.registry": "start-up time: the registry names GraphQA tasks without loading torch",
    "xmask_cli.prepare.needs": "start-up time: prepare (and its block workers) load no torch; the model's rules "
                               "load when a config is read",
    "xmask_cli.nn.from_run": "start-up time: from_run of a run folder reads it through the API (load_run: the "
                             "engine) only when called",
    "xmask_cli.tune.space": "start-up time: the CLI's tune command parses its space without the engine (torch); "
                            "the full check against training's rules loads it",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool

    def where(self) -> str:
        return f"{self.importer.replace('.', '/')}.py:{self.line}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str:
    """The module an import of ``name`` loads: ``name`` itself, or the longest module prefix of it."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                # `from pkg import sub` loads the submodule pkg.sub when there is one.
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in child.names]
            for t in targets:
                if t == "xmask_cli" or t.startswith("xmask_cli."):
                    out.append(Import(module, _resolve(t), child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


IMPORTS = sorted({i for m in MODULES for i in _imports(m) if i.imported != i.importer}, key=lambda i: (i.where(), i.imported))


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for below in BELOW.get(todo.pop(), set()):
            if below not in seen:
                seen.add(below)
                todo.append(below)
    return seen


def _allowed(importer: str, imported: str) -> bool:
    a, b = layer(importer), layer(imported)
    if a == b:
        return True
    if b in LEAVES:
        return True
    return a not in LEAVES and b in _reach(a)


def test_every_module_is_in_a_layer_and_the_diagram_has_no_cycle():
    layers = {layer(m) for m in MODULES}
    unknown = layers - set(BELOW) - LEAVES
    assert not unknown, f"modules in no layer of the diagram (add them to BELOW or LEAVES): {sorted(unknown)}"
    for name in BELOW:
        assert name not in _reach(name), f"the diagram itself has a cycle through {name}"


def test_imports_point_down_the_diagram():
    wrong = [i for i in IMPORTS if not _allowed(i.importer, i.imported)]
    assert not wrong, "imports that point up ARCHITECTURE.md's diagram (a layer imports only layers below it):\n" + "\n".join(
        f"  {i.where()}: {layer(i.importer)} imports {i.imported} ({layer(i.imported)})" for i in wrong)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as a list of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def _path(edges: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle inside a component, from its first module back to it (breadth first)."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges.get(v, ())):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w in members and w not in prev:
                prev[w] = v
                todo.append(w)
    return comp


def test_no_import_cycles():
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        edges.setdefault(i.importer, set()).add(i.imported)
    cycles = _cycles(edges)
    assert not cycles, "import cycles (module-level and function-level imports both count):\n" + "\n".join(
        "  " + " -> ".join(_path(edges, c)) for c in cycles)


def _lazy_allowed(module: str) -> bool:
    return any(module == k or (k.endswith(".") and module.startswith(k)) for k in LAZY_ALLOWED)


def test_imports_inside_functions_only_where_allowed():
    lazy = [i for i in IMPORTS if i.in_function and not _lazy_allowed(i.importer)]
    assert not lazy, ("imports of xmask_cli inside functions, outside LAZY_ALLOWED (start-up time, optional "
                      "dependencies): import at module level, or move what both modules share so there is "
                      "no cycle to hide:\n" + "\n".join(f"  {i.where()}: imports {i.imported}" for i in lazy))
    stale = {k for k in LAZY_ALLOWED if not any(i.in_function and (i.importer == k or (k.endswith(".") and
                                                  i.importer.startswith(k))) for i in IMPORTS)}
    assert not stale, f"LAZY_ALLOWED names modules without function-level imports, remove them: {sorted(stale)}"


def test_the_walk_sees_module_and_function_level_imports():
    """The walk itself, on two imports whose presence ARCHITECTURE.md describes."""
    got = {(i.importer, i.imported, i.in_function) for i in IMPORTS}
    assert ("xmask_cli.cli.app", "xmask_cli", False) in got  # the version, at module level
    assert any(i.importer.startswith("xmask_cli.cli.") and i.in_function for i in IMPORTS)


def test_the_checks_refuse_an_upward_import_and_find_a_cycle():
    """The rules on hand-made cases: model may not import engine, engine may import model, config nothing above."""
    assert not _allowed("xmask_cli.model.network", "xmask_cli.engine.training.loop")
    assert _allowed("xmask_cli.engine.training.loop", "xmask_cli.model.network")
    assert _allowed("xmask_cli.cli.train", "xmask_cli.cache.reader")  # cli -> api -> engine -> prepare -> cache
    assert not _allowed("xmask_cli.config", "xmask_cli.model.biases")
    assert not _allowed("xmask_cli.structure.powers", "xmask_cli.data.load")
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _path(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": set()}) == []
