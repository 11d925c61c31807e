"""Rebuild every generated table in the README, the docs and the RESULTS pages from the result files behind it.

A generated table sits between two HTML comments that name what builds it::

    <!-- table: SCRIPT.FUNCTION FILE [FILE ...] -->

    | generated | markdown |

    <!-- /table -->

(indented as a whole inside a list item). SCRIPT is a module in benchmarks/ (``benchmarks/SCRIPT.py``, imported
by path, never run), FUNCTION a function in it that takes the FILEs' records (a list of dicts, each read with
``result_file.read_result``, in the marker's order) and returns the markdown, with no trailing newline. A FILE is
a path relative to benchmarks/ (``results/real2sim.json``); a FILE with ``*``, ``?`` or ``[`` is a glob, expanded
in sorted order, and must match at least one file. The pages searched are README.md, docs/**/*.md and
benchmarks/RESULTS*.md.

    python benchmarks/report.py --check      # what CI runs: exit 1, with a diff, when a table differs from its files
    python benchmarks/report.py --write      # rewrite every marked table from its files
    python benchmarks/report.py --unbacked   # the markdown tables that no marker covers, by page, and their count
                                             # (exit 1 when there is one: CI runs it too)

A table that is not a measurement (settings, a file layout) carries ``<!-- reference table: what it is -->`` on
the line before it and is not listed by --unbacked.
    python benchmarks/report.py --check --files README.md docs/real2sim.md   # only these pages

A marker that cannot be built (a missing file, a script or function that does not exist, a marker without its
close) is one line, ``page:line: what is wrong``, and fails --check and --write alike; --write still rewrites
every table it can build. To publish a new figure: have the benchmark write its result file with
``result_file.write_result``, add a function to the script that renders it, put an empty marker pair where the
table goes and run --write.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import importlib.util
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import read_result  # noqa: E402  (benchmarks/ is not a package)

OPEN = re.compile(r"^(?P<indent>\s*)<!--\s*table:(?P<spec>.*?)-->\s*$")
CLOSE = re.compile(r"^\s*<!--\s*/table\s*-->\s*$")
SPEC = re.compile(r"^(?P<script>[A-Za-z_]\w*)\.(?P<function>[A-Za-z_]\w*)$")
FENCE = re.compile(r"^\s*(```|~~~)")
#: On the line before a table: not a measurement (settings, a file layout, a comparison of features), so no
#: result file stands behind it. The text after the colon says what the table is.
REFERENCE = re.compile(r"^\s*<!--\s*reference table:\s*\S.*-->\s*$")


@dataclass
class Block:
    """One marker pair on a page: lines ``open_line`` and ``close_line`` (0-based) and what builds the lines
    between them."""

    open_line: int
    close_line: int
    script: str
    function: str
    files: list[str]
    indent: str = ""  # a table inside a list item: the marker's indentation, given to every generated line


@dataclass
class Page:
    """A page's marker pairs, and its markers that are not well formed (``(line, message)``, 0-based)."""

    path: Path
    lines: list[str]
    blocks: list[Block] = field(default_factory=list)
    malformed: list[tuple[int, str]] = field(default_factory=list)


class TableError(Exception):
    """A marker that cannot be built; the message says what to do."""


