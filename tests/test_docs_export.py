"""docs/export.md's firmware commands (`examples/firmware`), run as typed in a fresh directory.

The page's `robot-rl export runs/<name> …` line needs a trained run; here the same export (its `--out`, `--name`
and `--variants`, parsed from the line) is made in-process from a small random-initialised actor
(`tests/test_export.py` runs the verb on a trained run). Every other line of the blocks runs in bash as the page
spells it, from a directory holding `examples/` and nothing else, so a relative path that only works from
somewhere else fails here.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.export.run_export import export_actor
from robot_rl.policies.sac import SACConfig, SACPolicy

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "export.md"
PACKAGES = "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi cmake qemu-system-arm, or " \
           "scripts/install-system-deps.sh"


def _firmware_blocks() -> list[str]:
    """The page's code blocks that configure `examples/firmware` with CMake."""
    blocks, current = [], None
    for line in PAGE.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            blocks, current = (blocks, []) if current is None else ([*blocks, "".join(current)], None)
        elif current is not None:
            current.append(line)
    return [b for b in blocks if "cmake -S examples/firmware" in b]


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} ({PACKAGES})")


def _export_as_the_page_says(line: str, cwd: Path) -> None:
    """`robot-rl export runs/<name> --format c --out OUT [--name N] [--variants V…]` on a random-initialised actor."""
    argv = shlex.split(line)
    assert argv[:2] == ["robot-rl", "export"] and argv[argv.index("--format") + 1] == "c", line
    out = argv[argv.index("--out") + 1]
    name = argv[argv.index("--name") + 1] if "--name" in argv else "policy"
    variants: list[str] = []
    if "--variants" in argv:
        for arg in argv[argv.index("--variants") + 1:]:
            if arg.startswith("-"):
                break
            variants.append(arg)
    torch.manual_seed(0)
    spec = EnvSpec({"state": ArraySpec((6,))}, ArraySpec((2,), low=-1.0, high=1.0))
    policy = SACPolicy(spec, SACConfig(actor_hidden=(16, 16)))
    kw = {"variants": tuple(variants)} if variants else {}
    export_actor(policy, spec, "c", cwd / out, name, num_random=50, num_recorded=0, targets=(), **kw)


def _run_block(block: str, cwd: Path) -> str:
    """The block's lines in bash (continuations joined, comments kept as bash reads them), the export in-process."""
    script = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("robot-rl export"):
            _export_as_the_page_says(line, cwd)
        else:
            script.append(line)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{block}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_the_page_has_the_two_firmware_blocks() -> None:
    blocks = _firmware_blocks()
    assert len(blocks) == 2, blocks
    assert blocks[0].startswith("robot-rl export") and "qemu-system-arm" in blocks[1]


@pytest.mark.integration
def test_the_firmware_build_commands_run_as_typed(tmp_path: Path) -> None:
    _need("arm-none-eabi-gcc", "cmake")
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    _run_block(_firmware_blocks()[0], tmp_path)
    for build in ("build-fw", "build-cam"):
        assert (tmp_path / build / "policy_fw.elf").is_file() and (tmp_path / build / "policy_fw.bin").is_file()


@pytest.mark.integration
def test_the_qemu_commands_run_as_typed(tmp_path: Path) -> None:
    _need("arm-none-eabi-gcc", "cmake", "qemu-system-arm")
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    first, qemu = _firmware_blocks()
    export_line = next(line for line in first.splitlines() if line.startswith("robot-rl export"))
    _export_as_the_page_says(export_line, tmp_path)
    out = _run_block(qemu, tmp_path)
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    assert int(fields["insn_per_forward"]) > 0 and fields["rc"] == "0", out


def test_the_which_variant_table_states_the_trained_reach_errors_of_the_benchmark() -> None:
    """The table's errors are benchmarks/export_variants.py --trained's, over the README's reach actor's seeds (the
    table is generated from that file: benchmarks/report.py --check keeps it so)."""
    import json

    data = json.loads((ROOT / "benchmarks" / "results" / "export_variants_trained.json").read_text())
    runs = [r for name, r in data.items() if name.startswith("reach-s")]
    assert len(runs) >= 3
    section = PAGE.read_text().split("### Which variant when", 1)[1].split("\n### ", 1)[0]
    assert "results/export_variants_trained.json -->" in section, "the table is no longer built from the trained runs"
    rows = {line.split("|")[1].strip().strip("`"): line.split("|") for line in section.splitlines()
            if line.startswith("| `")}
    for variant in ("int8", "int8_full", "q15", "q7"):
        errs = [r["variants"][variant]["recorded"] for r in runs]
        lo, hi = (float(x) for x in rows[variant][4].split(";")[1].strip().split("–"))
        assert (f"{lo:.2g}", f"{hi:.2g}") == (f"{min(errs):.2g}", f"{max(errs):.2g}"), (variant, rows[variant])
