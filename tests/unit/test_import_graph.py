"""The package's shape: no import cycles, and the in-image server stands on its own.

Lazy imports inside functions count too: a cycle through a function body still ties two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

from builder.packaging.context import SERVER_PACKAGE, SERVER_PACKAGES, SERVER_SUPPORT

PACKAGE = Path(__file__).resolve().parents[2] / "builder"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "builder":
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names if alias.name.split(".")[0] == "builder"}
        graph[_module_name(path)] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if state.get(module) == 1:
            return path[path.index(module):] + [module]
        if state.get(module) == 2 or module not in graph:
            return None
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            found = visit(dep)
            if found:
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


def test_find_cycle_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_builder_has_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto builder's subpackages (builder.bench.models -> builder.bench; a top-level
    module such as builder.report is its own node): two packages that import each other are one idea split in two."""

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for module, deps in graph.items():
        mine = folded.setdefault(package(module), set())
        mine |= {package(d) for d in deps if package(d) != package(module)}
    return folded


def test_package_graph_folds_modules_onto_their_packages() -> None:
    graph = {"builder.a.x": {"builder.b.y"}, "builder.b.y": {"builder.a"}, "builder.a": set(), "builder.c": set()}
    assert find_cycle(package_graph(graph)) == ["builder.a", "builder.b", "builder.a"]
    assert find_cycle(graph) is None  # no module-level cycle: only the package view sees it


def test_builder_packages_import_each_other_one_way_only() -> None:
    assert find_cycle(package_graph(import_graph())) is None


def test_measurement_stands_on_nothing_it_serves() -> None:
    deps = {d for m, ds in import_graph().items() if m.startswith("builder.measure") for d in ds}
    assert not {d for d in deps if d.split(".")[1] in ("bench", "optimize", "packaging", "server", "commands")}, deps


def test_the_server_imports_only_what_images_carry() -> None:
    carried = {f"builder.{Path(name).stem}" for name in SERVER_SUPPORT} | {"builder"}
    graph = import_graph()
    server = {m: deps for m, deps in graph.items() if m.startswith(f"builder.{SERVER_PACKAGE}")}
    assert server, "no server modules found"
    packages = tuple(f"builder.{folder}" for folder in SERVER_PACKAGES)
    shipped = {m: deps for m, deps in graph.items() if m.startswith(packages)}
    outside = {m: sorted(d for d in deps if not d.startswith(packages) and d not in carried)
               for m, deps in shipped.items()}
    assert all(not deps for deps in outside.values()), outside


#: What the rest of tfsmith may use of the server: its command line (to tell an image how to serve). Its wire
#: formats are `builder.wire`'s (clients speak to it with those); models, runtimes and backends `builder.model`'s.
SERVER_SURFACE = {"builder.server.options"}


def test_the_wire_formats_stand_below_the_server() -> None:
    deps = {d for m, ds in import_graph().items() if m.startswith("builder.wire") for d in ds}
    assert deps <= {"builder.wire", "builder.wire.tensors"}, deps


def test_packaging_optimize_and_bench_use_the_model_layer_not_server_internals() -> None:
    graph = import_graph()
    reaching = {m: sorted(d for d in deps if d.startswith("builder.server") and d not in SERVER_SURFACE)
                for m, deps in graph.items() if m.split(".")[1:2] and m.split(".")[1] in ("packaging", "optimize", "bench")}
    assert not any(reaching.values()), {m: d for m, d in reaching.items() if d}


def test_the_model_layer_stands_below_the_server() -> None:
    deps = {d for m, ds in import_graph().items() if m.startswith("builder.model") for d in ds}
    assert not {d for d in deps if d.split(".")[1] in ("server", "packaging", "optimize", "bench", "commands")}, deps