def pages(root: Path, only: list[str] | None = None) -> list[Path]:
    """README.md, docs/**/*.md and benchmarks/RESULTS*.md under ``root``; ``only`` (paths relative to ``root`` or
    absolute) narrows them."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md")),
             *sorted((root / "benchmarks").glob("RESULTS*.md"))]
    found = [p for p in found if p.is_file()]
    if only is None:
        return found
    wanted = []
    for name in only:
        path = Path(name) if Path(name).is_absolute() else root / name
        if path.resolve() not in {p.resolve() for p in found}:
            raise TableError(f"{name}: not a page the report reads (README.md, docs/**/*.md, benchmarks/RESULTS*.md "
                             f"under {root})")
        wanted.append(path)
    return wanted


def parse(path: Path) -> Page:
    """Find the marker pairs of one page; markers inside fenced code blocks are examples, not markers."""
    page = Page(path, path.read_text().splitlines())
    opened: tuple[int, re.Match[str]] | None = None
    fenced = False
    for i, line in enumerate(page.lines):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        if m := OPEN.match(line):
            if opened is not None:
                page.malformed.append((opened[0], "table marker not closed before the next one: add <!-- /table -->"))
            opened = (i, m)
        elif CLOSE.match(line):
            if opened is None:
                page.malformed.append((i, "<!-- /table --> without its <!-- table: SCRIPT.FUNCTION FILE... -->"))
                continue
            start, m = opened
            opened = None
            words = m["spec"].split()
            spec = SPEC.match(words[0]) if words else None
            if spec is None or len(words) < 2:
                page.malformed.append((start, f"malformed marker {line_of(m)!r}: write "
                                              "<!-- table: SCRIPT.FUNCTION FILE [FILE ...] -->"))
                continue
            page.blocks.append(Block(start, i, spec["script"], spec["function"], words[1:], m["indent"]))
    if opened is not None:
        page.malformed.append((opened[0], "table marker never closed: add <!-- /table --> after the table"))
    return page


def line_of(m: re.Match[str]) -> str:
    return m.string.strip()


_modules: dict[Path, ModuleType] = {}


def load_script(benchmarks: Path, script: str) -> ModuleType:
    """Import ``benchmarks/SCRIPT.py`` by path without running it (its work sits under ``__main__``)."""
    path = (benchmarks / f"{script}.py").resolve()
    if path in _modules:
        return _modules[path]
    if not path.is_file():
        raise TableError(f"no script benchmarks/{script}.py")
    name = script
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != path:
        name = f"_report_{len(_modules)}_{script}"  # another root's script of the same name (tests use several)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the script runs its class bodies
    sys.path.insert(0, str(path.parent))  # the scripts import their siblings by name
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise TableError(f"benchmarks/{script}.py does not import: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.parent))
    _modules[path] = module
    return module


def expand(benchmarks: Path, files: list[str]) -> list[Path]:
    """The marker's FILEs as paths: globs expanded (sorted), each one existing."""
    paths: list[Path] = []
    for name in files:
        if glob.has_magic(name):
            matched = sorted(Path(p) for p in glob.glob(str(benchmarks / name)))
            if not matched:
                raise TableError(f"no result file matches benchmarks/{name}: rerun its benchmark or remove the table")
            paths += matched
        elif (benchmarks / name).is_file():
            paths.append(benchmarks / name)
        else:
            raise TableError(f"no result file benchmarks/{name}: rerun its benchmark or remove the table")
    return paths


def build(root: Path, block: Block, tracebacks: bool = False) -> list[str]:
    """The lines a marker pair should hold: a blank line, the function's markdown, a blank line (so that the
    comments stay HTML blocks of their own in every renderer)."""
    benchmarks = root / "benchmarks"
    records = [read_result(p) for p in expand(benchmarks, block.files)]
    module = load_script(benchmarks, block.script)
    render: Callable[[list[dict[str, Any]]], str] | None = getattr(module, block.function, None)
    if not callable(render):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                        and getattr(v, "__module__", None) == module.__name__)
        raise TableError(f"benchmarks/{block.script}.py has no function {block.function!r} "
                         f"(it has: {', '.join(public) or 'none'})")
    try:
        text = render(records)
    except Exception as e:
        if tracebacks:
            traceback.print_exc()
        raise TableError(f"{block.script}.{block.function} failed on its files: {type(e).__name__}: {e} "
                         "(--traceback shows where)") from e
    if not isinstance(text, str):
        raise TableError(f"{block.script}.{block.function} returned {type(text).__name__}, not the markdown (str)")
    return ["", *(f"{block.indent}{line}" if line else "" for line in text.rstrip("\n").splitlines()), ""]


@dataclass
class Outcome:
    """What a pass over the pages found: one-line problems, the diffs of stale tables, and the pages rewritten."""

    problems: list[str] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    tables: int = 0
    failed: int = 0


