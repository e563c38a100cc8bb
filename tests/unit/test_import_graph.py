"""No import circle among dpspark's modules, at module level or through an import inside a function.

The module-level imports (``TYPE_CHECKING`` blocks left out) form an acyclic graph, so each layer (params,
mechanisms, engines, Spark runners, the CLI) imports only those below it. An import inside a function runs
on call, so it cannot fail at import time, but one that reaches a module above its own closes the same loop
by another door: the layers then depend on each other, and the order of imports decides what works. So the
graph with the imports inside functions added must be acyclic too.

Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py`` first: an import reaches each
package above its target too, except the packages above the importing module itself (being initialised
by then, not run again); a package an import names itself (``from a import b``) is reached either way.

One exception, the lazy public API: ``dpspark/__init__.py`` resolves its public names on first use (PEP 562:
``__getattr__`` and its ``_LAZY`` table) and its public functions (``release``, ``privacy_stats``, ...)
import their implementation when called, so that ``import dpspark`` loads nothing. Every module is below
the package's ``__init__``, so these imports, and only these, are left out of the function-level graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dpspark"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[list[str], bool]]:
    """Each import statement's targets (the modules it names, and ``module.name`` for each name it takes
    from a module), with whether it sits inside a function; ``TYPE_CHECKING`` blocks left out."""
    found: list[tuple[list[str], bool]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for other in child.orelse:
                    visit_one(other, inside)
                continue
            visit_one(child, inside)

    def visit_one(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.Import):
            found.append(([a.name for a in node.names], inside))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(([node.module, *(f"{node.module}.{a.name}" for a in node.names)], inside))
        else:
            visit(node, inside or isinstance(node, FUNCTIONS))

    visit(tree, False)
    return found


def _packages_above(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def module_graph(package: Path = PACKAGE, functions: bool = False) -> dict[str, set[str]]:
    """Module → the package's modules it imports at module level (``functions``: inside functions too, but
    for the lazy public API of the package's ``__init__``)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        lazy_api = name == package.name  # the package's own __init__: names resolved on first use
        own = set(_packages_above(name))
        for targets, inside in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if inside and (not functions or lazy_api):
                continue
            above = {p for t in targets if t in modules for p in _packages_above(t)} - own
            graph[name] |= {t for t in [*targets, *above] if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert cycles(module_graph()) == []


def test_no_import_circle_through_a_function():
    assert cycles(module_graph(functions=True)) == []


def test_no_generic_module_imports_a_mechanism_family():
    """Outside ``dpspark/mechanisms/`` no module imports a family's own module (the registry's entries:
    ``mechanisms.noise``, ``mechanisms.santext_plus``, ...), at module level or inside a function: a family's
    facts reach the runners through hooks on ``MechanismSpec`` and ``WordMechanism``, and what is generic
    through ``dpspark.mechanisms``."""
    from dpspark.mechanisms.registry import ENTRIES

    families = {f"dpspark.mechanisms.{where.split(':')[0]}" for where in ENTRIES.values()}
    graph = module_graph(functions=True)
    found = {m: sorted(graph[m] & families) for m in graph if not m.startswith("dpspark.mechanisms")}
    assert {m: f for m, f in found.items() if f} == {}


def test_the_runners_import_no_spark():
    """``dpspark/run/`` (the commands' runners, over ``dpspark.run.backend.Backend``) reaches no module of
    ``dpspark.spark`` (at module level or through a function, however far down) and no module that imports
    pyspark at module level: ``dpspark.spark`` is one backend beside the runners' protocol, not under them.
    (``dpspark.device`` asks pyspark for a task's GPU inside a function, and answers None without it.)"""
    graph = module_graph(functions=True)
    spark_importers = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        imports = _imports(ast.parse(path.read_text(encoding="utf-8")))
        if any(t.split(".")[0] == "pyspark" for targets, inside in imports if not inside for t in targets):
            spark_importers.add(name)
    runners = sorted(m for m in graph if m.startswith("dpspark.run"))
    assert "dpspark.run.compare" in runners
    reached, todo = set(), list(runners)
    while todo:
        m = todo.pop()
        for t in graph[m] - reached:
            reached.add(t)
            todo.append(t)
    assert sorted(m for m in reached | set(runners) if m in spark_importers or m.startswith("dpspark.spark")) == []


def test_the_check_finds_a_circle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("from pkg.c import x\n")
    (package / "c.py").write_text("import pkg.a\nx = 1\n")
    assert cycles(module_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_check_finds_a_circle_closed_inside_a_function(tmp_path):
    """An import inside a function (or a method, or a lambda) that closes a loop fails the function-level
    check; the module-level check, a ``TYPE_CHECKING`` import and the package's lazy public API do not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("def api():\n    from pkg.low import f\n    return f()\n")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg import high\n\n"
        "class K:\n    def f(self):\n        from pkg.high import g\n        return g()\n"
    )
    (package / "high.py").write_text("from pkg.low import K\n\ndef g():\n    return 1\n")
    assert cycles(module_graph(package)) == []
    assert cycles(module_graph(package, functions=True)) == [["pkg.high", "pkg.low"]]
    (package / "low.py").write_text("from pkg import api\n")
    assert cycles(module_graph(package, functions=True)) == []  # pkg -> pkg.low -> pkg: through the lazy API only


def test_an_import_runs_the_packages_above_its_target(tmp_path):
    """``from pkg.sub.leaf import x`` runs ``pkg/sub/__init__.py`` first: a loop through a package's
    ``__init__`` is a loop (the ground floor importing the tokenizer, whose module imported the mechanisms
    package, which imported the word-file reader: found at import time, not by the graph, before this)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.leaf import x\nfrom pkg.words import read\n")
    (package / "sub" / "leaf.py").write_text("x = 1\n")
    (package / "words.py").write_text("from pkg.text import normalize\n\ndef read():\n    pass\n")
    (package / "text.py").write_text("from pkg.sub.leaf import x\n\ndef normalize():\n    pass\n")
    assert cycles(module_graph(package)) == [["pkg.sub", "pkg.text", "pkg.words"]]
    (package / "text.py").write_text("def normalize():\n    pass\n")
    assert cycles(module_graph(package)) == []
