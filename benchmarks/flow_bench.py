"""Flow-VLA on ``lang_reach``: SFT from N scripted demos → success rate; CPU latency per chunk; Flow-Noise PPO lift.

Peers in the same run: the scripted expert (the demos' source, the ceiling) and a uniform-random policy
(the floor); SFT success is printed as a ratio of the expert's. Latency: one chunk at batch 1 for each
integrator and step count, against the time the chunk lasts on the robot at ``--control-hz``.
Optional ``--rl-iters``: Flow-Noise PPO from the SFT checkpoint, success and KL to the SFT policy per
evaluation. Writes JSON to ``--out`` (and prints a Markdown table).

    .venv/bin/python benchmarks/flow_bench.py --demos 200 --sft-steps 3000 --rl-iters 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.flow.chunking import ChunkExecutorConfig
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.policies.flow.sft import FlowSFTConfig, evaluate_policy, train_sft
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator
from robot_rl.transition import TransitionBatch


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


def flow_ppo(sft_dir: Path, pcfg: FlowVLAConfig, args: argparse.Namespace) -> list[dict[str, float]]:
    """Flow-Noise PPO from the SFT checkpoint; returns per-evaluation rows."""
    task = LangReachConfig(num_envs=args.rl_envs, image_size=args.image_size, chunk_horizon=pcfg.horizon)
    env = task.make("cpu", 11)
    eval_env = LangReachConfig(num_envs=25, image_size=args.image_size, chunk_horizon=pcfg.horizon).make("cpu", 12)
    cfg = FlowPPOConfig(policy=pcfg, init_from=str(sft_dir), rollout_length=args.rl_rollout,
                        actor_lr=args.rl_actor_lr, kl_target=args.rl_kl_target,
                        freeze_encoder=not args.rl_train_encoder)
    algo = cfg.build(env.spec, "cpu", 0)
    policy = algo.make_policy()
    storage = algo.make_storage(env.num_envs)
    rows = []
    obs = env.reset()
    steps = 0
    t0 = time.monotonic()
    stats: dict[str, float] = {}
    for it in range(args.rl_iters + 1):
        if it % args.rl_eval_every == 0 or it == args.rl_iters:
            ev = evaluate_policy(algo.policy, eval_env, args.eval_episodes, seed=4242)
            rows.append({"iter": it, "env_steps": steps, "wall_s": time.monotonic() - t0,
                         "success_rate": ev["success_rate"], "kl_ref": stats.get("kl_ref", 0.0),
                         "kl_coef": stats.get("kl_coef", cfg.kl_coef), "noise_std": stats.get("noise_std", 0.0)})
            print("flow_ppo", rows[-1], flush=True)
        if it == args.rl_iters:
            break
        for _ in range(cfg.rollout_length):
            action, extras = policy.act(obs)
            r = env.step(action)
            n = env.num_envs
            storage.add(TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                                        torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64),
                                        torch.arange(n), extras))
            steps += n * pcfg.horizon  # primitive steps, counting a chunk cut short by success as whole
            obs = r.obs
        stats = algo.update(storage)
        policy.load_actor_weights(algo.actor_weights())
    return rows


def main() -> None:
    """Run the measurements and write the JSON results."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demos", type=int, default=200)
    p.add_argument("--sft-steps", type=int, default=3000)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--execute", type=int, default=4)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--latency-repeats", type=int, default=50)
    p.add_argument("--control-hz", type=float, default=20.0)
    p.add_argument("--rl-iters", type=int, default=0)
    p.add_argument("--rl-envs", type=int, default=32)
    p.add_argument("--rl-rollout", type=int, default=4)
    p.add_argument("--rl-eval-every", type=int, default=5)
    p.add_argument("--rl-actor-lr", type=float, default=3e-5)
    p.add_argument("--rl-kl-target", type=float, default=2.0)
    p.add_argument("--rl-train-encoder", action="store_true", help="fine-tune the observation encoder too")
    p.add_argument("--rl-only", type=Path, default=None, help="skip demos and SFT: fine-tune this SFT run dir")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/flow_bench.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.rl_only is not None:
        from robot_rl.policies.flow.sft import load_flow_policy

        sft_policy, _ = load_flow_policy(args.rl_only)
        rows = flow_ppo(args.rl_only, sft_policy.cfg, args)
        args.out.write_text(json.dumps({"sft": str(args.rl_only), "flow_ppo": rows, "args": vars(args)}, indent=1,
                                       default=str))
        first, last = rows[0], rows[-1]
        print(f"flow_ppo: success {first['success_rate']:.2f} -> {last['success_rate']:.2f} "
              f"(x{last['success_rate'] / max(first['success_rate'], 1e-9):.2f}) after {last['env_steps']} env steps, "
              f"{last['wall_s']:.0f} s; KL to SFT {last['kl_ref']:.2f}")
        return
    work = Path(tempfile.mkdtemp(prefix="flow_bench-"))
    task = LangReachConfig(num_envs=25, image_size=args.image_size)
    env = task.make("cpu", 0)

    t = time.monotonic()
    store = EpisodeStore.create(work / "demos", env.spec, fps=args.control_hz)
    rec = record_episodes(env, LangReachDemonstrator(env), StoreSink(store), args.demos)
    record_s = time.monotonic() - t
    eval_env = task.make("cpu", 99)
    expert = success_of(LangReachDemonstrator(eval_env), eval_env, args.eval_episodes)
    rand = success_of(RandomPolicy(eval_env.num_envs), eval_env, args.eval_episodes)

    pcfg = FlowVLAConfig(horizon=args.horizon, num_steps=10)
    sft_cfg = FlowSFTConfig(policy=pcfg, steps=args.sft_steps, eval_every=max(args.sft_steps // 4, 1),
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
    if args.rl_iters:
        result["flow_ppo"] = flow_ppo(work / "sft", pcfg, args)
    args.out.write_text(json.dumps(result, indent=1))
    s = result
    print(f"| demos | SFT steps | SFT success (receding {args.execute}/{args.horizon}) | ensemble | open-loop chunk "
          f"| expert | random | SFT / expert |")
    print(f"| {s['demos']} | {s['sft_steps']} | {s['sft_success_receding']:.2f} | {s['sft_success_ensemble']:.2f} | "
          f"{s['sft_success_open_loop_chunk']:.2f} | {expert:.2f} | {rand:.2f} | "
          f"{s['sft_success_receding'] / expert:.2f} |")
    for k, v in lat.items():
        print(f"latency {k}: {1e3 * v:.1f} ms per chunk = {v / result['chunk_duration_s']:.3f} of the chunk's "
              f"{result['chunk_duration_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
