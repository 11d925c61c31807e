"""Flow-VLA on ``lang_reach`` (or ``--task lang_push``): SFT from N scripted demos, CPU latency, RL lifts from SFT.

Peers in the same run: the scripted expert (the demos' source, the ceiling) and a uniform-random policy
(the floor); SFT success is printed as a ratio of the expert's. Latency: one chunk at batch 1 for each
integrator and step count, against the time the chunk lasts on the robot at ``--control-hz``.

``--methods flow_ppo,dsrl,hiors,sft_more`` fine-tunes the SFT checkpoint with each method on the chunk
env (``--execute`` of each ``H``-chunk per step) and records success (100 episodes, deterministic
chunks; for flow_ppo and hiors also the sampled policy, ``success_stochastic``) and the KL to the SFT
policy against env steps and wall-clock (``metrics.flow_chain_kl``; for
DSRL the KL of its noise policy to N(0, I), an upper bound of the chunk KL). ``sft_more`` is the
control for Hi-ORS: as many further gradient steps on the demos alone. The start of each curve is the
SFT policy measured in the same run. Writes JSON to ``--out`` and a PNG plot (``--plot``).

    .venv/bin/python benchmarks/flow_bench.py --demos 400 --sft-steps 3000 --image-size 48 --methods hiors
    .venv/bin/python benchmarks/flow_bench.py --rl-only RUN/sft --demos-dir RUN/demos --methods dsrl ...
    .venv/bin/python benchmarks/flow_bench.py --merge a.json b.json --plot benchmarks/results/flow_bench_rl.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from robot_rl.core.env import VecEnv
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.flow.chunking import ChunkExecutorConfig
from robot_rl.policies.flow.dsrl import LatentNoiseEnv
from robot_rl.policies.flow.hiors import HiORSConfig
from robot_rl.policies.flow.metrics import flow_chain_kl
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.policies.flow.sft import FlowSFTConfig, chunk_dataset, evaluate_policy, load_flow_policy, train_sft
from robot_rl.policies.sac import SACConfig
from robot_rl.sims.lang_push import LangPushConfig, LangPushDemonstrator
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator, LangReachTask


def success_of(policy: object, env: object, episodes: int) -> float:
    """Success rate of any ``act(obs, deterministic)`` policy on a per-step env (first episodes per sub-env)."""
    obs = env.reset(seed=777)  # type: ignore[attr-defined]
    n = env.num_envs  # type: ignore[attr-defined]
    quota = -(-episodes // n)
    per_env = torch.zeros(n, dtype=torch.long)
    ok = done_n = 0
    while int(per_env.clamp(max=quota).sum()) < episodes:
        a, _ = policy.act(obs, True)  # type: ignore[attr-defined]
        r = env.step(a)  # type: ignore[attr-defined]
        done = r.terminated | r.truncated
        counted = done & (per_env < quota)
        ok += int((r.info["success"] & counted).sum())
        done_n += int(counted.sum())
        per_env += done.long()
        obs = r.obs
    return ok / max(done_n, 1)


class RandomPolicy:
    """Uniform actions in [-1, 1]."""

    def __init__(self, n: int) -> None:
        self.n = n

    def act(self, obs: dict, deterministic: bool = True) -> tuple[torch.Tensor, dict]:
        """Uniform random action."""
        return torch.rand(self.n, 2) * 2 - 1, {}


def latency(policy: FlowVLAPolicy, obs: dict, repeats: int) -> float:
    """Median seconds for one deterministic chunk at batch 1."""
    one = {k: v[:1] for k, v in obs.items()}
    policy.act(one, deterministic=True)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        policy.act(one, deterministic=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


TASKS_BENCHED = {"lang_reach": (LangReachConfig, LangReachDemonstrator),
                 "lang_push": (LangPushConfig, LangPushDemonstrator)}


def chunk_task(args: argparse.Namespace, horizon: int, num_envs: int) -> LangReachConfig | LangPushConfig:
    """The RL task (``--task``) taking chunks ``[H, 2]``, executing ``--execute`` of them per step.

    ``--chunk-discount`` (where the script has it) weighs a chunk's rewards per step, as the task setting does.
    """
    return TASKS_BENCHED[args.task][0](num_envs=num_envs, image_size=args.image_size, chunk_horizon=horizon,
                                       execute_steps=args.execute,
                                       chunk_discount=getattr(args, "chunk_discount", 1.0))


def eval_chunks(act: Callable[[dict], torch.Tensor], env: VecEnv, episodes: int, seed: int = 4242) -> float:
    """Success rate of ``act(obs) → action`` on a chunk env (first ``episodes`` episodes, quota per sub-env)."""
    obs = env.reset(seed=seed)
    quota = -(-episodes // env.num_envs)
    per_env = torch.zeros(env.num_envs, dtype=torch.long)
    ok = done_n = 0
    with torch.no_grad():
        while int(per_env.clamp(max=quota).sum()) < episodes:
            r = env.step(act(obs))
            done = (r.terminated | r.truncated).cpu()
            counted = done & (per_env < quota)
            ok += int((r.info["success"].cpu() & counted).sum())
            done_n += int(counted.sum())
            per_env += done.long()
            obs = r.obs
    return ok / max(done_n, 1)


class Curve:
    """Success / KL rows against env steps and wall-clock for one method."""

    def __init__(self, name: str) -> None:
        self.name, self.t0 = name, time.monotonic()
        self.rows: list[dict[str, float]] = []

    def add(self, env_steps: int, success: float, kl: float, **extra: float) -> None:
        """Record (and print) one evaluation."""
        row = {"env_steps": env_steps, "wall_s": round(time.monotonic() - self.t0, 1), "success_rate": success,
               "kl_to_sft": kl, **extra}
        self.rows.append(row)
        print(self.name, row, flush=True)


#: Learner statistics kept in each curve row.
LOGGED_STATS = ("kl_coef", "noise_std", "sigma_bound", "clip_fraction", "accept_rate", "buffer_rows",
                "success_stochastic")


def run_onpolicy(name: str, algo_cfg: FlowPPOConfig | HiORSConfig, sft: FlowVLAPolicy, args: argparse.Namespace
                 ) -> list[dict[str, float]]:
    """Flow-Noise PPO or Hi-ORS from the SFT checkpoint, driven like the on-policy loop; per-evaluation rows."""
    h = sft.cfg.horizon
    env = chunk_task(args, h, args.rl_envs).make(args.device, 11 + 1000 * args.rl_seed)
    eval_env = chunk_task(args, h, 25).make(args.device, 12)
    kl_obs = {k: v[:16] for k, v in eval_env.reset(seed=5).items()}
    gen = torch.Generator(device=args.device).manual_seed(0)
    algo = algo_cfg.build(env.spec, args.device, args.rl_seed)
    policy = algo.make_policy()
    storage = algo.make_storage(env.num_envs)
    curve = Curve(name)
    obs = env.reset()
    steps = 0
    stats: dict[str, float] = {}
    deadline = time.monotonic() + args.rl_minutes * 60
    for it in range(args.rl_iters + 1):
        last = it == args.rl_iters or time.monotonic() > deadline
        if it % args.rl_eval_every == 0 or last:
            succ = eval_chunks(lambda o: algo.policy.act(o, True)[0], eval_env, args.eval_episodes)
            # The sampling policy (x0 ~ N(0, I), Flow-Noise on) on the same episodes. Not the success of the
            # training rollouts: in a window of steps, short (successful) episodes finish more often.
            stats["success_stochastic"] = eval_chunks(lambda o: algo.policy.act(o, False)[0], eval_env,
                                                      args.eval_episodes)
            curve.add(steps, succ, flow_chain_kl(algo.policy, sft, kl_obs, generator=gen), iter=it,
                      **{k: v for k, v in stats.items() if k in LOGGED_STATS})
        if last:
            break
        for _ in range(algo_cfg.rollout_length):
            action, extras = policy.act(obs)
            r = env.step(action)
            n = env.num_envs
            storage.add(TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                                        torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64),
                                        torch.arange(n), extras))
            steps += n * args.execute  # primitive steps, counting a chunk cut short by success as executed
            obs = r.obs
        stats = algo.update(storage)
        policy.load_actor_weights(algo.actor_weights())
    return curve.rows


def run_dsrl(sft_dir: Path, sft: FlowVLAPolicy, args: argparse.Namespace) -> list[dict[str, float]]:
    """DSRL: SAC over the frozen SFT flow's initial noise; KL is that of the noise policy to N(0, I)."""
    h = sft.cfg.horizon
    env = LatentNoiseEnv(chunk_task(args, h, args.rl_envs).make(args.device, 11 + 1000 * args.rl_seed), sft,
                         args.dsrl_noise_bound)
    eval_env = LatentNoiseEnv(chunk_task(args, h, 25).make(args.device, 12), sft, args.dsrl_noise_bound)
    kl_obs = eval_env.reset(seed=5)
    cfg = SACConfig(learning_starts=args.dsrl_learning_starts, batch_size=256, utd_ratio=args.dsrl_utd,
                    buffer_size=200_000, gamma=args.dsrl_gamma, actor_hidden=(256, 256), critic_hidden=(256, 256),
                    init_temperature=args.dsrl_init_temperature,
                    target_entropy=args.dsrl_target_entropy_per_dim * h * sft.action_dim)
    algo = cfg.build(env.spec, args.device, args.rl_seed)
    buf = algo.make_storage(env.num_envs)
    gen = torch.Generator(device=args.device).manual_seed(args.rl_seed)
    curve = Curve("dsrl")
    obs = env.reset()
    steps = chunks = 0
    owed = 0.0
    deadline = time.monotonic() + args.rl_minutes * 60
    bound, dims = args.dsrl_noise_bound, h * sft.action_dim
    next_eval = 0
    while True:
        last = chunks >= args.dsrl_chunks or time.monotonic() > deadline
        if chunks >= next_eval or last:
            succ = eval_chunks(lambda o: algo.actor.act(o, True)[0], eval_env, args.eval_episodes)
            with torch.no_grad():  # KL(noise policy ‖ N(0, I)) ≥ KL of the chunks (data processing)
                feats = algo.actor.encoder(kl_obs)
                a, logp = algo.actor.sample(feats, torch.randn(feats.shape[0], dims, generator=gen, device=gen.device))
                x0 = a * bound
                logp_x0 = logp - dims * math.log(bound)
                kl = float((logp_x0 - (-0.5 * x0.square() - 0.5 * math.log(2 * math.pi)).sum(-1)).mean())
            curve.add(steps, succ, kl, chunks=chunks)
            next_eval += args.dsrl_eval_every
        if last:
            break
        if len(buf) < cfg.learning_starts:
            # Warm-up with the base policy's own noise, N(0, I) (clipped to the bound).
            action = torch.randn(env.num_envs, *env.spec.action.shape, generator=gen,
                                     device=gen.device).clamp(-bound, bound)
        else:
            action = algo.actor.act(obs)[0]
        r = env.step(action)
        n = env.num_envs
        buf.add(TransitionBatch(obs, action, r.reward * args.dsrl_reward_scale, r.terminated, r.truncated,
                                r.info["final_obs"], torch.zeros(n, dtype=torch.bool),
                                torch.zeros(n, dtype=torch.int64), torch.arange(n)))
        obs = r.obs
        steps += n * args.execute
        chunks += n
        if len(buf) >= cfg.learning_starts:
            owed += n * cfg.utd_ratio
            while owed >= 1:
                algo.update(buf.sample(cfg.batch_size))
                owed -= 1
    return curve.rows


