"""``lang_push``: "push the blue block to the left" — a disc pusher, two coloured blocks, told which and where.

Each episode places a red and a blue block near the middle of a walled square arena and the pusher
elsewhere; the instruction ``"push the <colour> block to the <side>"`` (side ∈ left, right, top,
bottom) names one block and one side. Success (and termination) when that block's centre is past
``success_line · arena_half`` towards that side. Contact is the quasi-static model of
:mod:`robot_rl.sims.push`, resolved against each block in turn (blocks do not collide with each
other). The blocks are seen only in the image and the goal is given only in language. Observation:

- ``image.top``: uint8 ``[S, S, 3]`` top view (pusher black, blocks red and blue, side bands faint);
- ``state``: ``[pusher xy / arena_half (2), last action (2)]`` float32 proprioception;
- ``language``: int64 ``[context_length]`` token ids of the instruction (:class:`HashTokenizer`).

Reward (dense): ``−(gap_to_line + 0.5 · pusher_block_gap) / arena_half − step_cost + success_bonus ·
success``. Action chunks work as in ``lang_reach``: ``chunk_horizon = H > 1`` makes the action
``[H, 2]``, of which each step executes the first ``execute_steps``.

:class:`LangPushDemonstrator` is the scripted expert: it walks the pusher around the block to the
side opposite the goal (never through it), then pushes straight through the block's centre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.env import StepResult
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.chunked import ChunkDemonstrator, check_chunk_discount, chunk_extras, execute_chunk
from robot_rl.sims.lang_reach import FLOW_PPO_TUNED
from robot_rl.sims.render2d import Disc, Shape
from robot_rl.sims.torch_task import TorchTask
from robot_rl.tokenizer import HashTokenizer

#: Block colours by name (RGB).
BLOCK_COLORS: dict[str, tuple[int, int, int]] = {"red": (225, 30, 30), "blue": (30, 70, 235)}
#: Sides by name and their unit direction.
SIDES: dict[str, tuple[float, float]] = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "top": (0.0, 1.0),
                                         "bottom": (0.0, -1.0)}


@TASKS.register("lang_push")
@dataclass
class LangPushConfig(SimTaskConfig):
    """Push the block the instruction names to the side it names, seen by a top camera."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "flow_ppo": {"task.num_envs": 64, "task.chunk_horizon": 8, **FLOW_PPO_TUNED},
        "hiors": {"task.num_envs": 64, "task.chunk_horizon": 8},
        "flow_qc": {"task.num_envs": 32, "task.chunk_horizon": 8, "task.chunk_discount": 0.99}}

    max_episode_steps: int = 60
    """Primitive steps before an episode is truncated."""
    arena_half: float = 0.5
    """Half side (m) of the square arena; walls stop the pusher and the blocks."""
    success_line: float = 0.5
    """Success when the named block's centre is past this fraction of ``arena_half`` towards the named side."""
    action_scale: float = 0.04
    """Pusher displacement (m) per step and axis for action ±1."""
    pusher_radius: float = 0.04
    """Radius (m) of the pusher."""
    block_radius: float = 0.06
    """Radius (m) of each block."""
    step_cost: float = 0.1
    """Reward subtracted every step."""
    success_bonus: float = 5.0
    """Reward added on the step of success."""
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

    def validate(self) -> None:
        """Raise ``ValueError`` on geometry or settings the task cannot handle."""
        contact = self.pusher_radius + self.block_radius
        if self.action_scale >= contact:
            raise ConfigError(f"action_scale {self.action_scale:g} must be < pusher + block radius {contact:g}")
        if not 0.2 <= self.success_line <= 0.8:
            raise ConfigError(f"success_line must be in [0.2, 0.8], got {self.success_line}")
        if self.image_size < 16:
            raise ConfigError(f"image_size must be >= 16, got {self.image_size}")
        if self.chunk_horizon < 1:
            raise ConfigError(f"chunk_horizon must be >= 1, got {self.chunk_horizon}")
        execute = self.execute_steps or self.chunk_horizon
        if not 1 <= execute <= self.chunk_horizon:
            raise ConfigError(f"execute_steps must be in [1, chunk_horizon={self.chunk_horizon}], got {execute}")
        check_chunk_discount(self.chunk_discount)

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> LangPushTask:
        """Build the batched language-conditioned push task."""
        return LangPushTask(self, num_envs or self.num_envs, device, seed)


