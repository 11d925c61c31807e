"""Hi-ORS-style RL for flow policies: rejection sampling + reward-weighted flow matching (after Hi-ORS, 2025).

Each update takes a rollout of chunk steps made by the current policy, follows every sub-env's episode
to its end (episodes may span rollouts), and then

- **rejects** the episodes that failed (``accept="success"``: the episode ended ``terminated``, which
  is success on the built-in tasks) or, with ``accept="top_return"``, the episodes whose return is
  below the ``1 − top_fraction`` quantile of recent returns;
- **weights** the chunks of an accepted episode by its return, ``w = min(exp(z / temperature),
  max_weight)`` with ``z`` the return standardised over recent episodes (reward-weighted regression);
- keeps **intervention** rows (``intervened``: a human chose that chunk) from every episode, accepted
  or not, with weight ``intervention_weight`` (× the episode weight when the episode is accepted).

Accepted (observation, chunk, weight) rows go into a FIFO buffer, and the update runs
``updates_per_rollout`` steps of the weighted flow-matching loss
``Σ_i w_i ‖v_θ(x_t, t, c_i) − (a_i − x_0)‖² / Σ_i w_i`` on minibatches from it, optionally mixed with
the SFT demos (``demos`` + ``demo_fraction``, weight 1) so the policy does not forget them; an attached
extension's term (``aux_loss``, e.g. co-training's loss on real demos) is added at every step. Unlike
Flow-Noise PPO there is no likelihood ratio: it is supervised learning on the policy's own best
chunks, so the whole model (encoders included) trains stably.

The task must take action chunks ``[H, A]`` with the policy's horizon (``lang_reach`` with
``task.chunk_horizon=H``; the ``hiors`` preset sets it).
"""

from __future__ import annotations

import copy
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from robot_rl.core.config import ALGOS, AlgoConfig
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.onpolicy import FlowOnPolicyAlgorithm, build_flow_policy, load_sft_into
from robot_rl.replay.rollout import RolloutStorage

log = logging.getLogger(__name__)


