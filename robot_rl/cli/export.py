"""`robot-rl export`: a run's deterministic actor as ONNX or C99, verified against torch."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.cli.base import Command


@dataclass
class ExportArgs(Command):
    """Export a run's deterministic actor to ONNX or to C99 for microcontrollers, and verify it.

    ONNX: normalisation, CNN and squashing included, dynamic batch, checked with onnxruntime. C: MLP
    actors and pixel (conv-encoder) SAC actors as a header/source pair per variant (float32/, int8/, ...
    under --out), compiled with the host compiler and compared with torch on random and recorded
    observations; with arm-none-eabi-gcc
    installed, also sized for Cortex-M4F/M7/M0+ at -Os. A report is written to <out>/EXPORT.md.
    """

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The run directory (runs/<name>); its newest verifiable checkpoint is exported."""
    format: Literal["onnx", "c"] = "onnx"
    """onnx (any SAC/PPO actor) or c (MLP actors over a flat state, pixel SAC actors with conv encoders)."""
    out: Path = Path("export")
    """Directory to write the exported files and the report into."""
    name: str = "policy"
    """Name of the ONNX file, or the C prefix: <name>.h and <name>_forward (docs/export.md gives its signatures)."""
    variants: tuple[Literal["float32", "int8", "int8_full", "q15", "q7"], ...] = ("float32", "int8")
    """C variants to write (int8: per-channel-scaled int8 weights, about 4x less flash; int8_full: int8 weights
    and activations, scales calibrated on the verification observations, error measured; q15: int16 fixed point
    with no float in the forward pass, for FPU-less cores (Cortex-M0+/M3), formats calibrated likewise, error
    bounded; q7: the same with int8 weights and activations and int32 accumulation, half q15's flash, a larger
    error). Pixel policies: float32, int8_full, q15 and q7."""
    num_random: int = 1000
    """Random observations to verify on."""
    num_recorded: int = 1000
    """Observations recorded from the run's task with the deterministic policy, to verify on."""

    def run(self) -> int:
        """Export, verify and print the report; 1 when the export cannot be made or does not verify."""
        from robot_rl.checkpoint import CheckpointError
        from robot_rl.export import ExportVerificationError, export_run
        from robot_rl.export.toolchain import ToolchainError

        try:
            report = export_run(self.run_dir, self.format, self.out, name=self.name, variants=self.variants,
                                num_random=self.num_random, num_recorded=self.num_recorded)
        except (ExportVerificationError, ToolchainError, CheckpointError, ImportError) as e:
            print(f"robot-rl export: error: {e}", file=sys.stderr)
            return 1
        print((Path(report.out_dir) / "EXPORT.md").read_text(), end="")
        return 0
