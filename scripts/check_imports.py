"""Check that gpumem_kernel's imports point down: no import circle between its modules, nor between its folders.

The graph is built with `ast` from every import statement, at module level and inside functions alike (an
import moved into a function to dodge a circle is still a circle), relative and absolute:
`from gpumem_kernel.probe import holders` depends on probe/holders.py, `from gpumem_kernel.probe.holders import
Holder` too, `import gpumem_kernel.render.units` on render/units.py. Importing a submodule runs its package's
`__init__.py` first; that implicit step is not an edge (every module would depend on its own package).
Imports made from strings at run time (`importlib.import_module`, the lazy public API of `__init__.py`) are
not seen.

    python scripts/check_imports.py          # prints the layers, bottom first; exit status 1 on a circle

One more rule, the analysis's entry point: outside gpumem_kernel/analysis/ (the rest of the package and the
benchmarks/ scripts) code imports only the package `gpumem_kernel.analysis` (its `__all__`), never one of its
modules nor a `_private` name, so that the estimator's inside can move without its users changing.

And one order inside the analysis: its stage folders (request/, gpus/, ... pipeline/, ANALYSIS_STAGES, bottom
first) each import only from the stages below them, so that a trace never reaches up into the search or the
report, and each stage can be read with only the ones below it in mind.

tests/test_layers.py runs the same check in the test command.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

PACKAGE = "gpumem_kernel"
SKIP_DIRS = {"labextension", "__pycache__"}
Graph = Dict[str, Set[str]]


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. gpumem_kernel.probe.holders
    path: Path
    is_package: bool  # an __init__.py


def find_modules(root: Path, package: str = PACKAGE) -> Dict[str, Module]:
    """Every .py file of the package, by dotted name."""
    modules: Dict[str, Module] = {}
    base = root / package
    for path in sorted(base.rglob("*.py")):
        if SKIP_DIRS & set(path.relative_to(base).parts):
            continue
        parts = (package,) + path.relative_to(base).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package)
    return modules


def _absolute(module: Module, node: ast.ImportFrom) -> Optional[str]:
    """The module an ImportFrom names, made absolute (None when it climbs above the package)."""
    if node.level == 0:
        return node.module
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if node.level - 1 > len(base):
        return None
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _named(node: ast.AST, module: Module) -> Iterator[str]:
    """The dotted names an import statement asks for: the modules, and `from` names that may be modules."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        source = _absolute(module, node)
        if source is not None:
            for alias in node.names:
                yield f"{source}.{alias.name}" if alias.name != "*" else source


def imports_of(module: Module, modules: Dict[str, Module]) -> Set[str]:
    """The package's modules `module` imports, anywhere in its body."""
    tree = ast.parse(module.path.read_text("utf-8"), filename=str(module.path))
    found: Set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in _named(node, module):
            # `from a.b import c`: a.b.c if that is a module, else a.b (c is a name defined in it)
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module.name:
                found.add(name)
    return found


def build_graph(root: Path, package: str = PACKAGE) -> Graph:
    modules = find_modules(root, package)
    return {name: imports_of(module, modules) for name, module in modules.items()}


def folder_of(name: str) -> str:
    """The capability folder a module belongs to ("probe", "render", ...), a top-level module's own name
    ("extension"), or "__init__" for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def folder_graph(graph: Graph) -> Graph:
    """Folder A depends on folder B when a module of A imports a module of B."""
    folders: Graph = {}
    for name, targets in graph.items():
        mine = folder_of(name)
        folders.setdefault(mine, set()).update(folder_of(t) for t in targets if folder_of(t) != mine)
    return folders


def find_cycles(graph: Graph) -> List[List[str]]:
    """Every strongly connected part with more than one node (or a node importing itself), as a closed path."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    parts: List[List[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1 or node in graph.get(node, ()):
                parts.append(_closed_path(sorted(part), graph))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return parts


def _closed_path(part: Sequence[str], graph: Graph) -> List[str]:
    """One circle through the part's first node, for the message (a -> b -> a)."""
    members = set(part)
    start = part[0]
    paths = {start: [start]}
    pending = [start]
    while pending:
        node = pending.pop(0)
        for target in sorted(graph.get(node, ())):
            if target == start:
                return paths[node] + [start]
            if target in members and target not in paths:
                paths[target] = paths[node] + [target]
                pending.append(target)
    return list(part)


