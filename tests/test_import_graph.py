"""arch/, tokenizer/ and experiments/ each import their own modules without circles, and no module outgrows one
concept (~400 lines).

The graph is read from the source with `ast`, not from sys.modules: every `import` / `from ... import` anywhere in a
module counts, at the top, inside a function or under `if TYPE_CHECKING:`, because a function-local import only hides
a circle from the interpreter, not from the reader. Edges, for a package `pkg` (one of PACKAGES):
  * `from pkg.a import b`: to the module pkg.a.b when b is a submodule, else to pkg.a (its module or __init__);
  * `import pkg.a.b`: to pkg.a.b;
  * `from pkg import X` / `import pkg` inside pkg/: to pkg/__init__ when X is not a submodule (an __init__ that
    re-exports imports most of its package, so a package's own modules import from the defining module instead).
Importing pkg.a.b also runs pkg/a/__init__ first; that implicit parent edge is not counted (every module would
then sit on a circle through pkg/__init__). Not checked: circles between packages (each graph holds one package's
modules), and modules outside the three packages (tests/, bench/, scripts).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("arch", "tokenizer", "experiments")
MAX_LINES = 400  # past ~400 lines a module usually holds two concepts (../shared/STYLE.md, section 2)


def module_name(path: Path, root: Path) -> str:
    """tokenizer/serialize.py -> 'tokenizer.serialize'; arch/convert/__init__.py -> 'arch.convert'."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported(node: ast.AST, current: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules of `known` that one Import / ImportFrom node of module `current` imports."""
    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            parts = alias.name.split(".")
            prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]  # longest first
            out += [next(p for p in prefixes if p in known)] if any(p in known for p in prefixes) else []
        return out
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: `from . import x` / `from ..a import b`
        package = current.split(".") if is_package else current.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    out = []
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            out.append(f"{base}.{alias.name}")  # a submodule
        elif base in known:
            out.append(base)  # a name defined in (or re-exported by) the module / package __init__
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of package `root` it imports anywhere in its source (function-local and TYPE_CHECKING included)."""
    mods = modules(root)
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        targets = {t for node in ast.walk(tree) for t in imported(node, name, is_package, known)}
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_sees_function_local_type_checking_and_package_imports(tmp_path):
    """The reader itself: a circle closed only by a function-local import, one closed only under TYPE_CHECKING, and
    one through the package __init__ are all found; importing a submodule through its package is not a circle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from pkg.b import B\nA = 1\n",
        "b.py": "B = 2\ndef f():\n    from pkg.a import A\n    return A\n",  # a <-> b via a function
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\nC = 3\n",
        "d.py": "from pkg.c import C\nD = 4\n",  # c <-> d via TYPE_CHECKING
        "e.py": "from pkg import A\nE = 5\n",  # e -> pkg/__init__
        "sub/__init__.py": "from pkg.sub import x\nfrom pkg.e import E\n",  # x is a submodule: no self edge
        "sub/x.py": "from pkg import sub\n",  # `sub` is a subpackage: sub/x -> pkg.sub -> sub/x
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    assert graph["pkg.sub"] == {"pkg.sub.x", "pkg.e"}
    assert graph["pkg.e"] == {"pkg"}
    assert sorted(cycles(graph)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"], ["pkg.sub", "pkg.sub.x"]]
    (pkg / "__init__.py").write_text("from pkg.e import E\n")  # pkg/__init__ -> e -> pkg/__init__
    assert ["pkg", "pkg.e"] in cycles(import_graph(pkg))


def all_modules() -> dict[str, Path]:
    return {name: path for package in PACKAGES for name, path in modules(ROOT / package).items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_package_has_no_import_cycles(package):
    graph = import_graph(ROOT / package)
    assert package in graph and any(graph.values()), f"the reader found {package}/, its modules and their imports"
    found = cycles(graph)
    detail = "\n".join(
        "  " + ", ".join(c) + "\n" + "\n".join(f"    {m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found
    )
    assert not found, f"import circles in {package}/ (counting function-local and TYPE_CHECKING imports):\n{detail}"


@pytest.mark.parametrize("name", sorted(all_modules()))
def test_module_holds_one_concept(name):
    n_lines = len(all_modules()[name].read_text().splitlines())
    assert n_lines <= MAX_LINES, f"{name} has {n_lines} lines (> {MAX_LINES}): it probably holds two concepts; split it"
