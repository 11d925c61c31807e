"""Which arm model to load and how to solve IK on it: :class:`ArmModelConfig` and its registry.

The three LeRobot follower arms are registered by name (``so100``, ``so101``, ``koch``); :func:`arm_model`
returns a copy of one, so that overriding a field (a smaller workspace box, a flipped joint) never changes
the preset. Nothing here imports MuJoCo or mink: reading a config costs nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from robot_rl.core.registry import Registry

ARM_JOINTS: tuple[str, ...] = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
"""The arm joints of every LeRobot follower modelled here, in LeRobot's motor order (the gripper is the sixth)."""


@dataclass
class ArmModelConfig:
    """One arm's kinematic model: the MJCF file, its tool frame, the IK workspace and the solver settings.

    Joint values at the API are LeRobot's (``<motor>.pos`` with ``use_degrees=True``: degrees, 0 at the middle
    of the calibrated range); the model works in radians. For each arm joint ``i``
    ``q_model_rad = joint_signs[i] * radians(q_lerobot_deg) + radians(joint_offsets_deg[i])``.
    The shipped models already follow LeRobot's convention, so the defaults are ``+1`` and ``0``; an arm whose
    calibration lands elsewhere is corrected here rather than by editing the MJCF.
    """

    name: str = "so101"
    """Registry name of the arm (``so100``, ``so101``, ``koch``)."""
    model_file: str = "so101.xml"
    """MJCF of the arm: a file name under ``robot_rl/hardware/kinematics/assets/`` or a path to your own."""
    ee_site: str = "gripper_tip"
    """MJCF site whose pose FK returns and IK moves (the tool frame between the fingers)."""
    joint_names: tuple[str, ...] = ARM_JOINTS
    """The joints IK moves, in the order of the ``q`` arrays; the gripper is not part of the chain to ``ee_site``."""
    joint_signs: list[float] = field(default_factory=lambda: [1.0] * len(ARM_JOINTS))
    """Per joint: +1, or -1 where the arm counts the joint the other way round from the model."""
    joint_offsets_deg: list[float] = field(default_factory=lambda: [0.0] * len(ARM_JOINTS))
    """Per joint: the model angle (degrees) at which the arm reports 0."""
    workspace_low: list[float] = field(default_factory=lambda: [0.15, -0.22, 0.03])
    """Lower corner (x, y, z) of the box IK targets are clipped into, metres in the model's base frame."""
    workspace_high: list[float] = field(default_factory=lambda: [0.36, 0.22, 0.30])
    """Upper corner (x, y, z) of the workspace box, metres."""
    max_abs_target_m: float = 1.5
    """A target coordinate farther than this from the base is refused, not clipped: it is a units mistake
    (millimetres for metres) or garbage, and no arm modelled here reaches half a metre."""
    max_delta_m: float = 0.05
    """Largest Cartesian step :meth:`ArmKinematics.ik_delta` accepts, metres; a larger one is refused."""
    max_delta_rad: float = 0.5
    """Largest rotation step :meth:`ArmKinematics.ik_delta` accepts, radians."""
    position_tolerance_m: float = 1e-4
    """IK stops once the tool frame is this close to the (clipped) target, metres."""
    rotation_tolerance_deg: float = 0.5
    """With a target rotation, a solution within this angle of it counts as reaching it (no restart needed)."""
    max_iterations: int = 100
    """Most differential-IK iterations per call; each is one mink QP solve."""
    restarts: int = 4
    """When the solve from ``q_now`` stalls short of the target (joints pressed against their limits: a local
    minimum), :meth:`ArmKinematics.solve` tries this many other starts (the middle of the ranges first) and keeps
    the reaching solution nearest ``q_now``. :meth:`ArmKinematics.ik_delta`, a control step, never restarts."""
    max_step_deg: float = 15.0
    """Largest change of any joint in one iteration (mink's VelocityLimit): a trust region that keeps every
    linearised step local, so the solver does not overshoot through a singularity."""
    orientation_cost: float = 0.05
    """Weight of the orientation error against the position error (1 per metre) when a target rotation is
    given. Five joints cannot reach an arbitrary pose; a small weight keeps position first."""
    damping: float = 1e-4
    """Levenberg-Marquardt damping of mink's QP; larger is steadier near singular poses, slower to converge."""
    solver: str = "daqp"
    """QP solver mink hands the problem to through qpsolvers (``daqp`` ships with the ``kinematics`` extra)."""

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for label, values in (("joint_signs", self.joint_signs), ("joint_offsets_deg", self.joint_offsets_deg)):
            if len(values) != n:
                raise ValueError(f"{label} has {len(values)} entries; the arm {self.name!r} has {n} joints "
                                 f"({', '.join(self.joint_names)})")
        if any(s not in (1.0, -1.0) for s in self.joint_signs):
            raise ValueError(f"joint_signs must be +1 or -1 per joint, got {self.joint_signs}")
        if len(self.workspace_low) != 3 or len(self.workspace_high) != 3:
            raise ValueError("workspace_low and workspace_high are (x, y, z) corners: three numbers each")
        if not all(math.isfinite(v) for v in (*self.workspace_low, *self.workspace_high)):
            raise ValueError(f"workspace box must be finite: {self.workspace_low} .. {self.workspace_high}")
        positive = ("max_abs_target_m", "max_delta_m", "max_delta_rad", "position_tolerance_m", "max_step_deg")
        for label in positive:
            if not getattr(self, label) > 0:
                raise ValueError(f"{label} must be positive, got {getattr(self, label)}")
        if self.max_iterations < 1 or self.restarts < 0:
            raise ValueError(f"max_iterations must be at least 1 and restarts at least 0, got {self.max_iterations} "
                             f"and {self.restarts}")
        inverted = [axis for axis, lo, hi in zip("xyz", self.workspace_low, self.workspace_high) if lo >= hi]
        if inverted:
            raise ValueError(f"workspace box is empty along {', '.join(inverted)}: "
                             f"low {self.workspace_low} must be below high {self.workspace_high}")

    def model_path(self) -> Path:
        """The MJCF file: a shipped asset by name, or the path given."""
        path = Path(self.model_file)
        if path.is_absolute() or path.parent != Path("."):
            return path
        return Path(str(resources.files("robot_rl.hardware.kinematics") / "assets" / self.model_file))


