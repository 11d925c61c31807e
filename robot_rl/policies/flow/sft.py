"""Supervised fine-tuning (behaviour cloning) of a :class:`FlowVLAPolicy` by flow matching on recorded demos.

Demos come from an episode store or a LeRobotDataset v3 (:func:`robot_rl.data.demos.read_episodes`).
Each step ``t`` of an episode becomes one training pair: its observation and the chunk
``a[t : t + H]``; past the episode's end the chunk is padded with its last action and the padding is
masked out of the loss. A dataset whose actions already are chunks ``[H', A]`` is used as is, and
``H' ≠ H`` is an error.

:func:`train_sft` runs Adam on the flow-matching loss with a progress bar, evaluates in simulation every
``eval_every`` steps (:func:`evaluate_policy`), and writes checkpoints (``<out>/checkpoints/``, atomic;
:func:`load_flow_policy` reads them back). ``robot-rl flow-sft`` is its command line.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.checkpoint import load_latest, save_checkpoint
from robot_rl.config_io import to_dict
from robot_rl.core.config import ConfigError, TaskConfig
from robot_rl.core.env import VecEnv
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.data.episode import Episode
from robot_rl.policies.flow.chunking import ChunkExecutor, ChunkExecutorConfig
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy

log = logging.getLogger(__name__)


@dataclass
class ChunkDataset:
    """Training pairs: ``obs`` ``{key: [M, ...]}``, target chunks ``actions`` ``[M, H, A]``, ``mask`` ``[M, H]``."""

    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def chunk_dataset(episodes: list[Episode], spec: EnvSpec, horizon: int) -> ChunkDataset:
    """Every step of ``episodes`` as (observation, next-``horizon``-actions chunk, validity mask)."""
    if not episodes:
        raise ConfigError("no demo episodes")
    missing = sorted(set(spec.observation) - set(episodes[0].obs))
    if missing:
        raise SpecMismatchError(f"the demos lack observation keys {missing} that the task has")
    obs: dict[str, list[np.ndarray]] = {k: [] for k in spec.observation}
    actions, masks = [], []
    for ep in episodes:
        a = np.asarray(ep.action, dtype=np.float32)
        t = len(ep)
        if a.ndim == 3:
            if a.shape[1] != horizon:
                raise SpecMismatchError(f"the dataset's action chunks have horizon {a.shape[1]}, the policy's is "
                                        f"{horizon}; set the policy horizon to {a.shape[1]} or record per-step actions")
            chunks, mask = a, np.ones((t, horizon), np.float32)
        elif a.ndim == 2:
            idx = np.arange(t)[:, None] + np.arange(horizon)[None, :]
            mask = (idx < t).astype(np.float32)
            chunks = a[np.minimum(idx, t - 1)]
        else:
            raise SpecMismatchError(f"demo actions must be [T, A] or [T, H, A], got {list(a.shape)}")
        actions.append(chunks)
        masks.append(mask)
        for k in obs:
            obs[k].append(np.asarray(ep.obs[k]))
    data = ChunkDataset({k: torch.from_numpy(np.concatenate(v)) for k, v in obs.items()},
                        torch.from_numpy(np.concatenate(actions)), torch.from_numpy(np.concatenate(masks)))
    if data.actions.shape[-1] != spec.action_dim:
        raise SpecMismatchError(f"demo actions have {data.actions.shape[-1]} dims, the task {spec.action_dim}")
    return data


@torch.no_grad()
def evaluate_policy(policy: FlowVLAPolicy, env: VecEnv, episodes: int, executor: ChunkExecutorConfig | None = None,
                    seed: int = 12345, deterministic: bool = True) -> dict[str, float]:
    """Run ``episodes`` episodes; ``{"success_rate", "mean_return", "env_steps", "chunks"}``.

    On a per-step env (action ``[A]``) chunks run through a :class:`ChunkExecutor`; on a chunk env
    (action ``[H, A]``) the env executes them itself.
    """
    policy.eval()
    obs = env.reset(seed=seed)
    chunked_env = len(env.spec.action.shape) == 2
    ex = None if chunked_env else ChunkExecutor(executor or ChunkExecutorConfig(), env.num_envs,
                                                policy.cfg.horizon, policy.action_dim, env.device)
    done_eps = successes = steps = chunks = 0
    returns = 0.0
    # Each sub-env contributes its first episodes only until the quota is met (no bias to short episodes).
    quota = -(-episodes // env.num_envs)
    per_env = torch.zeros(env.num_envs, dtype=torch.long)
    while int(per_env.clamp(max=quota).sum()) < episodes:
        if ex is None:
            action = policy.act(obs, deterministic)[0]
            chunks += 1
        else:
            action = ex.act(lambda o=obs: policy.act(o, deterministic)[0])  # type: ignore[misc]
        r = env.step(action)
        steps += env.num_envs
        done = (r.terminated | r.truncated).cpu()
        counted = done & (per_env < quota)
        successes += int((r.info["success"].cpu() & counted).sum())
        returns += float((r.info["episode_return"].cpu() * counted).sum())
        done_eps += int(counted.sum())
        per_env += done.long()
        if ex is not None:
            ex.reset(done.to(env.device))
        obs = r.obs
    policy.train()
    return {"success_rate": successes / max(done_eps, 1), "mean_return": returns / max(done_eps, 1),
            "env_steps": float(steps), "chunks": float(chunks if ex is None else ex.replans)}


@dataclass
class FlowSFTConfig:
    """Flow-matching SFT: data, optimisation, evaluation and checkpoints."""

    policy: FlowVLAConfig = field(default_factory=FlowVLAConfig)
    """Policy architecture and sampler."""
    steps: int = 2000
    """Gradient steps."""
    batch_size: int = 128
    """Training pairs per step."""
    lr: float = 1e-3
    """Adam learning rate (cosine-decayed to 10 % over ``steps``). On ``lang_reach`` 1e-3 reached 0.96 success
    after 1,250 steps (1,000 demos), 3e-4 0.04 after 1,500 (2,000 demos) and 0.71 after 5,000 (400 demos)
    (benchmarks/RESULTS_flow.md)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    eval_every: int = 500
    """Evaluate in simulation after every this many steps (0 = only at the end)."""
    eval_episodes: int = 50
    """Episodes per evaluation."""
    eval_num_envs: int = 25
    """Sub-envs of the evaluation env."""
    executor: ChunkExecutorConfig = field(default_factory=ChunkExecutorConfig)
    """How chunks run on a per-step evaluation env."""
    seed: int = 0
    """Seeds the initialisation, minibatches and flow noise."""
    device: str = "cpu"
    """Training device."""
    progress: bool = True
    """Show a progress bar."""


