"""Our PPO against rsl_rl's PPO (``rsl-rl-lib``) on the built-in ``reach`` task, in one process.

Both learners get the same task (same seeds, same number of sub-envs), the same network sizes,
rollout length, epochs, minibatches and PPO hyper-parameters. Each runs the same number of
iterations (collect ``rollout_length`` steps of every sub-env, then update); only collection and
update are timed. The two take turns in chunks of ``--eval-every`` iterations (who goes first
alternates), so that load from other processes on a shared machine falls on both alike. After each
chunk (untimed) both are evaluated with deterministic actions by
:func:`robot_rl.loop.evaluate.evaluate` on an identical evaluation env.

Reported: training env-steps per second, and the training time and env steps until the first
evaluation at or above ``--threshold`` success (``n/a`` if never within the budget), with ratios
ours/rsl_rl (throughput: higher is better; time to threshold: lower is better).

Our side runs the same synchronous collect → update cycle as rsl_rl's ``OnPolicyRunner.learn``
(policy.act → env.step → storage.add, then ``update`` and a weight copy to the acting policy), so
the comparison is between the algorithms and their storage, not between process layouts.

    .venv/bin/python benchmarks/ppo_vs_rsl_rl.py --iterations 60 --results benchmarks/RESULTS_ppo.md
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

import robot_rl.sims  # noqa: F401 - registers the built-in tasks
from robot_rl.config import TASKS
from robot_rl.envs import VecEnv
from robot_rl.loop.evaluate import evaluate
from robot_rl.policies.base import Policy
from robot_rl.policies.ppo import PPOConfig
from robot_rl.transition import TransitionBatch

# --------------------------------------------------------------------------------------------
# rsl_rl side
# --------------------------------------------------------------------------------------------


def make_rsl_env(env: VecEnv, seed: int) -> Any:
    """Wrap one of our VecEnvs in rsl_rl's VecEnv contract (``policy`` observation group)."""
    from rsl_rl.env import VecEnv as RslVecEnv

    class RslAdapter(RslVecEnv):
        def __init__(self) -> None:
            self.env = env
            self.num_envs = env.num_envs
            self.num_actions = env.spec.action_dim
            self.max_episode_length = env.max_episode_steps
            self.episode_length_buf = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
            self.device = env.device
            self.cfg: dict[str, Any] = {}
            self._obs = env.reset(seed=seed)

        def get_observations(self) -> TensorDict:
            return TensorDict({"policy": self._obs["state"]}, batch_size=[self.num_envs])

        def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
            # rsl_rl hands over the raw Gaussian sample; our env clamps it into [-1, 1].
            res = self.env.step(actions)
            self._obs = res.obs
            dones = (res.terminated | res.truncated).long()
            # rsl_rl bootstraps time-outs with γ·V(s_t) (it never sees the final observation).
            return self.get_observations(), res.reward, dones, {"time_outs": res.truncated}

    return RslAdapter()


def rsl_train_cfg(cfg: PPOConfig) -> dict[str, Any]:
    """rsl_rl's runner config carrying the same hyper-parameters as ``cfg``."""
    return {
        "num_steps_per_env": cfg.rollout_length,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": cfg.num_epochs, "num_mini_batches": cfg.num_minibatches,
            "clip_param": cfg.clip, "gamma": cfg.gamma, "lam": cfg.lam, "value_loss_coef": cfg.value_coef,
            "entropy_coef": cfg.entropy_coef, "learning_rate": cfg.lr, "max_grad_norm": cfg.max_grad_norm,
            "use_clipped_value_loss": cfg.use_clipped_value_loss, "schedule": cfg.schedule,
            "desired_kl": cfg.desired_kl,
            "normalize_advantage_per_mini_batch": cfg.normalize_advantage_per_minibatch,
        },
        "actor": {
            "class_name": "MLPModel", "hidden_dims": list(cfg.actor_hidden), "activation": cfg.activation,
            "obs_normalization": cfg.normalize_obs,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": cfg.init_noise_std},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": list(cfg.critic_hidden),
                   "activation": cfg.activation, "obs_normalization": cfg.normalize_obs},
    }


