"""Policy export: ONNX (any SAC/PPO actor) and dependency-free C99 for microcontrollers (MLP and pixel actors).

Entry point: :func:`export_run` (the ``robot-rl export`` verb). See ``docs/export.md``.
"""

from robot_rl.export.c_codegen import CSources, generate_c
from robot_rl.export.c_vision import generate_vision_c
from robot_rl.export.graph import MLPGraph, UnsupportedArchitectureError, extract_mlp
from robot_rl.export.run_export import ExportReport, ExportVerificationError, export_actor, export_run, load_actor
from robot_rl.export.vision import VisionGraph, extract_graph

__all__ = ["CSources", "ExportReport", "ExportVerificationError", "MLPGraph", "UnsupportedArchitectureError",
           "VisionGraph", "export_actor", "export_run", "extract_graph", "extract_mlp", "generate_c",
           "generate_vision_c", "load_actor"]