@dataclass
class SFTResult:
    """What :func:`train_sft` did: the policy, its evaluations ``[(step, stats)]`` and the last loss."""

    policy: FlowVLAPolicy
    evaluations: list[tuple[int, dict[str, float]]]
    final_loss: float
    wall_s: float
    checkpoint: Path | None


def save_flow_policy(out: Path, policy: FlowVLAPolicy, spec: EnvSpec, step: int, extra: dict[str, Any] | None = None
                     ) -> Path:
    """Commit ``policy`` as a checkpoint of run directory ``out`` (atomic; see robot_rl/checkpoint.py)."""
    meta = {"kind": "flow_vla", "flow_config": dataclasses.asdict(policy.cfg), "spec": spec.to_dict(),
            **(extra or {})}
    return save_checkpoint(Path(out), step, {"policy": policy.state_dict()}, meta)


def load_checkpoint_meta(run_dir: Path | str) -> dict[str, Any]:
    """The metadata of the newest checkpoint of ``run_dir`` (config, spec, task, evaluation)."""
    return load_latest(Path(run_dir))[1]


def load_flow_policy(run_dir: Path | str, device: torch.device | str = "cpu") -> tuple[FlowVLAPolicy, EnvSpec]:
    """The newest checkpoint of ``run_dir`` (written by :func:`save_flow_policy`) as a policy, and its spec."""
    state, meta, path = load_latest(Path(run_dir))
    if meta.get("kind") != "flow_vla":
        raise ConfigError(f"{path} is not a flow-VLA checkpoint (kind {meta.get('kind')!r})")
    spec = EnvSpec.from_dict(meta["spec"])
    # The checkpoint holds the backbone weights: do not read (or require) the original pretrained file.
    flow_config = {**meta["flow_config"], "pretrained_path": None}
    # Checkpoints from before the learned keypoint gain: their softmax ran at gain 1, i.e. log_gain = 0.
    legacy = "keypoint_gain" not in flow_config
    if legacy:
        flow_config["keypoint_gain"] = 1.0
    cfg = FlowVLAConfig(**flow_config)
    policy = FlowVLAPolicy(spec, cfg).to(device)
    weights = dict(state["policy"])
    if legacy:
        weights.update({k: torch.zeros_like(v) for k, v in policy.state_dict().items()
                        if k.endswith("log_gain") and k not in weights})
    policy.load_state_dict(weights, strict=True)
    return policy, spec


