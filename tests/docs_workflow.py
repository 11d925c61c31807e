"""benchmarks/hil_cli_workflow.py as a module: the tests of the documented HIL workflows read and run its blocks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "hil_cli_workflow.py"


def hil_cli_workflow() -> ModuleType:
    """The benchmark script, imported from its path (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("hil_cli_workflow", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