class RslPolicy(Policy):
    """rsl_rl's inference policy behind our :class:`Policy` interface (for the shared evaluation)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def act(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> tuple[torch.Tensor, dict]:
        td = TensorDict({"policy": obs["state"]}, batch_size=[obs["state"].shape[0]])
        return self.model(td).clamp(-1.0, 1.0), {}


def setup_rsl(cfg: PPOConfig, args: argparse.Namespace) -> Contender:
    import contextlib
    import io

    from rsl_rl.runners import OnPolicyRunner

    task = TASKS.get(args.task)(num_envs=args.num_envs)
    env = make_rsl_env(task.make("cpu", args.seed), args.seed)
    torch.manual_seed(args.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints both models
        runner = OnPolicyRunner(env, rsl_train_cfg(cfg), log_dir=None, device="cpu")
    return Contender("rsl_rl", runner.learn, lambda: RslPolicy(runner.get_inference_policy()),
                     task.make("cpu", args.seed + 1, num_envs=args.eval_envs))


# --------------------------------------------------------------------------------------------
# our side
# --------------------------------------------------------------------------------------------


def setup_ours(cfg: PPOConfig, args: argparse.Namespace) -> Contender:
    task = TASKS.get(args.task)(num_envs=args.num_envs)
    env = task.make("cpu", args.seed)
    algo = cfg.build(env.spec, "cpu", args.seed)
    policy = algo.make_policy()
    storage = algo.make_storage(env.num_envs)
    n = env.num_envs
    state = {"obs": env.reset(seed=args.seed)}
    no = torch.zeros(n, dtype=torch.bool)
    version = torch.zeros(n, dtype=torch.long)
    env_index = torch.arange(n)

    def train_chunk(iterations: int) -> None:
        obs = state["obs"]
        for _ in range(iterations):
            with torch.no_grad():
                for _ in range(cfg.rollout_length):
                    action, extras = policy.act(obs)
                    res = env.step(action)
                    done = (res.terminated | res.truncated).unsqueeze(-1)
                    next_obs = {k: torch.where(done, res.info["final_obs"][k], v) for k, v in res.obs.items()}
                    storage.add(TransitionBatch(obs, action, res.reward, res.terminated, res.truncated,
                                                next_obs, no, version, env_index, extras))
                    obs = res.obs
            algo.update(storage)
            policy.load_actor_weights(algo.actor_weights())
        state["obs"] = obs

    return Contender("ours", train_chunk, lambda: policy, task.make("cpu", args.seed + 1, num_envs=args.eval_envs))


# --------------------------------------------------------------------------------------------
# shared driver
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Contender:
    """One learner: ``train(k)`` runs ``k`` iterations, ``eval_policy()`` the current deterministic policy."""

    name: str
    train: Callable[[int], Any]
    eval_policy: Callable[[], Policy]
    eval_env: VecEnv
    iterations: int = 0
    train_s: float = 0.0
    hit_s: float | None = None
    hit_steps: int | None = None
    curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)

    def result(self, steps_per_iteration: int) -> dict[str, Any]:
        return {"name": self.name, "iterations": self.iterations, "train_s": self.train_s,
                "steps_per_s": self.iterations * steps_per_iteration / self.train_s, "hit_s": self.hit_s,
                "hit_steps": self.hit_steps, "final_success": self.curve[-1][1], "curve": self.curve}


def drive(contenders: list[Contender], cfg: PPOConfig, args: argparse.Namespace) -> None:
    """Timed training chunks in turns, each followed by an untimed evaluation."""
    steps_per_iteration = cfg.rollout_length * args.num_envs
    chunk_no = 0
    while True:
        active = [c for c in contenders if c.iterations < args.iterations
                  and not (args.stop_at_threshold and c.hit_s is not None)]
        if not active:
            return
        if chunk_no % 2:
            active.reverse()
        chunk_no += 1
        for c in active:
            k = min(args.eval_every, args.iterations - c.iterations)
            start = time.perf_counter()
            c.train(k)
            c.train_s += time.perf_counter() - start
            c.iterations += k
            success = evaluate(c.eval_policy(), c.eval_env, args.eval_episodes, seed=args.seed + 7).success_rate
            c.curve.append((c.iterations, success))
            print(f"  {c.name:7s} it {c.iterations:4d}  train {c.train_s:6.1f}s  eval success {success:.2f}",
                  flush=True)
            if c.hit_s is None and success >= args.threshold:
                c.hit_s, c.hit_steps = c.train_s, c.iterations * steps_per_iteration


def fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def table(ours: dict[str, Any], rsl: dict[str, Any]) -> str:
    rows = [
        ("training env-steps/s (higher is better)", fmt(ours["steps_per_s"], ",.0f"),
         fmt(rsl["steps_per_s"], ",.0f"), ratio(ours["steps_per_s"], rsl["steps_per_s"])),
        ("time to threshold, s (lower is better)", fmt(ours["hit_s"], ".1f"), fmt(rsl["hit_s"], ".1f"),
         ratio(ours["hit_s"], rsl["hit_s"])),
        ("env steps to threshold", fmt(ours["hit_steps"], ",d"), fmt(rsl["hit_steps"], ",d"),
         ratio(ours["hit_steps"], rsl["hit_steps"])),
        ("final eval success", f"{ours['final_success']:.2f}", f"{rsl['final_success']:.2f}", ""),
        ("iterations run / train time (s)", f"{ours['iterations']} / {ours['train_s']:.1f}",
         f"{rsl['iterations']} / {rsl['train_s']:.1f}", ""),
    ]
    lines = ["| metric | ours | rsl_rl | ours/rsl_rl |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="reach")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--iterations", type=int, default=60, help="iteration budget per learner")
    p.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations")
    p.add_argument("--eval-envs", type=int, default=100)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--threshold", type=float, default=0.9, help="eval success that counts as solved")
    p.add_argument("--stop-at-threshold", action="store_true", help="stop a learner once it is solved")
    p.add_argument("--hidden", default="128,128", help="hidden widths of actor and critic")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (both learners)")
    p.add_argument("--only", choices=["ours", "rsl_rl"], default=None)
    p.add_argument("--results", type=Path, default=None, help="write the markdown report here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    cfg = dataclasses.replace(PPOConfig(), actor_hidden=hidden, critic_hidden=hidden)
    print(f"task={args.task} num_envs={args.num_envs} hidden={hidden} rollout={cfg.rollout_length} "
          f"epochs={cfg.num_epochs} minibatches={cfg.num_minibatches} threads={args.threads}")
    contenders = [setup(cfg, args) for name, setup in (("ours", setup_ours), ("rsl_rl", setup_rsl))
                  if args.only in (None, name)]
    drive(contenders, cfg, args)
    results = {c.name: c.result(cfg.rollout_length * args.num_envs) for c in contenders}
    if len(results) < 2:
        return
    report = table(results["ours"], results["rsl_rl"])
    print(report)
    if args.results is not None:
        import rsl_rl

        header = (
            f"# PPO: ours vs rsl_rl\n\n"
            f"Date 2026-11-29. Machine: 2-core CPU, no GPU (torch {torch.__version__}, "
            f"rsl-rl-lib {getattr(rsl_rl, '__version__', '5.5.1')}, Python {platform.python_version()}).\n\n"
            f"Task `{args.task}`, {args.num_envs} sub-envs, actor/critic {list(hidden)} {cfg.activation}, "
            f"rollout {cfg.rollout_length}, {cfg.num_epochs} epochs × {cfg.num_minibatches} minibatches, "
            f"lr {cfg.lr} ({cfg.schedule}, desired KL {cfg.desired_kl}), entropy {cfg.entropy_coef}, "
            f"obs normalisation {cfg.normalize_obs}, seed {args.seed}, {args.threads} torch threads. "
            f"Budget {args.iterations} iterations each; deterministic evaluation on {args.eval_episodes} "
            f"episodes every {args.eval_every} iterations (untimed); threshold success ≥ {args.threshold}.\n\n"
            f"Command: `.venv/bin/python benchmarks/ppo_vs_rsl_rl.py --iterations {args.iterations} "
            f"--hidden {args.hidden} --num-envs {args.num_envs} --eval-every {args.eval_every}`\n\n"
        )
        curves = "\n".join(f"- {n}: " + ", ".join(f"{it}:{s:.2f}" for it, s in r["curve"])
                           for n, r in results.items())
        args.results.write_text(header + report + "\n\nEval success by iteration:\n\n" + curves + "\n")


if __name__ == "__main__":
    main()