def train_sft(cfg: FlowSFTConfig, demos: Path | str | list[Episode], task: TaskConfig, out: Path | str | None = None
              ) -> SFTResult:
    """Train a fresh :class:`FlowVLAPolicy` on ``demos`` for the env ``task`` builds; evaluate and checkpoint."""
    from rich.progress import Progress

    from robot_rl.data.demos import read_episodes

    device = torch.device(cfg.device)
    eval_env = task.make(device, cfg.seed + 1, cfg.eval_num_envs)
    spec = eval_env.spec
    if isinstance(demos, list):
        episodes = demos
    else:
        episodes, demo_spec, _ = read_episodes(demos)
        bad = [k for k in spec.observation if k in demo_spec.observation
               and spec.observation[k].shape != demo_spec.observation[k].shape]
        if bad:
            raise SpecMismatchError(f"demo observation shapes differ from the task's for {bad}")
    data = chunk_dataset(episodes, spec, cfg.policy.horizon)
    log.info("SFT on %d pairs from %d episodes", len(data), len(episodes))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        policy = FlowVLAPolicy(spec, cfg.policy).to(device)
    opt = torch.optim.AdamW([p for n, p in policy.named_parameters() if n != "log_sigma"], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps, eta_min=0.1 * cfg.lr)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    cpu_gen = torch.Generator().manual_seed(cfg.seed)
    evaluations: list[tuple[int, dict[str, float]]] = []
    t0 = time.monotonic()
    loss_value = float("nan")
    checkpoint = None
    with Progress(disable=not cfg.progress, transient=True) as bar:
        task_id = bar.add_task("flow SFT", total=cfg.steps)
        for step in range(1, cfg.steps + 1):
            idx = torch.randint(0, len(data), (cfg.batch_size,), generator=cpu_gen)
            obs = {k: v[idx].to(device) for k, v in data.obs.items()}
            loss = policy.flow_matching_loss(obs, data.actions[idx].to(device), data.mask[idx].to(device), gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            sched.step()
            loss_value = float(loss.detach())
            bar.update(task_id, advance=1, description=f"flow SFT loss {loss_value:.4f}")
            if step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0):
                stats = evaluate_policy(policy, eval_env, cfg.eval_episodes, cfg.executor, seed=cfg.seed + 12345)
                stats["loss"] = loss_value
                evaluations.append((step, stats))
                log.info("SFT step %d: loss %.4f, success %.2f", step, loss_value, stats["success_rate"])
                if out is not None:
                    checkpoint = save_flow_policy(Path(out), policy, spec, step,
                                                  {"eval": stats, "task": to_dict(task)})
    return SFTResult(policy, evaluations, loss_value, time.monotonic() - t0, checkpoint)