def run_sft_more(sft_dir: Path, demos: Path, sft: FlowVLAPolicy, args: argparse.Namespace, grad_steps: int
                 ) -> list[dict[str, float]]:
    """Control for Hi-ORS: keep training the SFT policy on the demos alone, same batch and gradient steps."""
    from robot_rl.data.demos import read_episodes

    h = sft.cfg.horizon
    eval_env = chunk_task(args, h, 25).make("cpu", 12)
    kl_obs = {k: v[:16] for k, v in eval_env.reset(seed=5).items()}
    policy = load_flow_policy(sft_dir)[0]
    data = chunk_dataset(read_episodes(demos)[0], eval_env.spec, h)
    opt = torch.optim.AdamW([p for n, p in policy.named_parameters() if n != "log_sigma"], lr=args.hiors_lr,
                            weight_decay=1e-4)
    gen = torch.Generator().manual_seed(0)
    curve = Curve("sft_more")
    every = max(grad_steps // 4, 1)
    deadline = time.monotonic() + args.rl_minutes * 60
    for step in range(grad_steps + 1):
        last = step == grad_steps or time.monotonic() > deadline
        if step % every == 0 or last:
            succ = eval_chunks(lambda o: policy.act(o, True)[0], eval_env, args.eval_episodes)
            curve.add(0, succ, flow_chain_kl(policy, sft, kl_obs, generator=gen), grad_steps=step)
        if last:
            break
        idx = torch.randint(0, len(data), (args.hiors_batch,), generator=gen)
        loss = policy.flow_matching_loss({k: v[idx] for k, v in data.obs.items()}, data.actions[idx], data.mask[idx],
                                         gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
    return curve.rows


def ratio_diagnosis(sft_dir: Path, args: argparse.Namespace) -> list[dict[str, float | str]]:
    """One Flow-Noise PPO update from the SFT policy per ratio level and learning rate, on the same rollout.

    Clip fraction and approx. KL of the new vs the acting policy show whether PPO can move at all.
    """
    sft, _ = load_flow_policy(sft_dir)
    env = chunk_task(args, sft.cfg.horizon, args.rl_envs).make("cpu", 11)
    rows = []
    for ratio in ("chain", "step", "element"):
        for lr in (3e-5, 1e-4):
            torch.manual_seed(0)
            cfg = FlowPPOConfig(policy=sft.cfg, init_from=str(sft_dir), rollout_length=args.rl_rollout, actor_lr=lr,
                                ratio=ratio)
            algo = cfg.build(env.spec, "cpu", 0)
            policy, storage, obs = algo.make_policy(), algo.make_storage(env.num_envs), env.reset(seed=1)
            n = env.num_envs
            for _ in range(cfg.rollout_length):
                action, extras = policy.act(obs)
                r = env.step(action)
                storage.add(TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                                            torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64),
                                            torch.arange(n), extras))
                obs = r.obs
            stats = algo.update(storage)
            rows.append({"ratio": ratio, "actor_lr": lr, "clip_fraction": stats["clip_fraction"],
                         "approx_kl": stats["approx_kl"], "kl_ref": stats["kl_ref"]})
            print(rows[-1], flush=True)
    return rows