class LangPushTask(TorchTask):
    """Batched pushing of the instructed block; ``pusher`` ``[N, 2]``, ``blocks`` ``[N, 2, 2]`` may be set."""

    def __init__(self, cfg: LangPushConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        cfg.validate()
        self.cfg = cfg
        self.execute_steps = cfg.execute_steps or cfg.chunk_horizon
        self.tokenizer = HashTokenizer(cfg.vocab_size, cfg.context_length)
        self.colors, self.sides = list(BLOCK_COLORS), list(SIDES)
        # Instruction id = colour index · 4 + side index.
        self.instructions = [f"push the {c} block to the {s}" for c in self.colors for s in self.sides]
        action = (ArraySpec((2,), "float32", low=-1.0, high=1.0) if cfg.chunk_horizon == 1 else
                  ArraySpec((cfg.chunk_horizon, 2), "float32", low=-1.0, high=1.0))
        spec = EnvSpec({"image.top": ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8", low=0, high=255),
                        "state": ArraySpec((4,), "float32"),
                        "language": ArraySpec((cfg.context_length,), "int64", low=0, high=cfg.vocab_size - 1)},
                       action, chunk_extras({"task": "lang_push"},
                                            cfg.chunk_discount if cfg.chunk_horizon > 1 else 1.0))
        super().__init__(spec, num_envs, cfg.max_episode_steps, device, seed)
        self.instruction_tokens = self.tokenizer.encode_batch(self.instructions).to(self.device)
        self.side_dirs = torch.tensor(list(SIDES.values()), device=self.device)
        self.render_extent = 1.05 * cfg.arena_half
        n = self.num_envs
        self.pusher = torch.zeros(n, 2, device=self.device)
        self.blocks = torch.zeros(n, len(self.colors), 2, device=self.device)
        self.block_index = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.side_index = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.last_action = torch.zeros(n, 2, device=self.device)
        self._finish_init()

    def instruction(self, i: int) -> str:
        """The instruction text of sub-env ``i``."""
        return self.instructions[int(self.block_index[i]) * len(self.sides) + int(self.side_index[i])]

    def target_block(self) -> torch.Tensor:
        """``[N, 2]`` centre of each sub-env's instructed block."""
        return self.blocks[torch.arange(self.num_envs, device=self.device), self.block_index]

    def direction(self) -> torch.Tensor:
        """``[N, 2]`` unit direction of each sub-env's instructed side."""
        return self.side_dirs[self.side_index]

    def _reset_envs(self, mask: torch.Tensor) -> None:
        cfg, n = self.cfg, self.num_envs
        a, contact = cfg.arena_half, cfg.pusher_radius + cfg.block_radius
        # Two blocks near the middle, 2.5 block radii apart at least (resampled rows where too close).
        first = self.uniform(-0.25 * a, 0.25 * a, n, 2)
        angle = self.uniform(-math.pi, math.pi, n)
        gap = self.uniform(2.5 * cfg.block_radius, 0.4 * a, n).unsqueeze(-1)
        second = (first + gap * torch.stack([torch.cos(angle), torch.sin(angle)], -1)).clamp(-0.4 * a, 0.4 * a)
        blocks = torch.stack([first, second], dim=1)
        # The pusher starts on a ring outside both blocks' contact distance.
        p_angle = self.uniform(-math.pi, math.pi, n)
        p_radius = self.uniform(0.6 * a, 0.8 * a, n).unsqueeze(-1)
        pusher = (p_radius * torch.stack([torch.cos(p_angle), torch.sin(p_angle)], -1)).clamp(
            -(a - cfg.pusher_radius), a - cfg.pusher_radius)
        too_close = (torch.linalg.vector_norm(blocks - pusher.unsqueeze(1), dim=-1) < contact + 0.02).any(-1)
        pusher = torch.where(too_close.unsqueeze(-1), -pusher, pusher)
        block_index = torch.floor(self.rand(n) * len(self.colors)).long().clamp_(max=len(self.colors) - 1)
        side_index = torch.floor(self.rand(n) * len(self.sides)).long().clamp_(max=len(self.sides) - 1)
        # No episode starts solved: a low success_line may already be crossed; move such a block back.
        m = mask.unsqueeze(-1)
        self.blocks = torch.where(m.unsqueeze(-1), blocks, self.blocks)
        self.pusher = torch.where(m, pusher, self.pusher)
        self.block_index = torch.where(mask, block_index, self.block_index)
        self.side_index = torch.where(mask, side_index, self.side_index)
        self.last_action = torch.where(m, torch.zeros_like(self.last_action), self.last_action)
        solved = self._progress() >= 0
        if bool((solved & mask).any()):
            rows = solved & mask
            target = self.target_block()
            fixed = self.blocks.clone()
            fixed[torch.arange(n, device=self.device), self.block_index] = torch.where(
                rows.unsqueeze(-1), target - self.direction() * (0.5 * cfg.success_line * a), target)
            self.blocks = fixed

    def _progress(self) -> torch.Tensor:
        """``[N]`` signed distance (m) of the instructed block past its success line (≥ 0: success)."""
        along = (self.target_block() * self.direction()).sum(-1)
        return along - self.cfg.success_line * self.cfg.arena_half

    def _apply_action(self, action: torch.Tensor) -> None:
        cfg = self.cfg
        contact = cfg.pusher_radius + cfg.block_radius
        p_lim, o_lim = cfg.arena_half - cfg.pusher_radius, cfg.arena_half - cfg.block_radius
        pusher = (self.pusher + cfg.action_scale * action).clamp(-p_lim, p_lim)
        blocks = self.blocks.clone()
        for j in range(blocks.shape[1]):
            obj = blocks[:, j]
            delta = obj - pusher
            dist = torch.linalg.vector_norm(delta, dim=-1, keepdim=True)
            fallback = torch.where(action.abs().sum(-1, keepdim=True) > 0, action, torch.ones_like(action))
            normal = torch.where(dist > 1e-9, delta / dist.clamp_min(1e-9),
                                 fallback / fallback.norm(dim=-1, keepdim=True))
            obj = torch.where(dist < contact, pusher + normal * contact, obj).clamp(-o_lim, o_lim)
            # Where a wall stopped the block, back the pusher off along the new contact normal.
            delta = obj - pusher
            dist = torch.linalg.vector_norm(delta, dim=-1, keepdim=True)
            normal = torch.where(dist > 1e-9, delta / dist.clamp_min(1e-9), normal)
            pusher = torch.where(dist < contact - 1e-6, obj - normal * contact, pusher)
            blocks[:, j] = obj
        self.pusher, self.blocks = pusher, blocks
        self.last_action = action.clone()

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        progress = self._progress()
        success = progress >= 0
        gap = (torch.linalg.vector_norm(self.target_block() - self.pusher, dim=-1) - cfg.pusher_radius
               - cfg.block_radius).clamp_min(0.0)
        reward = (-((-progress).clamp_min(0.0) + 0.5 * gap) / cfg.arena_half - cfg.step_cost
                  + cfg.success_bonus * success.float())
        return reward, success, success

    def _observe(self) -> dict[str, torch.Tensor]:
        image = self.render_rows(slice(0, self.num_envs), self.cfg.image_size)
        state = torch.cat([self.pusher / self.cfg.arena_half, self.last_action], dim=-1)
        ids = self.block_index * len(self.sides) + self.side_index
        return {"image.top": image, "state": state, "language": self.instruction_tokens[ids]}

    def _scene(self, rows: slice) -> list[Shape]:
        cfg = self.cfg
        shapes: list[Shape] = [Disc(self.blocks[rows, j], cfg.block_radius, BLOCK_COLORS[c])
                               for j, c in enumerate(self.colors)]
        return [*shapes, Disc(self.pusher[rows], cfg.pusher_radius, (20, 20, 20))]

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply one action ``[N, 2]`` or a chunk ``[N, H, 2]`` (its first ``execute_steps`` actions).

        As ``lang_reach``: rewards add up over the executed actions, and a sub-env stops executing its
        chunk at the step it succeeds or runs out of time (a zero action leaves the scene unchanged).
        """
        return execute_chunk(self, action, self.execute_steps, self._apply_while_alive, self.cfg.chunk_discount)

    def _apply_while_alive(self, action: torch.Tensor, alive: torch.Tensor) -> None:
        # A zero action leaves the scene unchanged; the last action (observed) is kept as well.
        last = self.last_action
        self._apply_action(action * alive.unsqueeze(-1))
        self.last_action = torch.where(alive.unsqueeze(-1), self.last_action, last)

    def expert_chunk(self, horizon: int) -> torch.Tensor:
        """The scripted expert's next ``horizon`` actions ``[N, horizon, 2]``, planned on a copy of the scene."""
        saved = (self.pusher.clone(), self.blocks.clone(), self.last_action.clone())
        actions = []
        for _ in range(horizon):
            a = self._expert_action()
            self._apply_action(a)
            actions.append(a)
        self.pusher, self.blocks, self.last_action = saved
        return torch.stack(actions, dim=1)

    def _expert_action(self) -> torch.Tensor:
        cfg = self.cfg
        contact = cfg.pusher_radius + cfg.block_radius
        block, d, p = self.target_block(), self.direction(), self.pusher
        behind = block - d * (contact + 0.01)
        rel = p - block
        along = (rel * d).sum(-1, keepdim=True)  # < 0: the pusher is on the pushing side
        perp = rel - along * d
        side = torch.where(perp.norm(dim=-1, keepdim=True) > 1e-6, perp / perp.norm(dim=-1, keepdim=True).clamp_min(
            1e-6), torch.stack([-d[:, 1], d[:, 0]], -1))
        # Not yet behind the block: go around it (sideways clearance first), never through it.
        clear = contact + 0.04
        around = torch.where(along > -0.5 * contact, block + side * clear - d * 0.5 * clear, behind)
        aligned = (perp.norm(dim=-1, keepdim=True) < 0.02) & (along < -0.5 * contact)
        # Behind and on the line: push through the centre (small correction keeps the line).
        push = d + (block - d * contact - p) / cfg.action_scale * 0.5
        target_step = torch.where(aligned, push * cfg.action_scale, around - p)
        return (target_step / cfg.action_scale).clamp(-1.0, 1.0)


class LangPushDemonstrator(ChunkDemonstrator):
    """Scripted expert for :class:`LangPushTask` (privileged block positions); ``act`` matches the action spec."""

    task_type = LangPushTask
    task_id = "lang_push"