@ALGOS.register("hiors")
@dataclass
class HiORSConfig(AlgoConfig):
    """Rejection sampling + reward-weighted flow matching on the policy's own (and intervened) chunks."""

    policy: FlowVLAConfig = field(default_factory=FlowVLAConfig)
    """Architecture and sampler (must match the SFT checkpoint's)."""
    init_from: str | None = None
    """Run directory of a flow SFT checkpoint to start from; null = a randomly initialised policy."""
    demos: str | None = None
    """Episode store / LeRobotDataset of the SFT demos to keep mixing in (null = own rollouts only)."""
    demo_fraction: float = 0.25
    """Share of each minibatch drawn from ``demos``."""
    rollout_length: int = 4
    """Chunk steps collected per sub-env before each update."""
    accept: Literal["success", "top_return"] = "success"
    """Keep episodes that succeeded (ended ``terminated``), or those in the top ``top_fraction`` by return."""
    top_fraction: float = 0.5
    """``accept="top_return"``: share of recent episodes kept."""
    temperature: float = 1.0
    """Reward weighting: ``w = exp(z / temperature)`` of the standardised episode return ``z`` (inf = uniform)."""
    max_weight: float = 5.0
    """Upper clamp of the reward weight."""
    intervention_weight: float = 3.0
    """Weight multiplier of intervened rows (kept even from failed episodes)."""
    buffer_size: int = 20_000
    """Accepted rows kept (FIFO)."""
    min_buffer: int = 64
    """No gradient step before the buffer holds this many rows."""
    updates_per_rollout: int = 8
    """Gradient steps per update."""
    batch_size: int = 128
    """Rows per gradient step."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    freeze_encoder: bool = False
    """Keep the observation encoder fixed (default: train it too; the loss is supervised and stable)."""
    return_window: int = 500
    """Recent episode returns used to standardise returns and for the ``top_return`` quantile."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> HiORSAlgorithm:
        """Build the Hi-ORS learner."""
        return HiORSAlgorithm(self, spec, device, seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> FlowVLAPolicy:
        """The flow policy alone (no reference, buffer or optimiser; ``init_from`` is not read)."""
        return build_flow_policy(self.policy, spec, device, seed)


class AcceptedBuffer:
    """FIFO of accepted rows: observations, chunks ``[H, A]`` and weights, allocated on the first add."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        if capacity < 1:
            raise ValueError(f"buffer_size must be >= 1, got {capacity}")
        self.capacity, self.device = capacity, device
        self.obs: dict[str, torch.Tensor] = {}
        self.action = torch.empty(0)
        self.weight = torch.empty(0)
        self.size = self.cursor = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs: Obs, action: torch.Tensor, weight: torch.Tensor) -> None:
        """Append rows (the oldest are overwritten when full)."""
        n = action.shape[0]
        if n == 0:
            return
        if not self.obs:
            self.obs = {k: torch.zeros(self.capacity, *v.shape[1:], dtype=v.dtype, device=self.device)
                        for k, v in obs.items()}
            self.action = torch.zeros(self.capacity, *action.shape[1:], device=self.device)
            self.weight = torch.zeros(self.capacity, device=self.device)
        idx = (self.cursor + torch.arange(n, device=self.device)) % self.capacity
        for k, v in obs.items():
            self.obs[k][idx] = v.to(self.device)
        self.action[idx] = action.to(self.device).float()
        self.weight[idx] = weight.to(self.device).float()
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Obs, torch.Tensor, torch.Tensor]:
        """``n`` uniform rows: ``(obs, chunks, weights)``."""
        idx = torch.randint(0, self.size, (n,), generator=generator, device=generator.device).to(self.device)
        return {k: v[idx] for k, v in self.obs.items()}, self.action[idx], self.weight[idx]


class HiORSAlgorithm(FlowOnPolicyAlgorithm):
    """Learner: flow policy, open episodes per sub-env, the accepted-row buffer and AdamW."""

    def __init__(self, cfg: HiORSConfig, spec: EnvSpec, device: torch.device | str, seed: int) -> None:
        if len(spec.action.shape) != 2 or spec.action.shape[0] != cfg.policy.horizon:
            raise SpecMismatchError(f"hiors acts in action chunks [horizon={cfg.policy.horizon}, A]; the task's action "
                                    f"is {list(spec.action.shape)} (e.g. set task.chunk_horizon={cfg.policy.horizon})")
        if not 0.0 < cfg.top_fraction <= 1.0 or not 0.0 <= cfg.demo_fraction < 1.0:
            raise ValueError(f"top_fraction must be in (0, 1] and demo_fraction in [0, 1), got {cfg.top_fraction}, "
                             f"{cfg.demo_fraction}")
        if cfg.temperature <= 0 or cfg.max_weight <= 0 or cfg.intervention_weight <= 0:
            raise ValueError("temperature, max_weight and intervention_weight must be > 0")
        self.cfg, self.spec, self.device, self.seed = cfg, spec, torch.device(device), seed
        self.rollout_length = cfg.rollout_length
        self._policies_made = 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = FlowVLAPolicy(spec, cfg.policy).to(self.device)
        if cfg.init_from:
            load_sft_into(self.policy, cfg.init_from, spec, self.device)
        else:
            log.warning("hiors without algo.init_from: starting from a randomly initialised flow policy")
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        if cfg.freeze_encoder:
            self.policy.encoder.requires_grad_(False)
        params = [p for n, p in self.policy.named_parameters() if n != "log_sigma" and p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.buffer = AcceptedBuffer(cfg.buffer_size, self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.returns: deque[float] = deque(maxlen=cfg.return_window)
        # Open episodes: per sub-env, the rows seen so far and the running return.
        self._open: dict[int, list[tuple[Obs, torch.Tensor, bool]]] = {}
        self._open_return: dict[int, float] = {}
        self.episodes = self.accepted_episodes = 0
        self.demo_data = None
        if cfg.demos:
            from robot_rl.data.demos import read_episodes
            from robot_rl.policies.flow.sft import chunk_dataset

            self.demo_data = chunk_dataset(read_episodes(cfg.demos)[0], spec, cfg.policy.horizon)
        self.data_parallel: DataParallel | None = None
        self._loss: Any = self.weighted_loss

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Train on ``dp``'s ranks: each keeps its own accepted rows; judging and gradients are shared.

        Every rank judges every rank's finished episodes, in rank order, against one return history, so
        acceptance, weights and the history stay equal on the ranks; each rank's accepted rows go to its own buffer
        (a shard, as SAC's replay), and DDP averages the gradients of the weighted flow-matching loss. Gradient steps
        start when every rank's buffer holds ``min_buffer`` rows. Rank 0's parameters are copied here.
        """
        self.data_parallel = dp
        self._loss = dp.wrap_loss(self.weighted_loss, self.opt.param_groups[0]["params"])
        self.seed += 100_003 * dp.rank  # actors' sampling noise (make_policy): the same on every rank would repeat

    # ---- rejection sampling -------------------------------------------------------------------

    def _weight(self, ret: float) -> float:
        if len(self.returns) < 2 or math.isinf(self.cfg.temperature):
            return 1.0
        mean = sum(self.returns) / len(self.returns)
        std = math.sqrt(sum((r - mean) ** 2 for r in self.returns) / (len(self.returns) - 1)) + 1e-6
        return math.exp(min((ret - mean) / std / self.cfg.temperature, math.log(self.cfg.max_weight)))

    def _accepts(self, ret: float, success: bool) -> bool:
        if self.cfg.accept == "success":
            return success
        ordered = sorted(self.returns)
        cut = ordered[min(int((1.0 - self.cfg.top_fraction) * len(ordered)), len(ordered) - 1)] if ordered else ret
        return ret >= cut

    def _judge(self, ret: float, success: bool) -> tuple[bool, float]:
        """Count one finished episode into the return history; ``(accepted, its weight)``."""
        self.returns.append(ret)
        self.episodes += 1
        accepted = self._accepts(ret, success)
        self.accepted_episodes += int(accepted)
        return accepted, self._weight(ret) if accepted else 0.0

    def _finished(self, storage: RolloutStorage) -> list[tuple[list[tuple[Obs, torch.Tensor, bool]], float, bool]]:
        """Follow episodes through a rollout: ``(rows, return, success)`` of each that ended, in step order."""
        t_len, n = storage.reward.shape
        done: list[tuple[list[tuple[Obs, torch.Tensor, bool]], float, bool]] = []
        for t in range(t_len):
            for i in range(n):
                # Copies: the storage is cleared and refilled in place by the next rollout.
                row_obs = {k: v[t, i].clone() for k, v in storage.obs.items()}
                self._open.setdefault(i, []).append((row_obs, storage.action[t, i].clone(),
                                                     bool(storage.intervened[t, i])))
                self._open_return[i] = self._open_return.get(i, 0.0) + float(storage.reward[t, i])
                if bool(storage.terminated[t, i]) or bool(storage.truncated[t, i]):
                    done.append((self._open.pop(i, []), self._open_return.pop(i, 0.0),
                                 bool(storage.terminated[t, i])))
        return done

    def ingest(self, storage: RolloutStorage) -> int:
        """Follow episodes through a rollout; move the rows of finished, accepted episodes to the buffer."""
        finished = self._finished(storage)
        outcomes = [(ret, success) for _, ret, success in finished]
        dp = self.data_parallel
        judged: list[tuple[bool, float]] = []
        for rank, episodes in enumerate([outcomes] if dp is None else dp.gather_objects(outcomes)):
            verdicts = [self._judge(ret, success) for ret, success in episodes]  # in rank order on every rank
            if dp is None or rank == dp.rank:
                judged = verdicts
        new_obs: list[Obs] = []
        new_act: list[torch.Tensor] = []
        new_w: list[float] = []
        for (rows, _, _), (accepted, w) in zip(finished, judged, strict=True):
            for o, a, intervened in rows:
                row_w = (w if accepted else 1.0) * self.cfg.intervention_weight if intervened else w
                if row_w > 0:
                    new_obs.append(o)
                    new_act.append(a)
                    new_w.append(row_w)
        if new_act:
            self.buffer.add({k: torch.stack([o[k] for o in new_obs]) for k in new_obs[0]}, torch.stack(new_act),
                            torch.tensor(new_w))
        return len(new_act)

    # ---- learning -----------------------------------------------------------------------------

    def weighted_loss(self, obs: Obs, actions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``Σ w_i · flow-matching error_i / Σ w_i`` (every chunk step counts)."""
        mask = weights.unsqueeze(-1).expand(-1, actions.shape[1])
        return self.policy.flow_matching_loss(obs, actions, mask, self.generator)

    def _batch(self) -> tuple[Obs, torch.Tensor, torch.Tensor]:
        c = self.cfg
        n_demo = round(c.batch_size * c.demo_fraction) if self.demo_data is not None else 0
        obs, act, w = self.buffer.sample(c.batch_size - n_demo, self.generator)
        if n_demo and self.demo_data is not None:
            idx = torch.randint(0, len(self.demo_data), (n_demo,), generator=self.generator,
                                device=self.generator.device).cpu()
            d_obs = {k: v[idx].to(self.device) for k, v in self.demo_data.obs.items()}
            # Demo rows keep their padding mask (past the episode end) as their weight per chunk step.
            obs = {k: torch.cat([obs[k], d_obs[k]]) for k in obs}
            act = torch.cat([act, self.demo_data.actions[idx].to(self.device)])
            w = torch.cat([w, torch.ones(n_demo, device=self.device)])
        return obs, act, w

    def update(self, batch: RolloutStorage) -> dict[str, float]:
        """Ingest a full rollout (then cleared) and train on the accepted buffer."""
        storage = batch
        if not storage.is_full():
            raise RuntimeError(f"hiors update needs a full rollout; it holds {len(storage)} rows")
        added = self.ingest(storage)
        storage.clear()
        losses = []
        ready = len(self.buffer) >= self.cfg.min_buffer
        if self.data_parallel is not None:  # every rank steps, or none: DDP waits for all
            ready = not self.data_parallel.any(not ready, self.device)
        if ready:
            self.policy.train()
            for _ in range(self.cfg.updates_per_rollout):
                obs, act, w = self._batch()
                flow_loss = self._loss(obs, act, w)
                aux = self.aux_loss()  # an extension's term, e.g. co-training's λ·flow-matching loss on real demos
                loss = flow_loss if aux is None else flow_loss + aux
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
                self.opt.step()
                losses.append(float(flow_loss.detach()))
        return {"flow_loss": sum(losses) / len(losses) if losses else float("nan"), "rows_added": float(added),
                "buffer_rows": float(len(self.buffer)), "episodes": float(self.episodes),
                "accept_rate": self.accepted_episodes / max(self.episodes, 1),
                "mean_return": sum(self.returns) / max(len(self.returns), 1)}

    def state_dict(self) -> dict[str, Any]:
        """Policy, reference, optimiser, RNG and counters (the accepted buffer is not checkpointed)."""
        return {"policy": self.policy.state_dict(), "reference": self.reference.state_dict(),
                "opt": self.opt.state_dict(), "generator": self.generator.get_state(),
                "returns": list(self.returns), "episodes": self.episodes, "accepted": self.accepted_episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (strict)."""
        missing = {"policy", "reference", "opt", "generator", "returns", "episodes", "accepted"} - set(state)
        if missing:
            raise KeyError(f"hiors state is missing {sorted(missing)}")
        self.policy.load_state_dict(state["policy"], strict=True)
        self.reference.load_state_dict(state["reference"], strict=True)
        self.opt.load_state_dict(state["opt"])
        self.generator.set_state(state["generator"].cpu())
        self.returns = deque((float(r) for r in state["returns"]), maxlen=self.cfg.return_window)
        self.episodes, self.accepted_episodes = int(state["episodes"]), int(state["accepted"])
