"""The MuJoCo arm tasks: configs (registered as ``mujoco/<name>``) and their logic.

Every task shares one scene (``assets/arm.xml``: a 6-DoF arm with a parallel gripper on a table)
and one controller (``controller.py``); a task adds objects and defines how episodes start (torch,
from the env's generator), and, over a batched :class:`~robot_rl.sims.mujoco.readout.Readout`, what
is observed, what success is and what the reward is. Those two hooks are written once for torch
tensors (MJX backend) and numpy arrays (CPU backend), in the API both share (``arrays.py``).
MuJoCo is imported only when ``make`` builds the env.

Rewards (``reward="dense"``) are distances in units of ``distance_unit`` with a per-step cost and
a success bonus, as in the built-in ``reach``; ``reward="sparse"`` is ``0`` on success and ``-1``
otherwise (the Fetch convention). Every task terminates on success (unless ``terminate_on_success``
is off).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.mujoco.arrays import Array, namespace
from robot_rl.sims.mujoco.camera_pose import check_adjust
from robot_rl.sims.mujoco.readout import Readout

if TYPE_CHECKING:
    from robot_rl.core.algorithm import Policy
    from robot_rl.sims.mujoco.env import MujocoVecEnv
    from robot_rl.sims.mujoco.scene import SceneIndex

#: Length (m) over which the magnified offsets ``tanh(offset / FINE_SCALE)`` saturate.
FINE_SCALE = 0.05


#: The scene's cameras (assets/arm.xml): ``front`` faces the arm, ``side`` looks across the workspace
#: from the arm's right, ``top`` looks down, ``wrist`` rides on the gripper.
CAMERAS = ("front", "side", "top", "wrist")


@dataclass
class MujocoTaskConfig(SimTaskConfig):
    """Settings shared by the MuJoCo arm tasks (subclasses set the task's own)."""

    #: Object files pasted into the scene, and whether the policy commands the gripper.
    objects: ClassVar[tuple[str, ...]] = ()
    gripper_action: ClassVar[bool] = False
    #: Gripper opening (per finger, m) held when the policy does not command it.
    fixed_finger: ClassVar[float] = 0.04

    num_envs: int = 16
    """Parallel worlds (one ``MjData`` each)."""
    backend: Literal["cpu", "mjx", "warp"] = "cpu"
    """``cpu``: MuJoCo C, worlds stepped by a thread pool; ``mjx``: MuJoCo XLA (JAX), on the env's
    device (needs ``pip install 'robot-rl[mjx]'``); ``warp``: MuJoCo Warp, on the env's device (a GPU, or
    Warp's CPU device; needs ``pip install 'robot-rl[warp]'``)."""
    control: Literal["ee_delta", "joint"] = "ee_delta"
    """``ee_delta``: actions move the grip site (m, damped least-squares IK holds the gripper pointing
    down); ``joint``: actions change the six arm joint targets (rad)."""
    obs: Literal["state", "pixels", "state_pixels"] = "state"
    """``state``: one float vector; ``pixels``: ``image.<camera>`` plus the arm's own state;
    ``state_pixels``: the full state vector plus ``image.<camera>`` (a state policy beside a
    camera-based reward model: wrap with :class:`~robot_rl.core.env.SelectObservation` after the reward)."""
    camera: str = "front"
    """Camera for ``pixels`` (``front``, ``side``, ``top`` or ``wrist``)."""
    extra_cameras: tuple[str, ...] = ()
    """More cameras rendered beside ``camera`` (each its own ``image.<name>`` key), e.g. ``("side",)``
    for a reward model that needs two views to judge 3-D distances."""
    image_size: int = 64
    """Height and width (px) of ``pixels`` images."""
    camera_adjust: dict[str, list[float]] = field(default_factory=dict)
    """Per camera, seven numbers (dx, dy, dz, roll, pitch, yaw, fovy_scale): where a real camera sits relative to
    the scene's (m in its parent's frame, degrees about its own axes, factor on its field of view), as `robot-rl twin
    camera` fits it (:mod:`robot_rl.sims.mujoco.camera_pose`); e.g. ``{front: [0.03, -0.04, 0.02, 0, 0, 0, 1]}``."""
    reward: Literal["dense", "sparse"] = "dense"
    """``dense``: shaped distances; ``sparse``: 0 on success, -1 otherwise."""
    max_episode_steps: int = 50
    """Steps before an episode is truncated."""
    terminate_on_success: bool = True
    """End an episode when it succeeds. ``False`` keeps it going to the time limit (``info["success"]``
    still says where it holds): data for a success classifier, with a demonstrator holding the
    success state and wandering across its border, as one records it on a real robot."""
    frame_skip: int = 8
    """Physics steps per env step (control period = ``frame_skip · timestep``)."""
    timestep: float = 0.005
    """Physics timestep (s)."""
    num_threads: int = 0
    """``cpu`` backend: worker threads stepping the worlds (0 = one per core, but a pool only once each
    thread gets 8 worlds; below that the calling thread steps them all)."""
    action_scale: float = 0.03
    """``ee_delta``: grip-site displacement (m) per step and axis for action ±1."""
    joint_scale: float = 0.1
    """``joint``: change of the joint targets (rad) per step for action ±1."""
    ik_damping: float = 0.05
    """λ of the damped least squares ``dq = Jᵀ (J Jᵀ + λ² I)⁻¹ e``."""
    max_joint_step: float = 0.25
    """``ee_delta``: IK joint steps are clipped to this (rad) per joint and step."""
    start_noise: float = 0.15
    """Start joint angles: home pose plus uniform noise of this half-width (rad)."""
    distance_unit: float = 0.1
    """Dense reward: distances are divided by this (m)."""
    step_cost: float = 1.0
    """Dense reward: subtracted on every step (finishing sooner pays)."""
    success_bonus: float = 10.0
    """Dense reward: added on the step that succeeds."""

    def validate(self) -> None:
        """Raise ``ValueError`` on settings no env can run with."""
        if self.frame_skip < 1 or self.max_episode_steps < 1:
            raise ConfigError("frame_skip and max_episode_steps must be >= 1")
        if self.image_size < 8:
            raise ConfigError(f"image_size must be >= 8 px, got {self.image_size}")
        for cam in (self.camera, *self.extra_cameras):
            if cam not in CAMERAS:
                raise ConfigError(f"camera {cam!r} is not one of {', '.join(map(repr, CAMERAS))}")
        if len({self.camera, *self.extra_cameras}) != 1 + len(self.extra_cameras):
            raise ConfigError(f"cameras repeat: camera={self.camera!r}, extra_cameras={self.extra_cameras}")
        check_adjust(self.camera_adjust, CAMERAS)

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> MujocoVecEnv:
        """Build the batched env; MuJoCo (and JAX for ``mjx``) are imported here."""
        from robot_rl.sims.mujoco.env import MujocoVecEnv

        self.validate()
        return MujocoVecEnv(self, num_envs or self.num_envs, device, seed)

    # ---- task hooks (``ix`` gives the scene's addresses) -----------------------------------------
    # sample_start is torch (the env's generator); task_obs and evaluate take a Readout of torch
    # tensors or of numpy arrays and answer in its namespace (``arrays.namespace``).

    def state_dim(self) -> int:
        """Length of the ``state`` observation."""
        raise NotImplementedError

    def sample_start(self, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start states for all ``n`` worlds: ``qpos [n, nq]`` and ``mocap_pos [n, nmocap, 3]``."""
        raise NotImplementedError

    def task_obs(self, ix: SceneIndex, r: Readout) -> Array:
        """The task's part of ``state`` (objects, goal), ``[N, state_dim - 16]``."""
        raise NotImplementedError

    def evaluate(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        """``(dense reward [N], success [N] bool)`` of the current state."""
        raise NotImplementedError


def _uniform(gen: torch.Generator, low: tuple[float, ...], high: tuple[float, ...], n: int,
             device: torch.device) -> torch.Tensor:
    lo = torch.tensor(low, device=device)
    hi = torch.tensor(high, device=device)
    return lo + (hi - lo) * torch.rand(n, len(low), generator=gen, device=device)


def _arm_start(cfg: MujocoTaskConfig, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device,
               finger: float) -> torch.Tensor:
    qpos = torch.as_tensor(ix.home_qpos, dtype=torch.float32, device=device).repeat(n, 1)
    arm = torch.as_tensor(ix.arm_qpos, device=device)
    noise = cfg.start_noise * (2 * torch.rand(n, 6, generator=gen, device=device) - 1)
    qpos[:, arm] = qpos[:, arm] + noise
    qpos[:, torch.as_tensor(ix.finger_qpos, device=device)] = finger
    return qpos


def _mocap(ix: SceneIndex, n: int, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(ix.home_mocap, dtype=torch.float32, device=device).repeat(n, 1, 1)


def _grip(ix: SceneIndex, r: Readout) -> Array:
    return r.site_pos[:, ix.site["grip"]]


def _fine(offset: Array) -> Array:
    return namespace(offset).tanh(offset / FINE_SCALE)


def _norm(x: Array) -> Array:
    return namespace(x).linalg.vector_norm(x, axis=-1)


@TASKS.register("mujoco/reach")
@dataclass
class MujocoReachConfig(MujocoTaskConfig):
    """6-DoF arm moves its grip site onto a random goal above the table; terminates on success."""

    #: PPO's is the fastest setting to ≥ 90 % in every seed of benchmarks/presets.py (RESULTS.md, "Presets"): 64
    #: worlds need fewer env steps than 256 (a MuJoCo step of many worlds is a large part of PPO's wall-clock here).
    #: SAC keeps its [256, 256] networks although [64, 64] at batch 128 and one update per four env steps reached
    #: the threshold in 0.24x the wall-clock: this task (and reach_shifted, which inherits it) is the simulator of
    #: the co-training, twin, reward and offline-to-online benchmarks, whose figures were measured with this preset;
    #: changing it waits for their reruns.
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "sac": {"algo.learning_starts": 1000, "loop.eval_every_env_steps": 2000, "loop.eval_num_envs": 50,
                "loop.eval_episodes": 50},
        "ppo": {"task.num_envs": 64, "algo.actor_hidden": [64, 64], "algo.critic_hidden": [64, 64]},
    }

    success_radius: float = 0.03
    """Success (and termination) when the grip site is this close (m) to the goal."""
    goal_low: tuple[float, float, float] = (0.25, -0.25, 0.06)
    """Lower corner (m) of the box goals are drawn from."""
    goal_high: tuple[float, float, float] = (0.55, 0.25, 0.35)
    """Upper corner (m) of the goal box."""

    def state_dim(self) -> int:
        """16 arm numbers + goal (3) + goal − grip (3) + magnified offset (3)."""
        return 25

    def scripted_controller(self) -> Policy:
        """A proportional controller on goal − grip at this config's action scale (``jsrl.guide=scripted``)."""
        from robot_rl.sims.mujoco.reach_expert import ScriptedReachDemonstrator

        return ScriptedReachDemonstrator(self.action_scale)

    def sample_start(self, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Noisy home pose with the gripper open; goal uniform in the goal box."""
        qpos = _arm_start(self, ix, gen, n, device, self.fixed_finger)
        mocap = _mocap(ix, n, device)
        mocap[:, ix.mocap["goal"]] = _uniform(gen, self.goal_low, self.goal_high, n, device)
        return qpos, mocap

    def task_obs(self, ix: SceneIndex, r: Readout) -> Array:
        """Goal, goal − grip, tanh((goal − grip) / 5 cm)."""
        goal = r.mocap_pos[:, ix.mocap["goal"]]
        off = goal - _grip(ix, r)
        return namespace(off).concat([goal, off, _fine(off)], axis=-1)

    def evaluate(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        """``-d/unit - step_cost + bonus·success`` with ``d = |goal − grip|``."""
        d = _norm(r.mocap_pos[:, ix.mocap["goal"]] - _grip(ix, r))
        success = d < self.success_radius
        # A bool array times a float is that float's type in both namespaces (1.0 where true).
        return -d / self.distance_unit - self.step_cost + self.success_bonus * success, success


def _object_obs(ix: SceneIndex, r: Readout, joint: str, site: str) -> tuple[Array, Array]:
    a = ix.free_qpos[joint]
    pos = r.site_pos[:, ix.site[site]]
    return pos, r.qpos[:, a + 3:a + 7]


@TASKS.register("mujoco/push")
@dataclass
class MujocoPushConfig(MujocoTaskConfig):
    """Push a 5 cm cube across the table onto a goal (gripper held closed); terminates on success."""

    objects: ClassVar[tuple[str, ...]] = ("cube.xml",)
    fixed_finger: ClassVar[float] = 0.0
    presets: ClassVar[dict[str, dict[str, Any]]] = {"sac": {"algo.learning_starts": 2000}}

    max_episode_steps: int = 80
    """Steps before an episode is truncated."""
    success_radius: float = 0.04
    """Success when the cube's centre is this close (m, in the table plane) to the goal."""
    cube_low: tuple[float, float] = (0.32, -0.12)
    """Lower corner (m) of the cube's start area."""
    cube_high: tuple[float, float] = (0.45, 0.12)
    """Upper corner (m) of the cube's start area."""
    goal_low: tuple[float, float] = (0.35, -0.2)
    """Lower corner (m) of the goal area."""
    goal_high: tuple[float, float] = (0.6, 0.2)
    """Upper corner (m) of the goal area."""

    def state_dim(self) -> int:
        """16 arm numbers + cube (3 + 4) + cube − grip (3) + goal (2) + goal − cube (2) + magnified (2)."""
        return 32

    def sample_start(self, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Noisy home pose, cube and goal uniform in their areas and at least 8 cm apart."""
        qpos = _arm_start(self, ix, gen, n, device, self.fixed_finger)
        cube = _uniform(gen, self.cube_low, self.cube_high, n, device)
        goal = _uniform(gen, self.goal_low, self.goal_high, n, device)
        near = torch.linalg.vector_norm(goal - cube, dim=-1, keepdim=True) < 0.08
        goal = torch.where(near, cube + torch.tensor([0.12, 0.0], device=device), goal)
        a = ix.free_qpos["cube"]
        qpos[:, a:a + 2] = cube
        mocap = _mocap(ix, n, device)
        mocap[:, ix.mocap["goal"], :2] = goal
        mocap[:, ix.mocap["goal"], 2] = 0.0
        return qpos, mocap

    def task_obs(self, ix: SceneIndex, r: Readout) -> Array:
        """Cube pose, cube − grip, goal xy, goal − cube (xy), magnified."""
        pos, quat = _object_obs(ix, r, "cube", "cube")
        goal = r.mocap_pos[:, ix.mocap["goal"], :2]
        off = goal - pos[:, :2]
        return namespace(off).concat([pos, quat, pos - _grip(ix, r), goal, off, _fine(off)], axis=-1)

    def evaluate(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        """``-(0.5·|cube − grip| + |goal − cube|)/unit - step_cost + bonus·success``."""
        pos, _ = _object_obs(ix, r, "cube", "cube")
        d_goal = _norm(r.mocap_pos[:, ix.mocap["goal"], :2] - pos[:, :2])
        d_reach = _norm(pos - _grip(ix, r))
        success = d_goal < self.success_radius
        reward = -(0.5 * d_reach + d_goal) / self.distance_unit - self.step_cost + self.success_bonus * success
        return reward, success


@TASKS.register("mujoco/pick_cube")
@dataclass
class MujocoPickCubeConfig(MujocoTaskConfig):
    """Grasp a 5 cm cube and hold it at a goal in the air (as ManiSkill's PickCube); ends on success."""

    objects: ClassVar[tuple[str, ...]] = ("cube.xml",)
    gripper_action: ClassVar[bool] = True
    #: SAC reached 90 % in 95k env steps with these (benchmarks/RESULTS_mujoco.md; not ablated one
    #: by one): a solved episode takes about 15 steps, so 50-step episodes, 5 cm moves and a short
    #: horizon (γ 0.95, 3-step returns) carry the grasp and lift rewards back in fewer updates.
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "sac": {"algo.learning_starts": 2000, "algo.gamma": 0.95, "algo.n_step": 3, "algo.critic_layer_norm": True,
                "task.max_episode_steps": 50, "task.action_scale": 0.05, "loop.eval_every_env_steps": 5000,
                "loop.eval_num_envs": 50, "loop.eval_episodes": 50},
    }

    max_episode_steps: int = 80
    """Steps before an episode is truncated."""
    success_radius: float = 0.03
    """Success when the cube's centre is this close (m) to the goal (and the cube is grasped)."""
    cube_low: tuple[float, float] = (0.32, -0.1)
    """Lower corner (m) of the cube's start area."""
    cube_high: tuple[float, float] = (0.48, 0.1)
    """Upper corner (m) of the cube's start area."""
    goal_height: tuple[float, float] = (0.06, 0.25)
    """Range (m) of the goal's height; its xy is the cube's start ± 10 cm."""

    def state_dim(self) -> int:
        """16 arm numbers + cube (3 + 4) + cube − grip (3) + goal (3) + goal − cube (3) + magnified (3)."""
        return 35

    def scripted_controller(self) -> Policy:
        """The scripted pick (above, down, close, carry) at this config's action scale (``jsrl.guide=scripted``)."""
        from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator

        return ScriptedPickDemonstrator(self.action_scale)

    def sample_start(self, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Noisy home pose with the gripper open, cube on the table, goal above it."""
        qpos = _arm_start(self, ix, gen, n, device, 0.04)
        cube = _uniform(gen, self.cube_low, self.cube_high, n, device)
        a = ix.free_qpos["cube"]
        qpos[:, a:a + 2] = cube
        mocap = _mocap(ix, n, device)
        goal_xy = cube + _uniform(gen, (-0.1, -0.1), (0.1, 0.1), n, device)
        z = _uniform(gen, (self.goal_height[0],), (self.goal_height[1],), n, device)
        mocap[:, ix.mocap["goal"]] = torch.cat([goal_xy, z], dim=-1)
        return qpos, mocap

    def task_obs(self, ix: SceneIndex, r: Readout) -> Array:
        """Cube pose, cube − grip, goal, goal − cube, magnified."""
        pos, quat = _object_obs(ix, r, "cube", "cube")
        goal = r.mocap_pos[:, ix.mocap["goal"]]
        off = goal - pos
        return namespace(off).concat([pos, quat, pos - _grip(ix, r), goal, off, _fine(off)], axis=-1)

    def grasped(self, ix: SceneIndex, r: Readout, d_reach: Array | None = None) -> Array:
        """Cube centred between the fingers and the fingers closed on it (opening < cube + 5 mm).

        ``d_reach``: the cube–grip distance, when the caller has it already.
        """
        if d_reach is None:
            pos, _ = _object_obs(ix, r, "cube", "cube")
            d_reach = _norm(pos - _grip(ix, r))
        near = d_reach < 0.02
        left, right = (int(a) for a in ix.finger_qpos)
        opening = r.qpos[:, left] + r.qpos[:, right]
        return near & (opening < 0.055)

    def evaluate(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        """``-(|cube − grip| + |goal − cube|)/unit + grasped - step_cost + bonus·success``."""
        pos, _ = _object_obs(ix, r, "cube", "cube")
        d_goal = _norm(r.mocap_pos[:, ix.mocap["goal"]] - pos)
        d_reach = _norm(pos - _grip(ix, r))
        grasped = self.grasped(ix, r, d_reach)
        success = (d_goal < self.success_radius) & grasped
        # Bool + float array is the float array's type in both namespaces (+1.0 where grasped).
        reward = (-(d_reach + d_goal) / self.distance_unit + grasped - self.step_cost
                  + self.success_bonus * success)
        return reward, success


@TASKS.register("mujoco/peg_insert")
@dataclass
class MujocoPegInsertConfig(MujocoTaskConfig):
    """Insert a square peg held in the gripper into a hole with 3 mm clearance (contact-rich)."""

    objects: ClassVar[tuple[str, ...]] = ("peg.xml",)
    fixed_finger: ClassVar[float] = 0.0
    presets: ClassVar[dict[str, dict[str, Any]]] = {"sac": {"algo.learning_starts": 2000}}

    max_episode_steps: int = 80
    """Steps before an episode is truncated."""
    start_noise: float = 0.0
    """The peg is placed in the hand of the home pose, so the arm starts there exactly."""
    action_scale: float = 0.02
    """Grip-site displacement (m) per step and axis for action ±1 (finer than the default)."""
    insert_depth: float = 0.02
    """Success when the peg's tip is this deep (m) inside the 4 cm hole ..."""
    align_tolerance: float = 0.006
    """... and within this distance (m, in the table plane) of the hole's axis."""
    hole_low: tuple[float, float] = (0.38, -0.12)
    """Lower corner (m) of the hole's area."""
    hole_high: tuple[float, float] = (0.52, 0.12)
    """Upper corner (m) of the hole's area."""

    def validate(self) -> None:
        """The peg starts in the hand of the home pose: joint start noise would drop it."""
        super().validate()
        if self.start_noise != 0.0:
            raise ConfigError("peg_insert places the peg in the home pose's hand; start_noise must be 0")

    def state_dim(self) -> int:
        """16 arm numbers + peg tip (3) + peg quat (4) + hole (3) + hole − tip (3) + magnified (3)."""
        return 32

    def sample_start(self, ix: SceneIndex, gen: torch.Generator, n: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Home pose with the peg between the closed fingers, upright; hole uniform in its area."""
        qpos = _arm_start(self, ix, gen, n, device, 0.012)
        a = ix.free_qpos["peg"]
        # Peg centre 1 cm below the grip site: its top then clears the palm.
        centre = torch.as_tensor(ix.grip_home_pos, dtype=torch.float32, device=device) - torch.tensor(
            [0.0, 0.0, 0.01], device=device)
        qpos[:, a:a + 3] = centre
        qpos[:, a + 3:a + 7] = torch.tensor([1.0, 0.0, 0.0, 0.0], device=device)
        mocap = _mocap(ix, n, device)
        mocap[:, ix.mocap["hole"], :2] = _uniform(gen, self.hole_low, self.hole_high, n, device)
        mocap[:, ix.mocap["hole"], 2] = 0.0
        mocap[:, ix.mocap["goal"]] = torch.tensor([0.0, 0.0, -1.0], device=device)  # unused: out of sight
        return qpos, mocap

    def _tip_and_target(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        tip = r.site_pos[:, ix.site["peg_tip"]]
        hole_top = r.site_pos[:, ix.site["hole"]]
        return tip, hole_top

    def task_obs(self, ix: SceneIndex, r: Readout) -> Array:
        """Peg tip, peg quaternion, hole entry, entry − tip, magnified."""
        tip, hole = self._tip_and_target(ix, r)
        a = ix.free_qpos["peg"]
        off = hole - tip
        return namespace(off).concat([tip, r.qpos[:, a + 3:a + 7], hole, off, _fine(off)], axis=-1)

    def evaluate(self, ix: SceneIndex, r: Readout) -> tuple[Array, Array]:
        """``-(2·d_xy + |depth shortfall|)/unit - step_cost + bonus·success``."""
        tip, hole = self._tip_and_target(ix, r)
        xp = namespace(tip)
        d_xy = _norm(hole[:, :2] - tip[:, :2])
        depth = hole[:, 2] - tip[:, 2]
        success = (d_xy < self.align_tolerance) & (depth > self.insert_depth)
        # Descend only once aligned: the depth term counts in full only within 1 cm of the axis.
        shortfall = (self.insert_depth - depth).clip(min=0.0) * xp.exp(-d_xy / 0.01) + 0.1 * (
            1 - xp.exp(-d_xy / 0.01))
        reward = -(2 * d_xy + shortfall) / self.distance_unit - self.step_cost + self.success_bonus * success
        return reward, success

