"""The import graph of the first-party code, read with the standard library's ast (nothing imported).

Two rules: no import cycle (a lazy import inside a function counts: it is still a dependency, and a
cycle of lazy imports is one refactor away from an ImportError); and the core (tidemark/ outside the
adapters: commands/ and cli.py, demo/, devstack/) imports no adapter, so the stream, the DAG, the
function and the CLI all call the same domain code and the function bundle and Composer can ship
tidemark/ alone.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tidemark", "streaming_job", "dags", "cloud_function", "dedup_sql")
ADAPTERS = ("streaming_job", "dags", "cloud_function", "tidemark.commands", "tidemark.cli")
NOT_CORE = ("tidemark.commands", "tidemark.cli", "tidemark.demo", "tidemark.devstack")


def first_party_modules(root: str = ROOT) -> dict[str, str]:
    """{dotted module name: file}; a package is named by its __init__.py."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(root, package)):
            for name in files:
                if name.endswith(".py"):
                    dotted = os.path.relpath(os.path.join(folder, name), root)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = os.path.join(folder, name)
    return found


def imports_of(module: str, path: str, known: dict[str, str]) -> set[str]:
    """First-party modules `module` imports anywhere in its text (top level or inside functions)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level-1 packages
                package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:  # `from pkg import mod` imports pkg.mod when that is a module
                named.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif isinstance(node, ast.Call) and _dynamic_import(node) and node.args:
            named.update(_dynamic_targets(node.args[0], known))
    resolved = set()
    for name in named:
        while name and name not in known:  # `import tidemark.x.y` where y is a class: tidemark.x
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.add(name)
    return resolved


def _dynamic_import(call: ast.Call) -> bool:
    """importlib.import_module(...), import_module(...) or __import__(...)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def _dynamic_targets(arg: ast.expr, known: dict[str, str]) -> set[str]:
    """What a dynamic import can load: a literal name, or every module under an f-string's literal
    prefix (`f"tidemark.commands.{name}"` may load any command module)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        prefix = str(arg.values[0].value)
        return {module for module in known if module.startswith(prefix)} if "." in prefix else set()
    return set()


def import_graph(root: str = ROOT) -> dict[str, set[str]]:
    known = first_party_modules(root)
    return {module: imports_of(module, path, known) for module, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def core_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    return {
        module: sorted(t for t in targets if _under(t, ADAPTERS))
        for module, targets in sorted(graph.items())
        if _under(module, ("tidemark",)) and not _under(module, NOT_CORE) and any(_under(t, ADAPTERS) for t in targets)
    }


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_is_read(graph):
    assert "tidemark.commands.console" in graph["tidemark.commands.status"]
    # the CLI loads its command modules with importlib.import_module(f"tidemark.commands.{name}")
    assert {"tidemark.commands.stream", "tidemark.commands.dedup"} <= graph["tidemark.cli"]
    assert "tidemark.panes.receipts" in graph["streaming_job.batch"]
    assert "tidemark.base.layout" in graph["tidemark.panes.receipts"]


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_the_core_imports_no_adapter(graph):
    assert core_violations(graph) == {}


def test_the_checks_find_what_they_look_for():
    """The checks themselves, on a graph with the defects this tree used to have."""
    bad = {
        "tidemark.commands.status": {"tidemark.commands.up"},
        "tidemark.commands.up": {"tidemark.commands.status"},
        "tidemark.iceberg.reader": {"streaming_job.receipts", "tidemark.base.layout"},
        "tidemark.devstack.stack": {"tidemark.commands.function_bundle"},
        "tidemark.base.layout": set(),
    }
    assert cycles(bad) == [["tidemark.commands.status", "tidemark.commands.up"]]
    known = {"tidemark.cli": "", "tidemark.commands.up": "", "tidemark.commands.down": "", "tidemark.base.layout": ""}
    dynamic = ast.parse(
        "import importlib\n"
        "def load(name):\n"
        "    importlib.import_module(f'tidemark.commands.{name}')\n"
        "    __import__('tidemark.base.layout')\n"
    )
    found = set()
    for node in ast.walk(dynamic):
        if isinstance(node, ast.Call) and _dynamic_import(node):
            found |= _dynamic_targets(node.args[0], known)
    assert found == {"tidemark.commands.up", "tidemark.commands.down", "tidemark.base.layout"}
    assert core_violations(bad) == {"tidemark.iceberg.reader": ["streaming_job.receipts"]}


def commands_importers(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """tidemark/ modules outside the CLI that import a command module: a command is an adapter, not
    a library. (Entry points such as streaming_job/submit.py, spark-submit's, may call the CLI.)"""
    cli = ("tidemark.commands", "tidemark.cli")
    return {
        module: sorted(t for t in targets if _under(t, cli))
        for module, targets in sorted(graph.items())
        if _under(module, ("tidemark",)) and not _under(module, cli) and any(_under(t, cli) for t in targets)
    }


def test_only_the_cli_imports_commands(graph):
    assert commands_importers(graph) == {}
    assert commands_importers({"tidemark.devstack.stack": {"tidemark.commands.function_bundle"}}) == {
        "tidemark.devstack.stack": ["tidemark.commands.function_bundle"]
    }


def importers_of_test_modules(root: str = ROOT) -> dict[str, list[str]]:
    """{tests/ file: the test modules it imports}: shared test code lives in tests/helpers.py and the
    *kit.py modules, so running or changing one test module never depends on another."""
    folder = os.path.join(root, "tests")
    known = {
        f"tests.{name[:-3]}": os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.endswith(".py") and name != "__init__.py"
    }
    found = {}
    for module, path in sorted(known.items()):
        hits = sorted(
            t for t in imports_of(module, path, {**known, "tests": folder}) if t.rpartition(".")[2].startswith("test_")
        )
        if hits:
            found[os.path.basename(path)] = hits
    return found


def test_no_test_module_imports_another(tmp_path):
    assert importers_of_test_modules() == {}
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def helper():\n    pass\n")
    (tmp_path / "tests" / "test_b.py").write_text("from tests.test_a import helper\nfrom tests import lakekit\n")
    (tmp_path / "tests" / "test_c.py").write_text("from .test_a import helper\nimport tests.helpers\n")
    (tmp_path / "tests" / "test_d.py").write_text("from tests import test_a\n")
    assert importers_of_test_modules(str(tmp_path)) == {
        "test_b.py": ["tests.test_a"],
        "test_c.py": ["tests.test_a"],
        "test_d.py": ["tests.test_a"],
    }


# Units of the package-level graph: each top-level package, with tidemark/ split by package
# (the CLI's modules, the dev stack, the demo, and each package of the core: a loop between two
# stages fails as a loop between top-level packages does).
UNITS = (
    ("tidemark.cli", "tidemark CLI"),
    ("tidemark.__main__", "tidemark CLI"),
    ("tidemark.commands", "tidemark CLI"),
    ("tidemark.devstack", "tidemark devstack"),
    ("tidemark.demo", "tidemark demo"),
    ("tidemark.base", "tidemark base"),
    ("tidemark.store", "tidemark store"),
    ("tidemark.ingest", "tidemark ingest"),
    ("tidemark.session", "tidemark session"),
    ("tidemark.panes", "tidemark panes"),
    ("tidemark.iceberg", "tidemark iceberg"),
    ("tidemark.orchestration", "tidemark orchestration"),
    ("tidemark.notices", "tidemark notices"),
    ("tidemark.deduplication", "tidemark deduplication"),
    ("tidemark.ops", "tidemark ops"),
    ("tidemark.products", "tidemark products"),
    ("tidemark", "tidemark core"),
)


# Scripts a launcher runs by path, which no module imports: they are where the import graph starts,
# not members of the package whose folder holds them. streaming_job/submit.py is spark-submit's way
# into tidemark's CLI (the design keeps the Spark jobs' entry in streaming_job/).
ENTRY_SCRIPTS = {"streaming_job.submit": "tidemark CLI"}


def unit_of(module: str) -> str:
    if module in ENTRY_SCRIPTS:
        return ENTRY_SCRIPTS[module]
    for prefix, unit in UNITS:
        if _under(module, (prefix,)):
            return unit
    return module.split(".")[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{unit: the units its modules import}, edges between different units only."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            if unit_of(module) != unit_of(target):
                out.setdefault(unit_of(module), set()).add(unit_of(target))
    return out


def test_entry_scripts_are_imported_by_nothing(graph):
    assert {m for m, targets in graph.items() if set(targets) & set(ENTRY_SCRIPTS)} == set()


def test_no_package_loop(graph):
    """No loop between packages either (a module-level cycle check misses one that goes through
    several modules of each package): e.g. streaming_job -> the CLI -> streaming_job, or the core
    -> dedup_sql -> the core."""
    loops = cycles(package_graph(graph))
    witnesses = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        for loop in loops
        if unit_of(module) in loop and unit_of(target) in loop and unit_of(module) != unit_of(target)
    }
    assert loops == [], sorted(witnesses)
    bad = {"streaming_job.job": {"tidemark.cli"}, "tidemark.commands.stream": {"streaming_job.job"}}
    assert cycles(package_graph(bad)) == [["streaming_job", "tidemark CLI"]]