@torch.no_grad()
def failure_analysis(sft_dir: Path, args: argparse.Namespace, episodes: int = 100) -> dict[str, float]:
    """Where do the SFT policy's failed episodes end: near the instructed target or at another one?"""
    sft, _ = load_flow_policy(sft_dir)
    sft.eval()
    env = chunk_task(args, sft.cfg.horizon, episodes).make("cpu", 12)
    if not isinstance(env, LangReachTask):
        raise SystemExit("the failure analysis reads lang_reach's targets: run it with --task lang_reach")
    obs = env.reset(seed=4242)
    finished = torch.zeros(episodes, dtype=torch.bool)
    success = torch.zeros(episodes, dtype=torch.bool)
    nearest_ok = torch.zeros(episodes, dtype=torch.bool)
    final_dist = torch.zeros(episodes)
    while not bool(finished.all()):
        # Before the step: where each unfinished episode stands (its last state before ending).
        ee = env.end_effector()
        d = torch.linalg.vector_norm(env.targets - ee[:, None], dim=-1)
        rows = torch.arange(episodes)
        nearest_ok = torch.where(finished, nearest_ok, d.argmin(-1) == env.target_index)
        final_dist = torch.where(finished, final_dist, d[rows, env.target_index])
        r = env.step(sft.act(obs, True)[0])
        done = r.terminated | r.truncated
        success |= r.info["success"] & ~finished
        finished |= done
        obs = r.obs
    failed = ~success
    out = {"episodes": episodes, "success_rate": float(success.float().mean()),
           "failed_nearest_is_instructed": float(nearest_ok[failed].float().mean()) if bool(failed.any()) else 1.0,
           "failed_median_distance_m": float(final_dist[failed].median()) if bool(failed.any()) else 0.0}
    print("failure analysis", out, flush=True)
    return out


