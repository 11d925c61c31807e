"""The package graph as a table: which top-level package of robot_rl may import which (docs/architecture.md).

Every ``import`` counts: module level, inside functions (lazy imports of optional backends) and under
``TYPE_CHECKING``; a contract that a type hint reaches across is still a dependency. Imports are grouped by
top-level package (``robot_rl.loop.runner`` is ``loop``; ``robot_rl/checkpoint.py`` is ``checkpoint``), and the
test fails on an import the table does not allow, one line per import, and on any cycle between packages (two
packages that import each other through any modules at all).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "robot_rl"
DOC = ROOT.parent / "docs" / "architecture.md"

_BASE = frozenset({"core", "config_io", "checkpoint", "durable"})  # leaf utilities any upper layer may use
# package -> the packages it may import (besides itself), bottom layer first; ROLE says why. A package not in the
# table fails the test until it is added, with its row in docs/architecture.md (the docs test prints the row).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "tokenizer": frozenset(),
    "durable": frozenset(),
    "config_io": frozenset({"core"}),
    "checkpoint": frozenset({"core", "durable"}),
    "runlog": frozenset({"core"}),
    "viz": frozenset({"core"}),
    "transport": frozenset({"core"}),
    "replay": frozenset({"core", "durable", "checkpoint"}),
    "policy_io": frozenset({"core", "config_io", "checkpoint"}),
    "data": _BASE | {"replay"},
    "sims": frozenset({"core", "tokenizer", "data"}),
    "policies": _BASE | {"replay", "data"},
    "hardware": frozenset({"core", "sims"}),
    "hil": frozenset({"core", "hardware"}),
    "rewards": _BASE | {"replay", "data", "tokenizer", "transport", "sims", "policies"},
    "cotrain": _BASE | {"data", "policies"},
    "twin": _BASE | {"data", "sims"},
    "loop": _BASE | {"replay", "runlog", "policy_io", "transport", "sims", "policies", "data"},
    "human_loop": _BASE | {"replay", "policy_io", "data", "sims", "policies", "hardware", "hil", "rewards",
                           "transport", "viz", "loop"},
    "export": frozenset({"core", "checkpoint", "policy_io", "policies"}),
    "distill": _BASE | {"policy_io", "policies", "sims", "export", "loop"},
    "gym": frozenset({"core", "config_io", "sims"}),
    "launch": frozenset({"core", "loop"}),
    "testing": frozenset({"core", "sims", "data"}),
}
ALLOWED["cli"] = frozenset(ALLOWED) - {"testing"}

ROLE: dict[str, str] = {
    "core": "contracts, registries and the runtime pieces every layer shares (interrupts, rate loop, data-parallel)",
    "tokenizer": "the one `HashTokenizer` (language tasks, process reward model)",
    "durable": "temp → fsync → rename commits, `DiskFullError`: under checkpoints and replay alike",
    "config_io": "dataclass ⇄ dict, YAML, dotted overrides",
    "checkpoint": "atomic checkpoints",
    "runlog": "what a run writes (TensorBoard, CSVs, curve)",
    "viz": "wandb and Rerun sinks: called by the loops, call nothing back",
    "transport": "knows no algorithm, simulator or robot",
    "replay": "rings, segments on disk",
    "policy_io": "a run's trained policy without its learner",
    "data": "episodes and datasets: storage, no algorithm, no loop",
    "sims": "knows no learner (scripted demonstrators may record episodes)",
    "policies": "algorithms: know no transport, simulator or robot",
    "hardware": "robots, teleop contract, takeover, safety: knows no learner",
    "hil": "training feature: the graded HIL schedule (`loop.hil`)",
    "rewards": "training feature: learned rewards",
    "cotrain": "training feature: sim–real co-training",
    "twin": "training feature: system identification, refits",
    "loop": "the actor–learner loop: imports no feature package",
    "human_loop": "applications on the loop: deploy, record, HIL-SERL's learner, fleets",
    "export": "reads checkpoints only",
    "distill": "teacher → student; nothing imports it but the CLI",
    "gym": "interop adapters: build tasks through the registry, convert arrays",
    "launch": "starts processes by their command line",
    "testing": "fakes, imported by tests only",
    "cli": "the composition root: nothing imports it",
}

# Edges outside the table that the code still has, each with the work that removes it. The test fails on any edge
# not in ALLOWED or here, and on an entry here whose edge is gone (delete it then): this list only shrinks. Empty since
# issue 51 item 2 made the loop's features extensions (the loop imports no feature package).
TEMPORARY: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import statement's target: ``path:line``, the importing module and the imported one."""

    path: str
    line: int
    source: str
    target: str

    @property
    def edge(self) -> tuple[str, str]:
        return package_of(self.source), package_of(self.target)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def package_of(mod: str) -> str:
    """``robot_rl.loop.runner`` -> ``loop``; the root package itself is ``robot_rl``."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@functools.cache
def imports() -> tuple[Import, ...]:
    """Every import of a robot_rl module by a robot_rl module (``from pkg import submodule`` is the submodule)."""
    mods = _modules()
    out = []
    for mod, path in sorted(mods.items()):
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        rel = path.relative_to(ROOT.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names]
            for target in targets:
                resolved = _resolve(target, mods) if target.split(".")[0] == "robot_rl" else None
                if resolved is not None and resolved != mod:
                    out.append(Import(rel, node.lineno, mod, resolved))
    return tuple(dict.fromkeys(out))  # `from m import a, b` is one import of m


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    edges: dict[str, set[str]] = {m: set() for m in _modules()}
    for imp in imports():
        edges[imp.source].add(imp.target)
    return edges


def package_graph(found: Iterable[Import]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        a, b = imp.edge
        edges.setdefault(a, set())
        if a != b:
            edges[a].add(b)
    return dict(edges)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:  # recursion depth is bounded by the ~30 packages
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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
            out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def top_level_packages() -> set[str]:
    """The packages and modules directly under robot_rl/ (the root ``__init__`` aside)."""
    return {package_of(m) for m in _modules() if m != "robot_rl"}


def may_import(a: str) -> list[str]:
    """What ``a`` may import: the table's packages, then the temporary ones marked with ``*``."""
    return sorted(ALLOWED.get(a, ())) + sorted(f"{b}*" for (x, b) in TEMPORARY if x == a)


