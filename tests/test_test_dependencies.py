"""Every third-party module a test imports is declared where an install can find it.

That is pyproject.toml (the core dependencies or an extra: `dev` for the suite, or the extra of the feature), or,
for what cannot share the main venv, the one recipe that builds that venv. A module no declaration names is
present on the machine that wrote the test by accident (another package's dependency) and absent elsewhere, where
the test then fails to collect or skips for a reason no install instruction fixes.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Import name -> distribution name, where the two differ by more than '_' for '-'.
DISTRIBUTION = {
    "PIL": "pillow", "cv2": "opencv-python-headless", "yaml": "pyyaml", "zmq": "pyzmq", "xarm": "xarm-python-sdk",
    "rerun": "rerun-sdk", "rsl_rl": "rsl-rl-lib", "scservo_sdk": "feetech-servo-sdk",
}
# Packages that cannot share the main venv (they pin an older torch or MuJoCo): declared by their venv's recipe.
RECIPES = ("scripts/install-lerobot.sh", "benchmarks/setup_gym_hil_venv.sh")
# Imported only where found, never required by a test.
PROBED = {"triton": "conftest.py imports it first where a CUDA torch brought it (the LeRobot venv), for OSMesa"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in reqs}


def _recipes() -> set[str]:
    """The package names of the recipes' install lines (every word, less its version and quotes)."""
    words = " ".join((ROOT / r).read_text() for r in RECIPES).replace("'", " ").replace('"', " ").split()
    return {_normal(re.split(r"[<>=!~\[]", w, maxsplit=1)[0]) for w in words}


def _imports(path: Path) -> set[str]:
    """Top-level modules ``path`` imports: import statements and ``pytest.importorskip("name")``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
    return {n.split(".")[0] for n in names}


def test_every_third_party_module_a_test_imports_is_declared() -> None:
    tests = sorted((ROOT / "tests").glob("*.py"))
    # benchmarks/ scripts are ours too (test_result_file.py imports result_file from there)
    local = {p.stem for p in tests} | {p.stem for p in (ROOT / "benchmarks").glob("*.py")} | {"robot_rl"}
    declared, recipes = _declared(), _recipes()
    undeclared = []
    for path in tests:
        for module in sorted(_imports(path) - local - set(sys.stdlib_module_names) - set(PROBED)):
            dist = DISTRIBUTION.get(module, module)
            if _normal(dist) not in declared | recipes:
                undeclared.append(f"{path.name}: {module} (distribution {dist})")
    assert not undeclared, ("imported by a test but declared in no extra of pyproject.toml (nor in "
                            f"{', '.join(RECIPES)}): " + "; ".join(undeclared))