ARM_MODELS: Registry[ArmModelConfig] = Registry("arm model")
"""Arm name → its preset :class:`ArmModelConfig` (look up through :func:`arm_model`, which copies it)."""


def arm_model(name: str, **overrides: object) -> ArmModelConfig:
    """A copy of the preset registered as ``name`` with ``overrides`` applied; unknown names list the valid ones."""
    # Deep: the preset's lists must not be shared with a copy that someone edits in place.
    return dataclasses.replace(copy.deepcopy(ARM_MODELS.get(name)), **overrides)  # type: ignore[arg-type]


# Workspace boxes: in front of each arm and above its base plate, sized so that IK reaches every point of a 7x7x7
# grid over the box (docs/kinematics.md); a clipped target is then always reachable. A table-top task narrows them.
ARM_MODELS.register("so101")(ArmModelConfig(
    name="so101", model_file="so101.xml",
    workspace_low=[0.15, -0.22, 0.03], workspace_high=[0.36, 0.22, 0.30]))
ARM_MODELS.register("so100")(ArmModelConfig(
    name="so100", model_file="so100.xml",
    workspace_low=[0.15, -0.22, 0.03], workspace_high=[0.36, 0.22, 0.30]))
ARM_MODELS.register("koch")(ArmModelConfig(
    name="koch", model_file="koch.xml",
    workspace_low=[0.10, -0.16, 0.02], workspace_high=[0.26, 0.16, 0.20]))
