"""``lang_reach``: "reach the red target" — the ``reach`` arm among coloured targets, told which by language.

Each episode places ``num_targets`` (2–3) targets of different colours around the base and picks one;
the instruction ``"reach the <colour> target"`` names it. The targets are visible only in the image, and
which one counts only in the instruction, so a policy must read both. Dynamics and reward are those of
:mod:`robot_rl.sims.reach` (``ee`` control), with the chosen target as the goal. Observation:

- ``image.top``: uint8 ``[S, S, 3]`` top view (arm in greys, targets in their colours);
- ``state``: ``[cos q (2), sin q (2), ee xy / reach (2)]`` float32 proprioception;
- ``language``: int64 ``[context_length]`` token ids of the instruction (:class:`HashTokenizer`); absent with
  ``observe_language: false`` (one target, which the image alone shows).

Action chunks. With ``chunk_horizon = H > 1`` the action is a chunk ``[H, 2]`` and one ``step`` executes
its first ``execute_steps`` actions (receding horizon, default all ``H``): rewards add up, a sub-env that
succeeds mid-chunk stops there (the rest of its chunk is not applied), and ``max_episode_steps`` counts
primitive steps. This is what chunk-level RL (``flow_ppo``) acts in; SFT demos are recorded with ``H = 1``.

:class:`LangReachDemonstrator` is the scripted expert: it steers the end-effector straight at the
instructed target (``a = clip((goal − ee) / action_scale, ±1)``), and plans whole chunks the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.env import StepResult
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.chunked import ChunkDemonstrator, check_chunk_discount, chunk_extras, execute_chunk
from robot_rl.sims.reach import ReachConfig, ReachTask, forward_kinematics
from robot_rl.sims.render2d import Capsule, Disc, Shape
from robot_rl.tokenizer import HashTokenizer

#: Target colours by name (RGB), in the order targets are assigned.
COLORS: dict[str, tuple[int, int, int]] = {"red": (225, 30, 30), "green": (30, 170, 50), "blue": (30, 70, 235)}


#: Flow-Noise PPO settings that lifted lang_reach past 0.9 (benchmarks/RESULTS_flow.md): PPO's clip region and
#: the KL guard both allow a mean shift ∝ σ per denoising step, so at σ₀ = 0.05 the policy barely moved; the
#: encoder trains too (flow_ppo's auto default for our own policy).
FLOW_PPO_TUNED: dict[str, Any] = {"algo.policy.init_noise_std": 0.3, "algo.kl_target": 40.0, "algo.actor_lr": 3e-4}


@TASKS.register("lang_reach")
@dataclass
class LangReachConfig(ReachConfig):
    """Reach the target the instruction names, among coloured targets seen by a top camera."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "flow_ppo": {"task.num_envs": 64, "task.chunk_horizon": 8, **FLOW_PPO_TUNED},
        "hiors": {"task.num_envs": 64, "task.chunk_horizon": 8},
        "flow_qc": {"task.num_envs": 32, "task.chunk_horizon": 8, "task.chunk_discount": 0.99}}

    max_episode_steps: int = 40
    """Primitive steps before an episode is truncated."""
    success_radius: float = 0.1
    """Success (and termination) when the end-effector is this close (m) to the instructed target (also the
    drawn radius of the targets: at 48 px one pixel spans 4.6 cm, so the target is a ~4 px disc)."""
    action_scale: float = 0.08
    """End-effector displacement (m) per step and axis for action ±1."""
    goal_min_radius: float = 0.3
    """Targets lie at least this far (m) from the base."""
    goal_max_radius: float = 0.9
    """Targets lie at most this far (m) from the base."""
    num_targets: int = 3
    """Coloured targets per episode (1 to 3; red, green, blue in that order)."""
    image_size: int = 48
    """Side (px) of the top-view image."""
    context_length: int = 8
    """Language tokens per instruction."""
    vocab_size: int = 256
    """Token ids of the hashed-word tokenizer."""
    chunk_horizon: int = 1
    """1: the action is one ``[2]`` step; H > 1: an action chunk ``[H, 2]``."""
    execute_steps: int | None = None
    """Actions of each chunk executed per step (receding horizon); null = the whole chunk."""
    chunk_discount: float = 1.0
    """A chunk's reward is ``Σ_k chunk_discount^k · r_k`` over its executed steps (1 = the plain sum). Set it to
    the learner's γ for a chunk critic to back up the per-step discounted return (``flow_qc``'s preset does)."""
    observe_language: bool = True
    """false: no ``language`` observation (needs ``num_targets: 1``, where the image alone says which target).
    A chunk task seen through a camera and ``state`` only, which an exportable student can learn from a flow
    chunk teacher (``robot-rl distill``; the C export has no token embedding)."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> LangReachTask:
        """Build the batched language-conditioned reach task."""
        return LangReachTask(self, num_envs or self.num_envs, device, seed)


class LangReachTask(ReachTask):
    """:class:`ReachTask` with coloured targets, an instruction, a top camera and optional action chunks."""

    def __init__(self, cfg: LangReachConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        if not 1 <= cfg.num_targets <= len(COLORS):
            raise ConfigError(f"num_targets must be 1, 2 or 3, got {cfg.num_targets}")
        if not cfg.observe_language and cfg.num_targets != 1:
            raise ConfigError(f"observe_language=false needs num_targets=1: without the instruction, which of "
                              f"{cfg.num_targets} targets to reach is unobservable")
        if cfg.image_size < 16:
            raise ConfigError(f"image_size must be >= 16, got {cfg.image_size}")
        if cfg.chunk_horizon < 1:
            raise ConfigError(f"chunk_horizon must be >= 1, got {cfg.chunk_horizon}")
        execute = cfg.execute_steps or cfg.chunk_horizon
        if not 1 <= execute <= cfg.chunk_horizon:
            raise ConfigError(f"execute_steps must be in [1, chunk_horizon={cfg.chunk_horizon}], got {execute}")
        check_chunk_discount(cfg.chunk_discount)
        self.lang_cfg = cfg
        self.execute_steps = execute
        self.image_size = cfg.image_size
        self.tokenizer = HashTokenizer(cfg.vocab_size, cfg.context_length)
        self.colors = list(COLORS)[:cfg.num_targets]
        self.instructions = [f"reach the {c} target" for c in self.colors]
        self.instruction_tokens = self.tokenizer.encode_batch(self.instructions).to(device)
        observation = {
            "image.top": ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8", low=0, high=255),
            "state": ArraySpec((6,), "float32"),
        }
        if cfg.observe_language:
            observation["language"] = ArraySpec((cfg.context_length,), "int64", low=0, high=cfg.vocab_size - 1)
        self.targets = torch.zeros(num_envs, cfg.num_targets, 2, device=device)
        self.target_index = torch.zeros(num_envs, dtype=torch.int64, device=device)
        super().__init__(cfg, num_envs, device, seed, observation=observation)
        if cfg.chunk_horizon > 1:
            # Same observations; the action becomes a chunk [H, 2] (the EnvSpec is frozen: rebuild it).
            self.spec = EnvSpec(self.spec.observation, ArraySpec((cfg.chunk_horizon, 2), "float32", low=-1.0,
                                                                 high=1.0),
                                chunk_extras(self.spec.extras, cfg.chunk_discount))

    def instruction(self, i: int) -> str:
        """The instruction text of sub-env ``i``."""
        return self.instructions[int(self.target_index[i])]

    def _reset_envs(self, mask: torch.Tensor) -> None:
        n, cfg, k = self.num_envs, self.lang_cfg, self.lang_cfg.num_targets
        home = torch.tensor([0.0, math.pi / 2], device=self.device)
        q = home + self.uniform(-cfg.start_noise, cfg.start_noise, n, 2)
        # Targets spread in angle (evenly spaced, jittered by less than half the spacing) so they never overlap.
        spacing = 2 * math.pi / k
        phi = (self.uniform(-math.pi, math.pi, n, 1) + spacing * torch.arange(k, device=self.device)
               + self.uniform(-0.3 * spacing, 0.3 * spacing, n, k))
        r = torch.sqrt(self.uniform(cfg.goal_min_radius**2, cfg.goal_max_radius**2, n, k))
        targets = torch.stack([r * torch.cos(phi), r * torch.sin(phi)], dim=-1)
        index = torch.floor(self.rand(n) * k).long().clamp_(max=k - 1)
        goal = targets[torch.arange(n, device=self.device), index]
        # No episode starts solved: rotate the whole layout half a turn if the goal is at the start.
        ee = forward_kinematics(q, *self._links())[1]
        near = torch.linalg.vector_norm(goal - ee, dim=-1) < 0.15
        targets = torch.where(near[:, None, None], -targets, targets)
        goal = torch.where(near[:, None], -goal, goal)
        m = mask.unsqueeze(-1)
        self.q = torch.where(m, q, self.q)
        self.goal = torch.where(m, goal, self.goal)
        self.targets = torch.where(m.unsqueeze(-1), targets, self.targets)
        self.target_index = torch.where(mask, index, self.target_index)

    def _observe(self) -> dict[str, torch.Tensor]:
        image = self.render_rows(slice(0, self.num_envs), self.image_size)
        state = torch.cat([self._proprioception(), self.end_effector() / self.reach], dim=-1)
        obs = {"image.top": image, "state": state}
        if self.lang_cfg.observe_language:
            obs["language"] = self.instruction_tokens[self.target_index]
        return obs

    def _scene(self, rows: slice) -> list[Shape]:
        elbow, ee = forward_kinematics(self.q[rows], *self._links(rows))
        base = torch.zeros_like(elbow)
        radius = max(self.lang_cfg.success_radius, 0.04)
        shapes: list[Shape] = [Disc(self.targets[rows, j], radius, COLORS[c]) for j, c in enumerate(self.colors)]
        # Arm last, in greys, so that its colour never reads as a target and the gripper stays visible.
        return [*shapes, Capsule(base, elbow, 0.035, (110, 110, 110)), Capsule(elbow, ee, 0.03, (140, 140, 140)),
                Disc(base, 0.05, (40, 40, 40)), Disc(ee, 0.03, (20, 20, 20))]

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply one action ``[N, 2]`` or a chunk ``[N, H, 2]`` (its first ``execute_steps`` actions).

        Auto-reset as in :meth:`TorchTask.step`; rewards are summed over the executed actions, and a
        sub-env stops executing its chunk at the step it succeeds or runs out of time.
        """
        # With ee control a zero action is a no-op, so finished sub-envs simply stand still.
        return execute_chunk(self, action, self.execute_steps,
                             lambda a, alive: self._apply_action(a * alive.unsqueeze(-1)),
                             self.lang_cfg.chunk_discount)

    def expert_chunk(self, horizon: int) -> torch.Tensor:
        """The scripted expert's next ``horizon`` actions ``[N, horizon, 2]`` (planned in end-effector space)."""
        ee, scale = self.end_effector(), self.action_scale.unsqueeze(-1)
        actions = []
        for _ in range(horizon):
            a = ((self.goal - ee) / scale).clamp(-1.0, 1.0)
            ee = ee + scale * a
            actions.append(a)
        return torch.stack(actions, dim=1)


class LangReachDemonstrator(ChunkDemonstrator):
    """Scripted expert for :class:`LangReachTask` (privileged goal); ``act`` matches the action spec."""

    task_type = LangReachTask
    task_id = "lang_reach"