def edges_outside_the_table(found: Iterable[Import]) -> list[str]:
    """One line per import the table does not allow: ``file:line: from -> to (module); from may import: ...``."""
    return [f"{i.path}:{i.line}: {i.edge[0]} -> {i.edge[1]} ({i.target}); {i.edge[0]} may import: "
            f"{', '.join(may_import(i.edge[0])) or 'nothing in robot_rl'}"
            for i in found if i.edge[0] != i.edge[1] and i.edge[1] != "robot_rl"
            and i.edge[1] not in ALLOWED.get(i.edge[0], ()) and i.edge not in TEMPORARY]


def _in_table(edge: tuple[str, str]) -> bool:
    return edge[1] in ALLOWED.get(edge[0], ()) or edge in TEMPORARY


def package_cycles(found: Iterable[Import]) -> list[str]:
    """Each cycle between packages, then the imports that make it up, those outside the table (to move) first."""
    found = list(found)
    lines = []
    for cycle in [c for c in _strongly_connected(package_graph(found)) if len(c) > 1]:
        lines.append("cycle: " + " <-> ".join(cycle))
        inside = sorted((i for i in found if i.edge[0] != i.edge[1] and set(i.edge) <= set(cycle)),
                        key=lambda i: (_in_table(i.edge), i.path, i.line))
        lines += [f"  {i.path}:{i.line}: {i.edge[0]} -> {i.edge[1]} ({i.target})"
                  f"{'' if _in_table(i.edge) else '  <- not in the table'}" for i in inside]
    return lines


@pytest.fixture(scope="module")
def found() -> tuple[Import, ...]:
    return imports()


def test_every_package_is_in_the_table():
    missing = top_level_packages() - set(ALLOWED)
    assert not missing, f"new top-level packages: add each to ALLOWED (what it may import): {sorted(missing)}"
    gone = set(ALLOWED) - top_level_packages()
    assert not gone, f"packages in ALLOWED that no longer exist: {sorted(gone)}"
    for a, targets in ALLOWED.items():
        assert a not in targets and targets <= set(ALLOWED), (a, targets - set(ALLOWED))
    assert set(ROLE) == set(ALLOWED), set(ROLE) ^ set(ALLOWED)


def test_the_table_itself_has_no_cycle():
    # Then every cycle in the code needs an import outside the table, which the test below names.
    table = {a: set(b) | {y for (x, y) in TEMPORARY if x == a} for a, b in ALLOWED.items()}
    assert not [c for c in _strongly_connected(table) if len(c) > 1]


def test_the_root_package_imports_nothing(found):
    # Anything may import robot_rl itself (its __version__): it must stay a leaf.
    assert not [i for i in found if i.source == "robot_rl"]


def test_every_import_is_allowed_by_the_table(found):
    bad = edges_outside_the_table(found)
    assert not bad, ("imports outside the allowed-edges table (tests/test_architecture.py, docs/architecture.md; "
                     "* = temporary):\n" + "\n".join(bad))


