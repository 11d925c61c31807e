"""Forward kinematics and differential IK of a LeRobot follower arm, on its MJCF model through mink.

Units, at every public method:

- joints: LeRobot's ``<motor>.pos`` values of the arm joints (:attr:`ArmKinematics.joint_names`, LeRobot's
  motor order), in degrees with ``degrees=True`` (the default; LeRobot's followers with ``use_degrees=True``)
  or radians with ``degrees=False``. 0 is the middle of each joint's range, as LeRobot calibrates it.
  The gripper (LeRobot's 0..100, 0 closed) is not on the chain to the tool frame and never enters here.
- positions: metres in the model's base frame (x forward, z up); rotations: 3x3 matrices, tool frame to base.

Every input is checked before anything is computed: a NaN, an infinity or an absurd magnitude (a joint beyond
±360°, a target farther than ``max_abs_target_m``, a step larger than ``max_delta_m``) raises a ValueError that
names the value. IK never returns joints outside the model's limits.

One :class:`ArmKinematics` holds one MuJoCo data buffer: use one instance per thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.hardware.kinematics.config import ArmModelConfig, arm_model

INSTALL_HINT = "pip install 'robot-rl[kinematics]'"

_STALL_STEPS = 5
"""IK stops after this many iterations in a row that each gain less than ``_STALL_GAIN``."""
_STALL_GAIN = 1e-7
"""Metres (plus weighted radians): iterations that improve on the best less than this have found the closest
reachable point."""
_CARTESIAN_STEP_M = 0.04
"""Largest tool-frame move one iteration aims for, metres."""


def _backends() -> tuple[Any, Any]:
    """``(mujoco, mink)``, imported on first use so that ``robot_rl.hardware`` never needs them."""
    from robot_rl.sims.mujoco.render import import_mujoco

    try:
        # First, and physics only: mink's own import of MuJoCo would fail inside PyOpenGL without libOSMesa.
        mujoco = import_mujoco(renders=False)
        import mink
    except ImportError as e:
        raise ImportError(f"arm kinematics need mujoco and mink, and {e.name} is not installed: {INSTALL_HINT}") from e
    return mujoco, mink


@dataclass
class IKResult:
    """What :meth:`ArmKinematics.solve` reached.

    ``q`` ``[n]`` joint goal in the units asked for; ``position`` ``[3]`` where the tool frame is at ``q``;
    ``target`` ``[3]`` the target pursued, after clipping into the workspace box; ``position_error_m`` the
    distance between the two; ``clipped`` whether the box moved the target; ``converged`` whether the error is
    within ``position_tolerance_m`` (False for a target out of reach: ``q`` is then the closest point found);
    ``rotation_error_deg`` the angle left to ``target_rot`` (None without one); ``iterations`` mink QPs solved.
    """

    q: np.ndarray
    position: np.ndarray
    target: np.ndarray
    position_error_m: float
    clipped: bool
    iterations: int
    converged: bool
    rotation_error_deg: float | None = None


def _vector(label: str, value: Any, n: int, names: Sequence[str]) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{label} must be {n} numbers ({', '.join(names)}), got {value!r}") from e
    if arr.shape != (n,):
        raise ValueError(f"{label} must have shape ({n},) ({', '.join(names)}), got shape {arr.shape}")
    return arr


def _check_bounded(label: str, arr: np.ndarray, names: Sequence[str], bound: float, unit: str, why: str) -> None:
    for name, v in zip(names, arr.tolist()):
        if not math.isfinite(v):
            raise ValueError(f"{label} {name} = {v} is not finite; nothing was computed")
        if abs(v) > bound:
            raise ValueError(f"{label} {name} = {v:g} {unit} is beyond ±{bound:g} {unit} ({why}); nothing was computed")


def _angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    """Angle of the rotation between two rotation matrices, degrees."""
    return math.degrees(math.acos(max(-1.0, min(1.0, (float(np.trace(a.T @ b)) - 1.0) / 2.0))))


def _check_rotation(label: str, value: Any) -> np.ndarray:
    try:
        rot = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{label} must be a 3x3 rotation matrix, got {value!r}") from e
    if rot.shape != (3, 3):
        raise ValueError(f"{label} must be a 3x3 rotation matrix, got shape {rot.shape}")
    if not np.isfinite(rot).all():
        raise ValueError(f"{label} has non-finite entries {rot.tolist()}; nothing was computed")
    if np.abs(rot.T @ rot - np.eye(3)).max() > 1e-3 or np.linalg.det(rot) < 0:
        raise ValueError(f"{label} is not a rotation matrix (needs R^T R = I, det R = +1): {rot.tolist()}")
    return rot


class ArmKinematics:
    """FK and joint-limited differential IK of one arm model (:class:`ArmModelConfig` or a registered name).

    ``fk(q)`` gives the tool frame's pose; ``ik(q_now, target_pos[, target_rot])`` the joint goal that brings it
    to the target clipped into the workspace box (or as close as the arm reaches), found by iterating mink's QP
    from ``q_now`` under the joint limits. See the module docstring for units.
    """

    def __init__(self, config: ArmModelConfig | str = "so101") -> None:
        self.config = arm_model(config) if isinstance(config, str) else config
        mujoco, mink = _backends()
        self._mujoco, self._mink = mujoco, mink
        self._check_solver()
        cfg = self.config
        self.model = mujoco.MjModel.from_xml_path(str(cfg.model_path()))
        self._data = mujoco.MjData(self.model)
        self._site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, cfg.ee_site)
        if self._site < 0:
            sites = [self.model.site(i).name for i in range(self.model.nsite)]
            raise ValueError(f"{cfg.model_file} has no site {cfg.ee_site!r} (sites: {', '.join(sites) or 'none'})")
        ids = []
        for name in cfg.joint_names:
            jid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if jid < 0 or self.model.jnt_type[jid] != mujoco.mjtJoint.mjJNT_HINGE:
                joints = [self.model.joint(i).name for i in range(self.model.njnt)]
                raise ValueError(f"{cfg.model_file} has no hinge joint {name!r} (joints: {', '.join(joints)})")
            ids.append(jid)
        self._qadr = self.model.jnt_qposadr[ids].copy()
        self._low, self._high = self.model.jnt_range[ids, 0].copy(), self.model.jnt_range[ids, 1].copy()
        self._signs = np.asarray(cfg.joint_signs, dtype=np.float64)
        self._offsets = np.radians(np.asarray(cfg.joint_offsets_deg, dtype=np.float64))
        self._q0 = self.model.qpos0.copy()
        # Restart points: the middle of the ranges (LeRobot's 0), then fixed pseudo-random poses, so the same
        # call always gives the same answer.
        spread = np.random.default_rng(0).uniform(self._low, self._high, size=(max(cfg.restarts - 1, 0), len(ids)))
        self._seeds = [np.clip(self._offsets, self._low, self._high), *spread]
        self._configuration = mink.Configuration(self.model)
        self._task = mink.FrameTask(cfg.ee_site, "site", position_cost=1.0, orientation_cost=0.0)
        step = math.radians(cfg.max_step_deg)
        # A zero speed pins every joint IK does not own (the gripper) where it is.
        speeds = {self.model.joint(j).name: (step if j in ids else 0.0) for j in range(self.model.njnt)}
        self._limits = [mink.ConfigurationLimit(self.model), mink.VelocityLimit(self.model, speeds)]

    def _check_solver(self) -> None:
        import qpsolvers

        if self.config.solver not in qpsolvers.available_solvers:
            raise ImportError(f"QP solver {self.config.solver!r} is not installed (available: "
                              f"{', '.join(qpsolvers.available_solvers) or 'none'}): {INSTALL_HINT}")

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The arm joints, in the order of every ``q`` array."""
        return tuple(self.config.joint_names)

    def joint_limits(self, *, degrees: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` ``[n]`` of the model's joint ranges, in LeRobot's units (see the module docstring)."""
        a, b = self._from_model(self._low, degrees), self._from_model(self._high, degrees)
        return np.minimum(a, b), np.maximum(a, b)

    @property
    def workspace(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` corners of the workspace box, metres."""
        return np.asarray(self.config.workspace_low, float), np.asarray(self.config.workspace_high, float)

    def clip_to_workspace(self, position: Any) -> np.ndarray:
        """``position`` ``[3]`` clipped into the workspace box (after the same checks as an IK target)."""
        pos = _vector("position", position, 3, "xyz")
        _check_bounded("position", pos, "xyz", self.config.max_abs_target_m, "m", "max_abs_target_m")
        low, high = self.workspace
        return np.clip(pos, low, high)

    def fk(self, q: Any, *, degrees: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Tool-frame pose at joints ``q`` ``[n]``: ``(position [3] metres, rotation [3, 3])`` in the base frame."""
        return self._fk_model(self._to_model(self._check_joints("q", q, degrees), degrees))

    def ik(self, q_now: Any, target_pos: Any, target_rot: Any = None, *, degrees: bool = True,
           max_iterations: int | None = None, restarts: int | None = None) -> np.ndarray:
        """Joint goal ``[n]`` that brings the tool frame to ``target_pos`` (clipped into the box); see :meth:`solve`."""
        return self.solve(q_now, target_pos, target_rot, degrees=degrees, max_iterations=max_iterations,
                          restarts=restarts).q

    def solve(self, q_now: Any, target_pos: Any, target_rot: Any = None, *, degrees: bool = True,
              max_iterations: int | None = None, restarts: int | None = None) -> IKResult:
        """Differential IK from ``q_now`` ``[n]`` towards ``target_pos`` ``[3]`` (and ``target_rot`` ``[3, 3]``).

        The target is clipped into the workspace box first. Each iteration is one mink QP: the tool-frame error
        (position, plus orientation weighted by ``orientation_cost`` when ``target_rot`` is given) under the joint
        limits and a per-iteration step limit. It stops at ``position_tolerance_m``, when progress stalls (the
        target is out of reach: the result is the closest point the iteration finds), or after
        ``max_iterations`` (``max_iterations=1`` is one differential step, for a control loop). If it stalls short
        of the target, up to ``restarts`` other starts are tried (default ``ArmModelConfig.restarts``; 0 keeps the
        answer on the branch of ``q_now``). A ``q_now`` slightly past a limit (a measured pose) is clipped into the
        limits before solving.
        """
        cfg = self.config
        q = self._check_joints("q_now", q_now, degrees)
        target = _vector("target_pos", target_pos, 3, "xyz")
        _check_bounded("target_pos", target, "xyz", cfg.max_abs_target_m, "m", "max_abs_target_m")
        rot = None if target_rot is None else _check_rotation("target_rot", target_rot)
        iterations = cfg.max_iterations if max_iterations is None else int(max_iterations)
        if iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        tries = cfg.restarts if restarts is None else int(restarts)
        goal = self.clip_to_workspace(target)
        start = np.clip(self._to_model(q, degrees), self._low, self._high)
        q_model, done = self._search(start, goal, rot, iterations, tries)
        position, rotation = self._fk_model(q_model)
        error = float(np.linalg.norm(position - goal))
        return IKResult(q=self._from_model(q_model, degrees), position=position, target=goal,
                        position_error_m=error, clipped=bool(np.any(goal != target)), iterations=done,
                        converged=error <= cfg.position_tolerance_m,
                        rotation_error_deg=None if rot is None else _angle_deg(rotation, rot))

    def ik_delta(self, q_now: Any, delta_pos: Any, delta_rot: Any = None, *, degrees: bool = True,
                 max_iterations: int | None = None) -> IKResult:
        """IK for a Cartesian step from the current tool pose (a control step: local, never restarted).

        ``delta_pos`` ``[3]`` metres in the base frame; ``delta_rot`` ``[3]`` an optional rotation vector (axis
        times angle, radians, base frame) applied to the current tool rotation. A step longer than ``max_delta_m``
        (or a rotation beyond ``max_delta_rad``) is refused, not clipped: an ``ee_delta`` controller scales its
        actions well inside these, so a larger one is a bug upstream.
        """
        cfg = self.config
        q = self._check_joints("q_now", q_now, degrees)
        step = _vector("delta_pos", delta_pos, 3, "xyz")
        _check_bounded("delta_pos", step, "xyz", cfg.max_delta_m, "m", "max_delta_m")
        if np.linalg.norm(step) > cfg.max_delta_m:
            raise ValueError(f"delta_pos {step.tolist()} is {np.linalg.norm(step):g} m long, beyond max_delta_m "
                             f"= {cfg.max_delta_m:g} m; nothing was computed")
        rotvec = None
        if delta_rot is not None:
            rotvec = _vector("delta_rot", delta_rot, 3, ("rx", "ry", "rz"))
            _check_bounded("delta_rot", rotvec, ("rx", "ry", "rz"), cfg.max_delta_rad, "rad", "max_delta_rad")
            if np.linalg.norm(rotvec) > cfg.max_delta_rad:
                raise ValueError(f"delta_rot {rotvec.tolist()} turns {np.linalg.norm(rotvec):g} rad, beyond "
                                 f"max_delta_rad = {cfg.max_delta_rad:g} rad; nothing was computed")
        position, rotation = self.fk(q, degrees=degrees)
        target_rot = None if rotvec is None else self._mink.SO3.exp(rotvec).as_matrix() @ rotation
        return self.solve(q, position + step, target_rot, degrees=degrees, max_iterations=max_iterations, restarts=0)

    # -- internals: everything below works on model radians ------------------------------------------------------

    def _check_joints(self, label: str, q: Any, degrees: bool) -> np.ndarray:
        arr = _vector(label, q, len(self.joint_names), self.joint_names)
        unit, bound = ("deg", 360.0) if degrees else ("rad", 2 * math.pi)
        _check_bounded(label, arr, self.joint_names, bound, unit, f"not a joint angle in {unit}")
        return arr

    def _to_model(self, q: np.ndarray, degrees: bool) -> np.ndarray:
        rad = np.radians(q) if degrees else q
        return self._signs * rad + self._offsets

    def _from_model(self, q_model: np.ndarray, degrees: bool) -> np.ndarray:
        rad = (q_model - self._offsets) * self._signs
        return np.degrees(rad) if degrees else rad

    def _fk_model(self, q_model: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        data = self._data
        data.qpos[:] = self._q0
        data.qpos[self._qadr] = q_model
        self._mujoco.mj_kinematics(self.model, data)
        return data.site_xpos[self._site].copy(), data.site_xmat[self._site].reshape(3, 3).copy()

    def _search(self, start: np.ndarray, goal: np.ndarray, rot: np.ndarray | None, iterations: int,
                tries: int) -> tuple[np.ndarray, int]:
        """Solve from ``start``; if that stalls short of the target, from up to ``tries`` other starts."""
        best_q, done = self._iterate(start, goal, rot, iterations)
        best = self._score(best_q, goal, rot)
        # A local solve can stall with joints pressed against their limits (a local minimum); only then are other
        # starts tried, and the first that reaches the target wins (the middle of the ranges comes first).
        for seed in self._seeds[:tries]:
            if self._reached(best):
                break
            q_try, n = self._iterate(seed, goal, rot, iterations)
            done += n
            score = self._score(q_try, goal, rot)
            if score < best:
                best_q, best = q_try, score
        if rot is not None and best[0]:
            # Five joints cannot take every orientation: when the weighted compromise cost position, position wins.
            best_q, n = self._search(best_q, goal, None, iterations, tries)
            done += n
        return best_q, done

    def _score(self, q_model: np.ndarray, goal: np.ndarray, rot: np.ndarray | None) -> tuple[bool, float, float]:
        """Ordering of solutions: position reached first, then the position error left, then the rotation error."""
        position, rotation = self._fk_model(q_model)
        error = float(np.linalg.norm(position - goal))
        missed = error > self.config.position_tolerance_m
        return missed, error if missed else 0.0, 0.0 if rot is None else _angle_deg(rotation, rot)

    def _reached(self, score: tuple[bool, float, float]) -> bool:
        return not score[0] and score[2] <= self.config.rotation_tolerance_deg

    def _iterate(self, q_model: np.ndarray, goal: np.ndarray, rot: np.ndarray | None,
                 max_iterations: int) -> tuple[np.ndarray, int]:
        """Run mink from ``q_model`` towards ``goal``: the best joints it visits (within limits), and iterations."""
        mink, cfg, conf = self._mink, self.config, self._configuration
        q_full = self._q0.copy()
        q_full[self._qadr] = q_model
        conf.update(q_full)
        self._task.set_orientation_cost(cfg.orientation_cost if rot is not None else 0.0)
        best_cost, best_q = self._aim(goal, rot), conf.q[self._qadr].copy()
        idle = done = 0
        while done < max_iterations and idle < _STALL_STEPS:
            if rot is None and best_cost <= cfg.position_tolerance_m:
                break
            # dt = 1: the QP's velocity is the joint step itself, and VelocityLimit bounds it per iteration.
            velocity = mink.solve_ik(conf, [self._task], 1.0, cfg.solver, damping=cfg.damping, limits=self._limits)
            conf.integrate_inplace(velocity, 1.0)
            done += 1
            cost = self._aim(goal, rot)
            idle = idle + 1 if best_cost - cost < _STALL_GAIN else 0
            if cost < best_cost:
                best_cost, best_q = cost, conf.q[self._qadr].copy()
        # ConfigurationLimit keeps each step inside the limits; the clip only removes floating-point overshoot.
        return np.clip(best_q, self._low, self._high), done

    def _aim(self, goal: np.ndarray, rot: np.ndarray | None) -> float:
        """Point the task one bounded step towards ``goal``; return the cost left (metres, plus weighted radians).

        The step is at most ``_CARTESIAN_STEP_M``: a linearisation is only good nearby, and a far (or unreachable)
        goal pursued in one Gauss-Newton step makes the limited QP oscillate instead of converge. Without a target
        rotation the task aims at the tool frame's current rotation, so the SE(3) error is the pure position error.
        """
        conf, mink = self._configuration, self._mink
        position = conf.data.site_xpos[self._site]
        distance = float(np.linalg.norm(goal - position))
        waypoint = position + (goal - position) * min(1.0, _CARTESIAN_STEP_M / max(distance, 1e-12))
        aim = rot if rot is not None else conf.data.site_xmat[self._site].reshape(3, 3)
        self._task.set_target(mink.SE3.from_rotation_and_translation(mink.SO3.from_matrix(aim), waypoint))
        if rot is None:
            return distance
        return distance + self.config.orientation_cost * float(np.linalg.norm(self._task.compute_error(conf)[3:]))