def layers(graph: Graph) -> List[List[str]]:
    """Nodes by layer, bottom first: a node sits one above the highest node it imports (graph without circles)."""
    level: Dict[str, int] = {}

    def depth(node: str, trail: Tuple[str, ...] = ()) -> int:
        if node not in level:
            below = [depth(t, trail + (node,)) for t in graph.get(node, ()) if t not in trail]
            level[node] = 1 + max(below, default=-1)
        return level[node]

    for node in graph:
        depth(node)
    result: List[List[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for node, n in level.items():
        result[n].append(node)
    return [sorted(nodes) for nodes in result]


# --- the analysis is imported through its package only ------------------------------------------------------

ENTRY = f"{PACKAGE}.analysis"  # the package whose inside only its own modules import
ENTRY_USERS = ("benchmarks",)  # folders beside the package that must use the entry point too


def _entry_breaches(path: Path, shown: str) -> Iterator[str]:
    """`shown:line: what` for each import of an analysis module, or of a _private name of the package."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(ENTRY + "."):
                    yield f"{shown}:{node.lineno}: import {alias.name} (import from {ENTRY} instead)"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(ENTRY + "."):
                yield f"{shown}:{node.lineno}: from {node.module} import ... (import from {ENTRY} instead)"
            elif node.module == ENTRY:
                for alias in node.names:
                    if alias.name.startswith("_"):
                        yield f"{shown}:{node.lineno}: {alias.name} is private to {ENTRY}"


def entry_breaches(root: Path, package: str = PACKAGE) -> List[str]:
    """Imports outside gpumem_kernel/analysis/ that reach past `gpumem_kernel.analysis` into its modules."""
    inside = root / package / "analysis"
    paths = [m.path for m in find_modules(root, package).values() if inside not in m.path.parents]
    for folder in ENTRY_USERS:
        # not what a hidden folder holds: the zoo installs its third-party packages into benchmarks/zoo/.packages
        top = root / folder
        mine = (p for p in top.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(top).parts))
        paths += sorted(mine) if top.is_dir() else []
    found: List[str] = []
    for path in paths:
        found += _entry_breaches(path, str(path.relative_to(root)))
    return found


# --- a module's _private names stay in it ---------------------------------------------------------------------


def private_breaches(root: Path, package: str = PACKAGE) -> List[str]:
    """`path:line: name from module` for each `from gpumem_kernel.X import _name` in the package: a name another
    module needs is public (an `import name as _alias` is fine: the alias is the importer's own)."""
    found: List[str] = []
    for module in find_modules(root, package).values():
        tree = ast.parse(module.path.read_text("utf-8"), filename=str(module.path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if node.module != package and not node.module.startswith(package + "."):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    shown = module.path.relative_to(root)
                    found.append(f"{shown}:{node.lineno}: {alias.name} from {node.module}")
    return found


# --- the analysis's stages, bottom first ---------------------------------------------------------------------

ANALYSIS_STAGES = (
    "request",  # what is asked: options, their checks, the batches a step is fed
    "gpus",  # the GPUs planned for and the CUDA context on one
    "allocator",  # the caching-allocator model and the storage tracker
    "fake",  # where a fake CPU trace differs from a CUDA run, and its answers
    "trace",  # the traced engine
    "report",  # the report's data, picks and rendering
    "model",  # model states and the fine-tune planning copies
    "measure",  # real steps on the GPU
    "search",  # the batch and sequence searches over the engines
    "pipeline",  # one analysis from request to report
)


def stage_of(name: str, package: str = PACKAGE) -> Optional[str]:
    """The analysis stage folder a module belongs to ("trace" for analysis.trace.plan), else None."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == [package, "analysis"] else None


def stage_breaches(graph: Graph, package: str = PACKAGE) -> List[str]:
    """Imports from one analysis stage into a stage above it (or one not in ANALYSIS_STAGES)."""
    found: List[str] = []
    for name in sorted(graph):
        mine = stage_of(name, package)
        if mine is None:
            continue
        for target in sorted(graph[name]):
            theirs = stage_of(target, package)
            if theirs is None or theirs == mine:
                continue
            if mine not in ANALYSIS_STAGES or theirs not in ANALYSIS_STAGES:
                unknown = mine if mine not in ANALYSIS_STAGES else theirs
                found.append(f"{_short(name)} -> {_short(target)}: stage {unknown} is not in ANALYSIS_STAGES")
            elif ANALYSIS_STAGES.index(theirs) > ANALYSIS_STAGES.index(mine):
                found.append(f"{_short(name)} -> {_short(target)}: stage {mine} imports {theirs}, above it")
    return found


@dataclass
class Report:
    module_cycles: List[List[str]]
    folder_cycles: List[List[str]]
    module_layers: List[List[str]]
    folder_layers: List[List[str]]
    entry_breaches: List[str] = field(default_factory=list)
    stage_breaches: List[str] = field(default_factory=list)
    private_breaches: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        breaches = self.entry_breaches or self.stage_breaches or self.private_breaches
        return not (self.module_cycles or self.folder_cycles or breaches)

    def text(self) -> str:
        lines = [f"past the analysis's entry point: {breach}" for breach in self.entry_breaches]
        lines += [f"analysis stage order broken: {breach}" for breach in self.stage_breaches]
        lines += [f"a private name imported by another module: {breach}" for breach in self.private_breaches]
        for title, cycles in (("module", self.module_cycles), ("folder", self.folder_cycles)):
            for cycle in cycles:
                lines.append(f"import circle between {title}s: " + " -> ".join(map(_short, cycle)))
        if self.ok:
            lines.append("folders, bottom layer first (each imports only from layers below it):")
            lines += [f"  {n}: {', '.join(nodes)}" for n, nodes in enumerate(self.folder_layers)]
            lines.append("analysis stages, bottom first: " + ", ".join(ANALYSIS_STAGES))
            lines.append("modules, bottom layer first:")
            lines += [f"  {n}: {', '.join(map(_short, nodes))}" for n, nodes in enumerate(self.module_layers)]
        return "\n".join(lines)


def _short(name: str) -> str:
    """A module's name without the package's ("probe.holders"); the package itself keeps its name."""
    return name.partition(".")[2] or name


def check(root: Path, package: str = PACKAGE) -> Report:
    modules = find_modules(root, package)
    graph = {name: imports_of(module, modules) for name, module in modules.items()}
    folders = folder_graph(graph)
    module_cycles, folder_cycles = find_cycles(graph), find_cycles(folders)
    return Report(
        module_cycles,
        folder_cycles,
        layers(graph) if not module_cycles else [],
        layers(folders) if not folder_cycles else [],
        entry_breaches(root, package),
        stage_breaches(graph, package),
        private_breaches(root, package),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the repository root")
    args = parser.parse_args(argv)
    report = check(Path(args.root))
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