def run(root: Path, only: list[str] | None = None, write: bool = False, tracebacks: bool = False) -> Outcome:
    """Build every marked table on the pages; with ``write``, put the built tables in place."""
    out = Outcome()
    for path in pages(root, only):
        page = parse(path)
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        out.problems += [f"{rel}:{line + 1}: {message}" for line, message in page.malformed]
        new = list(page.lines)
        built: list[tuple[Block, list[str]]] = []
        for block in page.blocks:
            out.tables += 1
            try:
                lines = build(root, block, tracebacks)
            except TableError as e:
                out.problems.append(f"{rel}:{block.open_line + 1}: {e}")
                out.failed += 1
                continue
            old = page.lines[block.open_line + 1:block.close_line]
            if old != lines:
                out.diffs.append("".join(difflib.unified_diff(
                    [f"{s}\n" for s in old], [f"{s}\n" for s in lines], f"{rel}:{block.open_line + 1} (committed)",
                    f"{rel} (from {block.script}.{block.function} {' '.join(block.files)})")))
                built.append((block, lines))
        for block, lines in reversed(built):  # from the bottom up, so that earlier line numbers stay valid
            new[block.open_line + 1:block.close_line] = lines
        if write and new != page.lines:
            path.write_text("\n".join(new) + "\n")
            out.written.append(path)
    return out


def unbacked(root: Path, only: list[str] | None = None) -> Iterator[tuple[Path, list[int]]]:
    """Each page's markdown tables (runs of lines starting with ``|``) outside every marker pair and code fence,
    as the 1-based line of each table's first line."""
    for path in pages(root, only):
        page = parse(path)
        covered = {i for b in page.blocks for i in range(b.open_line, b.close_line + 1)}
        starts, fenced, previous = [], False, False
        for i, line in enumerate(page.lines):
            if FENCE.match(line):
                fenced = not fenced
            table = not fenced and i not in covered and line.lstrip().startswith("|")
            if table and not previous and not _marked_reference(page.lines, i):
                starts.append(i + 1)
            previous = table
        if starts:
            yield path, starts


def _marked_reference(lines: list[str], first: int) -> bool:
    """Whether the table starting at line ``first`` (0-based) carries ``<!-- reference table: ... -->`` on the
    line before it (a blank line between the two is allowed)."""
    before = [line for line in lines[max(0, first - 2):first] if line.strip()]
    return bool(before) and REFERENCE.match(before[-1]) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 with a unified diff for each table that differs "
                      "from what its files give, and a line for each marker that cannot be built (CI runs this)")
    mode.add_argument("--write", action="store_true", help="rewrite every marked table from its files")
    mode.add_argument("--unbacked", action="store_true", help="list the markdown tables outside any marker, by page "
                      "and line, and their total (what still lacks a result file behind it); exit 1 if there is one")
    parser.add_argument("--files", nargs="+", metavar="PAGE", help="only these pages (paths relative to --root)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    parser.add_argument("--traceback", action="store_true", help="print the traceback of a render function that fails")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.unbacked:
            total = 0
            for path, starts in unbacked(root, args.files):
                total += len(starts)
                print(f"{path.relative_to(root)}: {len(starts)} ({', '.join(map(str, starts))})")
            print(f"{total} tables without a marker")
            return 1 if total else 0  # CI runs it: a figure without its result file fails
        out = run(root, args.files, write=args.write, tracebacks=args.traceback)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for diff in out.diffs if args.check else []:
        print(diff, end="")
    for problem in out.problems:
        print(problem, file=sys.stderr)
    for path in out.written:
        print(f"wrote {path.relative_to(root)}")
    stale = len(out.diffs) if args.check else 0
    print(f"{out.tables} tables: {out.tables - out.failed - len(out.diffs)} up to date, "
          f"{len(out.diffs)} {'stale' if args.check else 'rewritten'}, {out.failed} could not be built"
          + (f", {len(out.problems) - out.failed} malformed markers" if len(out.problems) > out.failed else ""),
          file=sys.stderr)
    return 1 if out.problems or stale else 0


if __name__ == "__main__":
    sys.exit(main())
