"""The student: a small SAC actor that the C exporter takes, checked against a flash/RAM budget before training.

A student is a :class:`~robot_rl.policies.sac_networks.SACPolicy` built by :class:`~robot_rl.policies.sac.SACConfig`
with small settings, so that it is saved, loaded, evaluated and exported exactly like a SAC run
(``algo.type: sac`` in its ``config.yaml``, ``actor_weights`` in its checkpoint):

- ``small_cnn``: the DrQ encoder (four 3×3 convs, stride 2 then 1, ReLU, Flatten, Linear → LayerNorm → tanh) with
  ``channels`` channels and ``features`` features per camera, then an MLP head over camera features and the
  (normalised) ``state``; optionally at a smaller image size than the teacher's (``image_size``);
- ``mlp``: an MLP over the (normalised) ``state``.

Its action is the deterministic ``tanh(μ(o))·scale + bias`` (the head's ``log σ`` rows are left untrained: a
student acts deterministically). :func:`c_sizes` generates its float32 and int8_full C in memory (the exporter's own
generators, calibrated on random observations) and :func:`check_budget` refuses a student whose int8_full
constants or workspace exceed the budget, before any training.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import TaskConfig
from robot_rl.core.specs import EnvSpec
from robot_rl.distill.config import DistillError, StudentConfig
from robot_rl.policies.sac import SACConfig
from robot_rl.policies.sac_networks import SACPolicy


class StudentNotExportableError(DistillError):
    """The student would not export to C, or not fit its flash/RAM budget; the message says what to change."""


@dataclass
class CSizes:
    """What the C generator reports for a student (before linking: code adds a few KB of flash)."""

    architecture: str
    float32_const: int
    """Bytes of weights and constants (flash) of the float32 C."""
    float32_workspace: int
    """Bytes of static activation buffers (RAM) of the float32 C."""
    int8_full_const: int
    int8_full_workspace: int

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dataclasses.asdict(self)


def student_task(teacher_task: TaskConfig, cfg: StudentConfig) -> TaskConfig:
    """The task the student acts in: the teacher's, at ``cfg.image_size`` when that is set."""
    if cfg.image_size is None:
        return dataclasses.replace(teacher_task)
    names = {f.name for f in dataclasses.fields(teacher_task)}
    if "image_size" not in names:
        raise DistillError(f"the teacher's task ({type(teacher_task).__name__}) has no image_size to change: leave "
                           "the student's image_size unset (the student then sees the teacher's images)")
    return dataclasses.replace(teacher_task, image_size=cfg.image_size)  # type: ignore[call-arg]


def student_algo(cfg: StudentConfig) -> SACConfig:
    """The SAC config that builds the student (only its actor is ever built)."""
    return SACConfig(actor_hidden=tuple(cfg.hidden), image_channels=cfg.channels, image_features=cfg.features,
                     image_encoder="cnn", normalize_obs=cfg.normalize_state)


def build_student(spec: EnvSpec, cfg: StudentConfig, device: torch.device | str, seed: int) -> SACPolicy:
    """The untrained student for the student's ``spec``, its weights initialised from ``seed``."""
    cfg.validate()
    cams = spec.image_keys
    if cfg.kind == "small_cnn" and not cams:
        raise DistillError("the teacher observes no camera (only 'state'): use the mlp student (--student mlp)")
    if cfg.kind == "mlp" and cams:
        raise DistillError(f"the teacher observes cameras {cams}: an mlp student reads only 'state', which may not "
                           "hold what the cameras show (reach_pixels' goal); use --student small_cnn")
    try:
        return student_algo(cfg).build_policy(spec, device, seed)
    except ValueError as e:  # e.g. an image too small for four conv layers
        raise StudentNotExportableError(f"cannot build a {cfg.kind} student for this task: {e}") from e


def c_sizes(policy: SACPolicy, spec: EnvSpec, seed: int = 0) -> CSizes:
    """The student's C sizes as the exporter would generate them (int8_full calibrated on 16 random observations).

    Raises :class:`StudentNotExportableError` when the C exporter does not take the architecture.
    """
    from robot_rl.export.c_codegen import generate_c
    from robot_rl.export.c_int8 import generate_int8_c
    from robot_rl.export.c_vision import generate_vision_c
    from robot_rl.export.graph import UnsupportedArchitectureError
    from robot_rl.export.int8_full import as_vision, calibrate
    from robot_rl.export.run_export import describe, random_observations
    from robot_rl.export.vision import VisionGraph, extract_graph

    policy = policy.cpu().eval()
    try:
        graph = extract_graph(policy, spec)
    except UnsupportedArchitectureError as e:
        raise StudentNotExportableError(f"the C exporter does not take this student: {e}") from e
    vision = graph if isinstance(graph, VisionGraph) else as_vision(graph)
    float32 = (generate_vision_c(graph, "policy", "float32") if isinstance(graph, VisionGraph)
               else generate_c(graph, "policy", "float32"))
    obs = random_observations(spec, policy, 16, seed)
    images = [obs[cam.key] for cam in vision.cameras]
    state: np.ndarray | None = obs["state"] if vision.state_dim else None
    int8 = generate_int8_c(vision, calibrate(vision, images, state), "policy")
    return CSizes(describe(graph), float32.weight_bytes, float32.workspace_bytes, int8.weight_bytes,
                  int8.workspace_bytes)


def check_budget(sizes: CSizes, cfg: StudentConfig) -> None:
    """Raise :class:`StudentNotExportableError` when int8_full exceeds ``cfg.flash_budget`` or ``cfg.ram_budget``."""
    over = []
    if cfg.flash_budget and sizes.int8_full_const > cfg.flash_budget:
        over.append(f"{sizes.int8_full_const:,} B of constants (flash budget {cfg.flash_budget:,} B)")
    if cfg.ram_budget and sizes.int8_full_workspace > cfg.ram_budget:
        over.append(f"{sizes.int8_full_workspace:,} B of workspace (RAM budget {cfg.ram_budget:,} B)")
    if over:
        raise StudentNotExportableError(
            f"the {cfg.kind} student ({sizes.architecture}) needs {' and '.join(over)} as int8_full C. Shrink it: "
            "fewer --channels or --features, a smaller --image-size (the encoder's projection grows with the image "
            "area), narrower --hidden; or raise --flash-budget / --ram-budget (0 = no check)")


def save_student_run(out: Path, config: dict[str, Any], spec: EnvSpec, policy: SACPolicy,
                     meta: dict[str, Any]) -> Path:
    """Write ``out`` as a SAC run directory: ``config.yaml``, ``spec.yaml``, one checkpoint with ``actor_weights``.

    ``config``: the run config as plain data (the teacher's, with the student's ``task`` and ``algo``).
    `robot-rl eval`, `robot-rl export` and :func:`~robot_rl.policy_io.load_policy` read it like any run.
    Returns the checkpoint directory.
    """
    import yaml

    from robot_rl.checkpoint import save_checkpoint
    from robot_rl.config_io import save_yaml

    out.mkdir(parents=True, exist_ok=True)
    save_yaml(config, out / "config.yaml")
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    weights = {k: v.detach().to("cpu", copy=True) for k, v in policy.state_dict().items()}
    return save_checkpoint(out, int(meta.get("env_steps", 0)), {"actor_weights": weights}, meta)