def run_rl(sft_dir: Path, demos: Path | None, args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Every method of ``--methods`` from the same SFT checkpoint."""
    sft, _ = load_flow_policy(sft_dir, args.device)
    sft.requires_grad_(False)
    pcfg = sft.cfg
    out: dict[str, list[dict[str, float]]] = {}
    for method in args.methods.split(","):
        torch.manual_seed(0)
        if method == "flow_ppo":
            ppo_policy = dataclasses.replace(pcfg, init_noise_std=args.rl_init_noise_std)
            cfg = FlowPPOConfig(policy=ppo_policy, init_from=str(sft_dir), rollout_length=args.rl_rollout,
                                actor_lr=args.rl_actor_lr, kl_target=args.rl_kl_target, ratio=args.rl_ratio,
                                freeze_encoder=args.rl_freeze_encoder, max_sigma=max(0.3, args.rl_init_noise_std),
                                final_max_sigma=args.rl_final_noise_std,
                                sigma_decay_updates=args.rl_sigma_decay_updates)
            out[method] = run_onpolicy(method, cfg, sft, args)
        elif method == "hiors":
            hcfg = HiORSConfig(policy=pcfg, init_from=str(sft_dir), demos=str(demos) if demos else None,
                               rollout_length=args.rl_rollout, lr=args.hiors_lr, batch_size=args.hiors_batch,
                               updates_per_rollout=args.hiors_updates, accept=args.hiors_accept,
                               top_fraction=args.hiors_top_fraction)
            out[method] = run_onpolicy(method, hcfg, sft, args)
        elif method == "dsrl":
            out[method] = run_dsrl(sft_dir, sft, args)
        elif method == "sft_more":
            if demos is None:
                raise SystemExit("sft_more needs the demos (--demos-dir)")
            out[method] = run_sft_more(sft_dir, demos, sft, args, args.rl_iters * args.hiors_updates)
        else:
            raise SystemExit(f"unknown method {method!r}: use flow_ppo, dsrl, hiors, sft_more")
    return out


def plot(curves: dict[str, list[dict[str, float]]], path: Path) -> None:
    """Success and KL against env steps and wall-clock, one line per method (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    for name, rows in curves.items():
        if not rows:
            continue
        x = [r["env_steps"] for r in rows]
        axes[1].plot([r["wall_s"] for r in rows], [r["success_rate"] for r in rows], marker="o", label=name)
        if any(x):  # sft_more takes no env steps: wall-clock panel only
            line = axes[0].plot(x, [r["success_rate"] for r in rows], marker="o", label=name)[0]
            if any("success_stochastic" in r for r in rows):  # the sampling policy, same colour, dashed
                xs = [(r["env_steps"], r["success_stochastic"]) for r in rows if "success_stochastic" in r]
                axes[0].plot(*zip(*xs), linestyle="--", color=line.get_color(), label=f"{name}, sampled")
            axes[2].plot(x, [r["kl_to_sft"] for r in rows], marker="o", label=name)
    axes[0].set(xlabel="env steps", ylabel="success rate",
                title="success vs env steps (solid: deterministic; dashed: sampled)")
    axes[1].set(xlabel="wall-clock s", ylabel="success rate", title="success vs wall-clock")
    axes[2].set(xlabel="env steps", ylabel="nats per chunk", title="KL to the SFT policy", yscale="symlog")
    ends = [rows[-1]["env_steps"] for rows in curves.values() if rows and rows[-1]["env_steps"]]
    if ends and max(ends) > 10 * min(ends):  # budgets of different scale (GPU PPO vs off-policy): log env steps
        for ax in (axes[0], axes[2]):
            ax.set_xscale("symlog", linthresh=1e4)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def summarise(curves: dict[str, list[dict[str, float]]]) -> None:
    """Print each method's first/best/last success and the lift over the SFT start."""
    for name, rows in curves.items():
        first, last = rows[0], rows[-1]
        best = max(r["success_rate"] for r in rows)
        print(f"{name}: success {first['success_rate']:.2f} -> {last['success_rate']:.2f} (best {best:.2f}, "
              f"x{last['success_rate'] / max(first['success_rate'], 1e-9):.2f}) after {last['env_steps']} env steps, "
              f"{last['wall_s']:.0f} s; KL to SFT {last['kl_to_sft']:.2f}")


def main() -> None:
    """Run the measurements and write the JSON results (and the PNG plot when RL methods ran)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS_BENCHED), default="lang_reach")
    p.add_argument("--demos", type=int, default=200)
    p.add_argument("--sft-steps", type=int, default=3000)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--sft-lr", type=float, default=FlowSFTConfig.lr)
    p.add_argument("--keypoint-gain", type=float, default=FlowVLAConfig.keypoint_gain,
                   help="initial inverse temperature of the spatial-softmax keypoints")
    p.add_argument("--execute", type=int, default=4, help="chunk steps executed per chunk (receding horizon)")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--latency-repeats", type=int, default=50)
    p.add_argument("--control-hz", type=float, default=20.0)
    p.add_argument("--methods", default="", help="comma list of flow_ppo, dsrl, hiors, sft_more (empty: no RL)")
    p.add_argument("--rl-minutes", type=float, default=15.0, help="wall-clock cap per method")
    p.add_argument("--rl-iters", type=int, default=100, help="on-policy iterations (flow_ppo, hiors)")
    p.add_argument("--rl-envs", type=int, default=32)
    p.add_argument("--rl-seed", type=int, default=0,
                   help="seed of the RL learners and training envs (the evaluation episodes stay the same)")
    p.add_argument("--rl-rollout", type=int, default=4)
    p.add_argument("--rl-eval-every", type=int, default=10)
    p.add_argument("--rl-actor-lr", type=float, default=3e-5)
    p.add_argument("--rl-kl-target", type=float, default=2.0)
    p.add_argument("--rl-ratio", default="element", choices=["element", "step", "chain"])
    enc = p.add_mutually_exclusive_group()
    enc.add_argument("--rl-train-encoder", dest="rl_freeze_encoder", action="store_const", const=False,
                     help="flow_ppo: fine-tune the observation encoder too (the default since 2026-11-30)")
    enc.add_argument("--rl-freeze-encoder", dest="rl_freeze_encoder", action="store_const", const=True,
                     help="flow_ppo: keep the SFT encoder fixed (the default before 2026-11-30)")
    p.add_argument("--rl-init-noise-std", type=float, default=0.05, help="flow_ppo: initial Flow-Noise σ")
    p.add_argument("--rl-final-noise-std", type=float, default=None,
                   help="flow_ppo: decay the σ clamp linearly to this (default: constant)")
    p.add_argument("--rl-sigma-decay-updates", type=int, default=200, help="flow_ppo: updates of the σ decay")
    p.add_argument("--hiors-lr", type=float, default=1e-4)
    p.add_argument("--hiors-accept", default="success", choices=["success", "top_return"])
    p.add_argument("--hiors-top-fraction", type=float, default=0.5)
    p.add_argument("--dsrl-gamma", type=float, default=0.9)
    p.add_argument("--dsrl-init-temperature", type=float, default=1.0)
    p.add_argument("--dsrl-target-entropy-per-dim", type=float, default=-1.0)
    p.add_argument("--hiors-batch", type=int, default=128)
    p.add_argument("--hiors-updates", type=int, default=8)
    p.add_argument("--dsrl-chunks", type=int, default=40_000, help="DSRL chunk steps (all sub-envs)")
    p.add_argument("--dsrl-eval-every", type=int, default=4_000)
    p.add_argument("--dsrl-learning-starts", type=int, default=2_000)
    p.add_argument("--dsrl-utd", type=float, default=0.5)
    p.add_argument("--dsrl-noise-bound", type=float, default=2.0)
    p.add_argument("--dsrl-reward-scale", type=float, default=0.05)
    p.add_argument("--rl-only", type=Path, default=None, help="skip demos and SFT: fine-tune this SFT run dir")
    p.add_argument("--demos-dir", type=Path, default=None, help="with --rl-only: the SFT demos (hiors, sft_more)")
    p.add_argument("--plot", type=Path, default=None, help="PNG of the RL curves (default: next to --out)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="torch device of the RL methods' envs and learners (cpu, cuda)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/flow_bench.json"))
    p.add_argument("--ratio-diagnosis", action="store_true",
                   help="with --rl-only: clip fraction of one Flow-Noise PPO update per ratio level and "
                        "lr, and where the SFT policy's failed episodes end")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="only plot and summarise the RL curves of these result JSONs together (into --plot)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    plot_path = args.plot or args.out.with_suffix(".png")
    for d in {args.out.parent, plot_path.parent}:
        d.mkdir(parents=True, exist_ok=True)
    if args.ratio_diagnosis:
        if args.rl_only is None:
            raise SystemExit("--ratio-diagnosis needs --rl-only <SFT run dir>")
        diag = ratio_diagnosis(args.rl_only, args)
        failures = failure_analysis(args.rl_only, args) if args.task == "lang_reach" else {}
        args.out.write_text(json.dumps({"sft": str(args.rl_only), "ratio_diagnosis": diag, "failures": failures},
                                       indent=1))
        return
    if args.merge:
        curves = {}
        for path in args.merge:
            data = json.loads(path.read_text())
            if "rl" not in data:
                print(f"skipping {path}: no RL curves (an older or a diagnosis result)")
                continue
            for name, rows in data["rl"].items():
                curves[f"{name} ({path.stem.removeprefix('flow_bench_rl_')})"] = rows
        plot(curves, plot_path)
        summarise(curves)
        return
    if args.rl_only is not None:
        curves = run_rl(args.rl_only, args.demos_dir, args)
        args.out.write_text(json.dumps({"sft": str(args.rl_only), "rl": curves, "args": vars(args)}, indent=1,
                                       default=str))
        plot(curves, plot_path)
        summarise(curves)
        return
    work = Path(tempfile.mkdtemp(prefix="flow_bench-"))
    task_cls, demonstrator = TASKS_BENCHED[args.task]
    task = task_cls(num_envs=25, image_size=args.image_size)
    env = task.make("cpu", 0)

    t = time.monotonic()
    store = EpisodeStore.create(work / "demos", env.spec, fps=args.control_hz)
    rec = record_episodes(env, demonstrator(env), StoreSink(store), args.demos)
    record_s = time.monotonic() - t
    eval_env = task.make("cpu", 99)
    expert = success_of(demonstrator(eval_env), eval_env, args.eval_episodes)
    rand = success_of(RandomPolicy(eval_env.num_envs), eval_env, args.eval_episodes)

    pcfg = FlowVLAConfig(horizon=args.horizon, num_steps=10, keypoint_gain=args.keypoint_gain)
    sft_cfg = FlowSFTConfig(policy=pcfg, steps=args.sft_steps, lr=args.sft_lr, eval_every=max(args.sft_steps // 4, 1),
                            eval_episodes=args.eval_episodes, executor=ChunkExecutorConfig(execute_steps=args.execute))
    sft = train_sft(sft_cfg, work / "demos", task, work / "sft")
    ens = evaluate_policy(sft.policy, eval_env, args.eval_episodes, ChunkExecutorConfig(mode="ensemble"), seed=31)
    rec_full = evaluate_policy(sft.policy, eval_env, args.eval_episodes, ChunkExecutorConfig(), seed=31)

    obs = eval_env.reset()
    lat = {}
    for integrator in ("euler", "midpoint"):
        for steps in (5, 10):
            sft.policy.cfg.integrator, sft.policy.cfg.num_steps = integrator, steps  # type: ignore[assignment]
            lat[f"{integrator}-{steps}"] = latency(sft.policy, obs, args.latency_repeats)
    sft.policy.cfg.integrator, sft.policy.cfg.num_steps = "euler", 10

    result = {
        "demos": args.demos, "demo_frames": rec.frames, "record_s": record_s, "sft_steps": args.sft_steps,
        "sft_wall_s": sft.wall_s, "sft_curve": sft.evaluations, "expert_success": expert, "random_success": rand,
        "sft_success_receding": sft.evaluations[-1][1]["success_rate"], "sft_success_ensemble": ens["success_rate"],
        "sft_success_open_loop_chunk": rec_full["success_rate"], "latency_s": lat,
        "chunk_duration_s": args.horizon / args.control_hz,
        "params": sum(p.numel() for p in sft.policy.parameters()),
    }
    if args.methods:
        result["rl"] = run_rl(work / "sft", work / "demos", args)
        plot(result["rl"], plot_path)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    s = result
    print(f"| demos | SFT steps | SFT success (receding {args.execute}/{args.horizon}) | ensemble | open-loop chunk "
          f"| expert | random | SFT / expert |")
    print(f"| {s['demos']} | {s['sft_steps']} | {s['sft_success_receding']:.2f} | {s['sft_success_ensemble']:.2f} | "
          f"{s['sft_success_open_loop_chunk']:.2f} | {expert:.2f} | {rand:.2f} | "
          f"{s['sft_success_receding'] / expert:.2f} |")
    if args.methods:
        summarise(result["rl"])
    for k, v in lat.items():
        print(f"latency {k}: {1e3 * v:.1f} ms per chunk = {v / result['chunk_duration_s']:.3f} of the chunk's "
              f"{result['chunk_duration_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