def test_temporary_edges_are_outside_the_table_and_still_exist(found):
    assert not [e for e in TEMPORARY if e[1] in ALLOWED[e[0]]], "an edge is both allowed and temporary"
    edges = {i.edge for i in found}
    gone = [e for e in TEMPORARY if e not in edges]
    assert not gone, f"these edges are gone: delete them from TEMPORARY (and docs/architecture.md): {gone}"


def test_no_package_cycle(found):
    cycles = package_cycles(found)
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_the_walker_sees_lazy_and_type_checking_imports():
    # A rule checked by a walker that misses imports would pass on anything: prove it finds the two hidden kinds,
    # on imports that exist only in those forms.
    graph = import_graph()
    assert "robot_rl.core.algorithm" in graph["robot_rl.core.config"]  # only under TYPE_CHECKING there
    assert "robot_rl.data.offline" in graph["robot_rl.loop.offline_extension"]  # only inside OfflinePhase.attach
    assert "robot_rl.twin.in_training" in graph["robot_rl.twin.extension"]  # only inside methods
    assert "robot_rl.sims.randomize" in graph["robot_rl.sims.base"]  # only inside a nested function
    assert "robot_rl.hardware.teleop" in graph["robot_rl.hil.config"]  # under TYPE_CHECKING and in a method


def test_the_package_checks_report_a_back_edge_and_a_cycle():
    # The two checks on a made-up graph: an edge the table lacks is reported with its file and line, and two packages
    # that import each other through unrelated modules are a cycle.
    fake = [Import("robot_rl/data/x.py", 3, "robot_rl.data.x", "robot_rl.loop.runner"),
            Import("robot_rl/loop/y.py", 5, "robot_rl.loop.y", "robot_rl.data.store")]
    bad = edges_outside_the_table(fake)
    assert len(bad) == 1 and bad[0].startswith("robot_rl/data/x.py:3: data -> loop (robot_rl.loop.runner); data may "
                                               "import: checkpoint, config_io, core, durable, replay"), bad
    assert package_cycles(fake) == ["cycle: data <-> loop",
                                    "  robot_rl/data/x.py:3: data -> loop (robot_rl.loop.runner)  <- not in the table",
                                    "  robot_rl/loop/y.py:5: loop -> data (robot_rl.data.store)"]


# ---- the table in docs/architecture.md ---------------------------------------------------------------------------

def docs_table() -> str:
    """The markdown table of ALLOWED, TEMPORARY and ROLE, as docs/architecture.md holds it."""
    rows = ["| package | may import | for now also | role |", "| --- | --- | --- | --- |"]
    for a in ALLOWED:
        allowed = ", ".join(f"`{b}`" for b in sorted(ALLOWED[a])) if a != "cli" else "every package but `testing`"
        temporary = ", ".join(f"`{b}`" for (x, b) in TEMPORARY if x == a)
        rows.append(f"| `{a}` | {allowed or 'nothing in `robot_rl`'} | {temporary} | {ROLE[a]} |")
    return "\n".join(rows)


def test_the_docs_table_is_this_table():
    text = DOC.read_text()
    start = text.find("| package | may import |")
    assert start >= 0, "docs/architecture.md lost its allowed-edges table; paste:\n" + docs_table()
    block = text[start:].split("\n\n", 1)[0].strip()
    assert block == docs_table(), ("docs/architecture.md's allowed-edges table differs from the test's; as it should "
                                   "read:\n" + docs_table())


# ---- size limits (issue 19): no file in robot_rl/ over 500 lines, no function or method over 80 ----------------------

MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 80
# Files still over the limit, each waiting for its split (none now). Like TEMPORARY this list only shrinks:
# an entry back under the limit fails the test until it is deleted here.
OVERSIZE_FILES: set[str] = set()


def test_no_file_over_500_lines():
    lines = {p.relative_to(ROOT.parent).as_posix(): len(p.read_text().splitlines()) for p in sorted(ROOT.rglob("*.py"))}
    over = {f: n for f, n in lines.items() if n > MAX_FILE_LINES}
    bad = [f"{f}: {n} lines" for f, n in over.items() if f not in OVERSIZE_FILES]
    assert not bad, f"files over {MAX_FILE_LINES} lines (split them along a seam):\n" + "\n".join(bad)
    stale = OVERSIZE_FILES - set(over)
    assert not stale, f"back under the limit, delete from OVERSIZE_FILES: {stale}"


def test_no_function_over_80_lines():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    bad.append(f"{path.relative_to(ROOT.parent).as_posix()}:{node.lineno} {node.name}: {n} lines")
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines (break them into named helpers):\n" + "\n".join(bad)
