"""Draw robot_rl's architecture as a picture: docs/figures/architecture.png.

Two panels, both read from the repository, so the picture follows the code:

- left, the parts and their "may import" arrows: the mermaid diagram of docs/architecture.md (the site renders
  the same block), laid out in tiers by longest path to ``core``;
- right, the rules and the imports: for every pair of top-level packages, whether ``tests/test_architecture.py``
  allows the import (its ``ALLOWED`` table; ``TEMPORARY`` edges apart) and whether the code makes it now (the
  test's own walk of every import, lazy and ``TYPE_CHECKING`` ones included).

    .venv/bin/python scripts/architecture_figure.py            # writes docs/figures/architecture.png
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import test_architecture as arch  # noqa: E402

_NODE = re.compile(r'^\s*(\w+)\["([^"]+)"\]\s*$')
_EDGE = re.compile(r"^\s*(\w+(?:\s*&\s*\w+)*)\s*-->(?:\|([^|]*)\|)?\s*(.+?)\s*$")


def read_mermaid(path: Path) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The first mermaid block of ``path``: node id -> label, and (source, target, edge label) edges."""
    text = path.read_text(encoding="utf-8")
    block = re.search(r"```mermaid\n(.*?)```", text, re.DOTALL)
    if block is None:
        raise SystemExit(f"no mermaid block in {path}")
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str]] = []
    for line in block.group(1).splitlines():
        if m := _NODE.match(line):
            nodes[m.group(1)] = m.group(2)
        elif m := _EDGE.match(line):
            edges += [(a.strip(), b.strip(), m.group(2) or "")
                      for a in m.group(1).split("&") for b in m.group(3).split("&")]
    return nodes, edges


def tiers(nodes: dict[str, str], edges: list[tuple[str, str, str]]) -> dict[str, int]:
    """Longest path down to a node without outgoing edges (0 = the bottom tier)."""
    out: dict[str, list[str]] = defaultdict(list)
    for a, b, _ in edges:
        out[a].append(b)
    depth: dict[str, int] = {}

    def visit(n: str) -> int:
        if n not in depth:
            depth[n] = 1 + max((visit(m) for m in out[n]), default=-1)
        return depth[n]

    for n in nodes:
        visit(n)
    return depth


def draw_layers(ax: plt.Axes, nodes: dict[str, str], edges: list[tuple[str, str, str]]) -> None:
    """Boxes in tiers (the core at the bottom) and the diagram's arrows."""
    depth = tiers(nodes, edges)
    rows: dict[int, list[str]] = defaultdict(list)
    for n in nodes:  # the diagram's own order within a tier
        rows[depth[n]].append(n)
    pos: dict[str, tuple[float, float]] = {}
    width = max(len(r) for r in rows.values())
    for d, row in rows.items():
        for i, n in enumerate(row):
            pos[n] = ((i + 0.5) * width / len(row), d * 1.6)
    for a, b, label in edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.add_patch(FancyArrowPatch((xa, ya - 0.38), (xb, yb + 0.38), arrowstyle="-|>", mutation_scale=12,
                                     color="#555555", lw=1.0, shrinkA=0, shrinkB=0))
        if label:
            at = (xa + 0.3 * (xb - xa), ya - 0.38 + 0.3 * (yb - ya + 0.76))  # near the arrow's tail
            ax.text(*at, label, fontsize=7, style="italic", ha="center", bbox={"fc": "white", "ec": "none", "pad": 1})
    for n, (x, y) in pos.items():
        name, _, role = nodes[n].partition(" — ")
        colour = "#dbe9f6" if depth[n] else "#f6e3c6"
        ax.add_patch(FancyBboxPatch((x - 0.46, y - 0.36), 0.92, 0.72, boxstyle="round,pad=0.02", fc=colour,
                                    ec="#335577", lw=1.0))
        ax.text(x, y + (0.12 if role else 0), _wrap(name, 16), ha="center", va="center", fontsize=9,
                weight="bold")
        if role:
            ax.text(x, y - 0.16, _wrap(role, 22), ha="center", va="center", fontsize=6.5, linespacing=1.0)
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-0.6, max(rows) * 1.6 + 0.6)
    ax.set_axis_off()
    ax.set_title("the parts; an arrow is \"may import\" (docs/architecture.md)", fontsize=10)


def _wrap(text: str, width: int) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line])


def rule(a: str, b: str) -> str:
    """``allowed``, ``temporary`` or ``forbidden``: what tests/test_architecture.py says of ``a`` importing ``b``."""
    if b in arch.ALLOWED.get(a, ()):
        return "allowed"
    return "temporary" if (a, b) in arch.TEMPORARY else "forbidden"


def draw_rules(ax: plt.Axes, order: list[str]) -> None:
    """The package-by-package grid: forbidden (red), allowed for now (orange), imported now (dot)."""
    graph = arch.package_graph(arch.imports())
    used = {(a, b) for a, targets in graph.items() for b in targets}
    names = [p for p in order if p in arch.ALLOWED]
    names += sorted(set(arch.ALLOWED) - set(names))
    n = len(names)
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            kind = rule(a, b)
            if i == j:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fc="#eeeeee", ec="none"))
            elif kind != "allowed":
                colour = "#f7d4d4" if kind == "forbidden" else "#f8e2bd"
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fc=colour, ec="none"))
                if (a, b) in used and kind == "forbidden":  # the test would fail; draw it loudly rather than hide it
                    ax.text(j, i, "!", ha="center", va="center", color="red", weight="bold")
            if (a, b) in used and a != b:
                ax.plot(j, i, "o", color="#1f5fa0", ms=4)
    ax.set_xticks(range(n), names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(n), names, fontsize=7)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xticks([k + 0.5 for k in range(n - 1)], minor=True)
    ax.set_yticks([k + 0.5 for k in range(n - 1)], minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("imported package")
    ax.set_ylabel("importing package")
    ax.set_title("tests/test_architecture.py: red, not allowed; orange, allowed for now; dot, imported now",
                 fontsize=9)


def main() -> None:
    """Write the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "architecture.png")
    args = parser.parse_args()
    nodes, edges = read_mermaid(ROOT / "docs" / "architecture.md")
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 6.8), gridspec_kw={"width_ratios": [1.25, 1]})
    draw_layers(left, nodes, edges)
    order = list(reversed(arch.ALLOWED))  # the table lists the bottom layer first
    draw_rules(right, order)
    fig.suptitle("robot_rl: packages and the allowed import directions", fontsize=12)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
