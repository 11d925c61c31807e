"""The shared keys of ``TransitionBatch.extras`` are spelled once, in robot_rl/core/extras.py (issue 51 item 3).

An AST scan of robot_rl/: a string literal naming a declared key, used on an ``extras`` mapping (subscript,
``get``/``pop``/``setdefault``, ``in``) or as a key of a dict literal, fails outside the declaring module. Code
says ``extras[DISCOUNT.name]``. The scan looks at code only: docstrings may name the keys.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from robot_rl.core import extras as extras_mod
from robot_rl.core.extras import SHARED_EXTRAS, ExtraKey
from robot_rl.core.transition import TransitionBatch

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1] / "robot_rl"
DECLARING = ROOT / "core" / "extras.py"
NAMES = frozenset(k.name for k in SHARED_EXTRAS)
# Dict literals whose keys merely coincide with a declared name (not extras): normaliser and dataset statistics.
_NOT_EXTRAS = {"mean"}


def _is_extras(node: ast.expr) -> bool:
    """``extras``, ``batch.extras``, ``storage.extras``, ...: an expression that names an extras mapping."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.endswith("extras")


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in NAMES else None


def _dict_is_extras(d: ast.Dict) -> bool:
    """A dict literal holding a declared key that is not also a common statistics key (an ``act`` method's
    extras, built before any ``extras=`` names them)."""
    return bool({_literal(k) for k in d.keys} - {None} - _NOT_EXTRAS)


def literal_uses(path: Path, root: Path = ROOT.parent) -> list[str]:
    """``path:line: 'key'`` for each string-literal use of a declared key on an extras mapping."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_extras(node.value) and (key := _literal(node.slice)):
            found.append((node.lineno, key))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and _is_extras(node.func.value)
              and node.args and (key := _literal(node.args[0]))):
            found.append((node.lineno, key))
        elif (isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
              and any(_is_extras(c) for c in node.comparators) and (key := _literal(node.left))):
            found.append((node.lineno, key))
        elif isinstance(node, ast.keyword) and node.arg == "extras" and isinstance(node.value, ast.Dict):
            found += [(node.value.lineno, k) for k in map(_literal, node.value.keys) if k]
        elif isinstance(node, ast.Dict) and _dict_is_extras(node):
            found += [(node.lineno, k) for k in map(_literal, node.keys) if k]
    rel = path.relative_to(root).as_posix()
    return [f"{rel}:{line}: {key!r}" for line, key in sorted(set(found))]


def test_no_string_literal_extras_key_outside_the_declaration() -> None:
    bad = [use for p in sorted(ROOT.rglob("*.py")) if p != DECLARING for use in literal_uses(p)]
    assert not bad, "spell a shared extras key with its robot_rl.core.extras constant (DISCOUNT.name):\n" \
        + "\n".join(bad)


def test_the_scan_catches_each_form(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('a = batch.extras["discount"]\nb = extras.get("mc_return")\nc = "chain" in storage.extras\n'
                   'd = TransitionBatch(extras={"guided": g})\ne = (x, {"log_prob": lp, "raw_action": u})\n'
                   'f = stats["mean"]\ng = {"mean": m, "std": s}\n')
    keys = [u.split(": ", 1)[1] for u in literal_uses(src, tmp_path)]
    assert keys == ["'discount'", "'mc_return'", "'chain'", "'guided'", "'log_prob'", "'raw_action'"]


def test_declarations_are_unique_and_complete() -> None:
    names = [k.name for k in SHARED_EXTRAS]
    assert len(names) == len(set(names))
    declared = {v for v in vars(extras_mod).values() if isinstance(v, ExtraKey)}
    assert declared == set(SHARED_EXTRAS), "add every ExtraKey constant to SHARED_EXTRAS"
    for key in SHARED_EXTRAS:
        assert key.writers and isinstance(key.dtype, torch.dtype) and key.shape.startswith("[")
        for module in (*key.writers, *key.readers):
            assert (ROOT.parent / (module.replace(".", "/") + ".py")).exists(), f"{key.name}: no module {module}"


def test_extras_travel_with_the_rows() -> None:
    """``index`` keeps each declared key row-aligned (the contract the shapes describe)."""
    n = 3
    batch = TransitionBatch(
        obs={"state": torch.zeros(n, 2)}, action=torch.zeros(n, 1), reward=torch.zeros(n),
        terminated=torch.zeros(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
        next_obs={"state": torch.zeros(n, 2)}, intervened=torch.zeros(n, dtype=torch.bool),
        policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n),
        extras={extras_mod.DISCOUNT.name: torch.tensor([0.9, 0.81, 0.729])})
    assert torch.equal(batch.index(torch.tensor([2])).extras[extras_mod.DISCOUNT.name], torch.tensor([0.729]))
