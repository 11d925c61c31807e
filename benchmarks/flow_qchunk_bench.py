"""Q-chunking (``flow_qc``) against DSRL and Flow-Noise PPO from one SFT checkpoint, at the same env steps.

Records scripted demos and trains the SFT flow policy (or takes ``--sft RUN --demos-dir DEMOS``), then fine-tunes
it with each method of ``--methods`` on the chunk env (``chunk_horizon = --horizon``, ``--execute`` steps of each
chunk per env step) for ``--env-steps`` primitive env steps (or ``--minutes`` of wall-clock, whichever comes
first), evaluating every ``--eval-every`` env steps on the same 100 episodes: success of the deterministic policy
(Q-chunking: best of the fixed candidate set led by x0 = 0; QC-FQL, method ``flow_qc_fql``: the one-step policy
at z = 0; DSRL: the noise policy's mean; PPO: x0 = 0) and, for
Q-chunking and PPO, of the sampling policy. DSRL and PPO run exactly as in ``flow_bench.py`` (their tuned settings
from benchmarks/RESULTS_flow.md); the issue's goal on ``lang_push`` is 0.8 success.

    .venv/bin/python benchmarks/flow_qchunk_bench.py --task lang_push --demos 400 --sft-steps 1000 \
        --env-steps 30000 --minutes 4 --out benchmarks/results/flow_qchunk_push.json
    .venv/bin/python benchmarks/flow_qchunk_bench.py --sft RUN/sft --demos-dir RUN/demos --methods flow_qc
    .venv/bin/python benchmarks/flow_qchunk_bench.py --methods flow_qc,flow_qc_fql --qc-fql-alpha 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch
from flow_bench import TASKS_BENCHED, Curve, chunk_task, eval_chunks, plot, run_dsrl, run_onpolicy, summarise

from robot_rl.core.transition import TransitionBatch
from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.flow.chunking import ChunkExecutorConfig
from robot_rl.policies.flow.metrics import flow_chain_kl
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.policies.flow.qchunk import FlowQCConfig
from robot_rl.policies.flow.sft import FlowSFTConfig, load_flow_policy, train_sft


def make_sft(args: argparse.Namespace) -> tuple[Path, Path]:
    """Record ``--demos`` scripted episodes and train the SFT policy; ``(sft run dir, demos dir)``."""
    work = Path(tempfile.mkdtemp(prefix="flow_qchunk-"))
    task_cls, demonstrator = TASKS_BENCHED[args.task]
    task = task_cls(num_envs=25, image_size=args.image_size)
    env = task.make("cpu", 0)
    store = EpisodeStore.create(work / "demos", env.spec, fps=20.0)
    record_episodes(env, demonstrator(env), StoreSink(store), args.demos)
    cfg = FlowSFTConfig(policy=FlowVLAConfig(horizon=args.horizon, num_steps=10), steps=args.sft_steps,
                        eval_every=0, eval_episodes=args.eval_episodes,
                        executor=ChunkExecutorConfig(execute_steps=args.execute), progress=False,
                        device=args.device)
    t = time.monotonic()
    result = train_sft(cfg, work / "demos", task, work / "sft")
    print(f"SFT: {args.demos} demos, {args.sft_steps} steps, {time.monotonic() - t:.0f} s, success (per-step env, "
          f"receding {args.execute}/{args.horizon}) {result.evaluations[-1][1]['success_rate']:.2f}; in {work}",
          flush=True)
    return work / "sft", work / "demos"


def qc_config(sft_dir: Path, demos: Path | None, sft: FlowVLAPolicy, args: argparse.Namespace,
              actor: str = "best_of_n") -> FlowQCConfig:
    """The Q-chunking settings of the command line (``actor``: best-of-N or QC-FQL's one-step policy)."""
    return FlowQCConfig(policy=sft.cfg, actor=actor, fql_alpha=args.qc_fql_alpha,  # type: ignore[arg-type]
                        init_from=str(sft_dir), demos=str(demos) if demos else None,
                        demo_ratio=args.qc_demo_ratio if demos else 0.0, execute_steps=args.execute,
                        num_samples=args.qc_samples, target_samples=args.qc_target_samples, gamma=args.qc_gamma,
                        critic_lr=args.qc_critic_lr, flow_lr=args.qc_flow_lr, bc_weight=args.qc_bc_weight,
                        bc_every=args.qc_bc_every, reward_scale=args.qc_reward_scale, batch_size=args.qc_batch,
                        utd_ratio=args.qc_utd, learning_starts=args.qc_learning_starts, buffer_size=200_000)


def run_qchunk(sft_dir: Path, demos: Path | None, sft: FlowVLAPolicy, args: argparse.Namespace,
               actor: str = "best_of_n") -> list[dict[str, float]]:
    """Q-chunking from the SFT checkpoint, driven like the off-policy loop; per-evaluation rows."""
    h = sft.cfg.horizon
    env = chunk_task(args, h, args.rl_envs).make(args.device, 11 + 1000 * args.rl_seed)
    eval_env = chunk_task(args, h, 25).make(args.device, 12)
    kl_obs = {k: v[:16] for k, v in eval_env.reset(seed=5).items()}
    gen = torch.Generator(device=args.device).manual_seed(0)
    algo = qc_config(sft_dir, demos, sft, args, actor).build(env.spec, args.device, args.rl_seed)
    policy, evaluator = algo.make_policy(), algo.make_policy()
    storage = algo.make_storage(env.num_envs)
    curve = Curve("flow_qc" if actor == "best_of_n" else "flow_qc_fql")
    obs = env.reset()
    steps = updates = 0
    owed = 0.0
    stats: dict[str, float] = {}
    next_eval, deadline = 0, time.monotonic() + args.minutes * 60
    while True:
        last = steps >= args.env_steps or time.monotonic() > deadline
        if steps >= next_eval or last:
            evaluator.load_actor_weights(algo.actor_weights())
            succ = eval_chunks(lambda o: evaluator.act(o, True)[0], eval_env, args.eval_episodes)
            sampled = eval_chunks(lambda o: evaluator.act(o, False)[0], eval_env, args.eval_episodes)
            curve.add(steps, succ, flow_chain_kl(algo.actor.flow, sft, kl_obs, generator=gen),
                      success_stochastic=sampled, updates=updates,
                      **{k: round(v, 4) for k, v in stats.items()})
            next_eval += args.eval_every
        if last:
            return curve.rows
        action, extras = policy.act(obs)
        r = env.step(action)
        n = env.num_envs
        storage.add(TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                                    torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64),
                                    torch.arange(n), extras))
        obs = r.obs
        steps += n * args.execute  # primitive steps, counting a chunk cut short by success as executed
        if len(storage) >= algo.learning_starts:
            owed += n * algo.utd_ratio
            while owed >= 1:
                stats = algo.update(storage.sample(algo.batch_size))
                owed -= 1
                updates += 1
            policy.load_actor_weights(algo.actor_weights())


def baseline_args(args: argparse.Namespace, sft: FlowVLAPolicy) -> argparse.Namespace:
    """``flow_bench.py``'s settings for DSRL and PPO, with this run's env-step and wall-clock budgets."""
    chunk_steps = args.env_steps // args.execute  # chunk transitions, all sub-envs together
    per_iter = args.rl_envs * args.ppo_rollout * args.execute
    return argparse.Namespace(**{**vars(args), "rl_minutes": args.minutes,
                                 "dsrl_chunks": chunk_steps, "dsrl_eval_every": max(args.eval_every // args.execute, 1),
                                 "dsrl_learning_starts": args.dsrl_learning_starts, "dsrl_utd": args.dsrl_utd,
                                 "dsrl_gamma": 0.95, "dsrl_init_temperature": 0.01,
                                 "dsrl_target_entropy_per_dim": -2.0, "dsrl_noise_bound": 1.5,
                                 "dsrl_reward_scale": 0.05, "rl_iters": max(args.env_steps // per_iter, 1),
                                 "rl_eval_every": max(args.eval_every // per_iter, 1)})


def main() -> None:
    """Run the methods of ``--methods`` from one SFT checkpoint; write JSON, a PNG and print a summary."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS_BENCHED), default="lang_push")
    p.add_argument("--sft", type=Path, default=None, help="an SFT run dir (default: record demos and train one)")
    p.add_argument("--demos-dir", type=Path, default=None, help="with --sft: its demos (Q-chunking mixes them in)")
    p.add_argument("--demos", type=int, default=400)
    p.add_argument("--sft-steps", type=int, default=1500)
    p.add_argument("--image-size", type=int, default=48)
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--execute", type=int, default=4, help="chunk steps executed per chunk (receding horizon)")
    p.add_argument("--methods", default="flow_qc,dsrl,flow_ppo")
    p.add_argument("--env-steps", type=int, default=50_000, help="primitive env steps per method")
    p.add_argument("--minutes", type=float, default=5.0, help="wall-clock cap per method")
    p.add_argument("--eval-every", type=int, default=10_000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--rl-envs", type=int, default=32)
    p.add_argument("--rl-seed", type=int, default=0)
    p.add_argument("--qc-samples", type=int, default=16)
    p.add_argument("--qc-target-samples", type=int, default=8)
    p.add_argument("--qc-gamma", type=float, default=0.99)
    p.add_argument("--qc-critic-lr", type=float, default=3e-4)
    p.add_argument("--qc-flow-lr", type=float, default=1e-4)
    p.add_argument("--qc-bc-weight", type=float, default=1.0)
    p.add_argument("--qc-bc-every", type=int, default=1)
    p.add_argument("--qc-reward-scale", type=float, default=0.1)
    p.add_argument("--qc-batch", type=int, default=256)
    p.add_argument("--qc-utd", type=float, default=0.25)
    p.add_argument("--qc-learning-starts", type=int, default=1000)
    p.add_argument("--qc-demo-ratio", type=float, default=0.5)
    p.add_argument("--qc-fql-alpha", type=float, default=100.0, help="QC-FQL's distillation weight (flow_qc_fql)")
    p.add_argument("--chunk-discount", type=float, default=1.0,
                   help="the chunk env's task.chunk_discount for every method (set it to --qc-gamma for Q-chunking's "
                        "per-step discounting; 1: the plain sum of a chunk's rewards)")
    p.add_argument("--dsrl-learning-starts", type=int, default=2000)
    p.add_argument("--dsrl-utd", type=float, default=0.5)
    p.add_argument("--ppo-rollout", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="torch device of the SFT training, envs and learners (cpu, cuda)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/flow_qchunk_bench.json"))
    p.add_argument("--plot", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sft_dir, demos = (args.sft, args.demos_dir) if args.sft is not None else make_sft(args)
    sft, _ = load_flow_policy(sft_dir, args.device)
    sft.requires_grad_(False)
    base = baseline_args(args, sft)
    curves: dict[str, list[dict[str, float]]] = {}
    for method in args.methods.split(","):
        torch.manual_seed(0)
        if method == "flow_qc":
            curves[method] = run_qchunk(sft_dir, demos, sft, args)
        elif method == "flow_qc_fql":
            curves[method] = run_qchunk(sft_dir, demos, sft, args, actor="fql")
        elif method == "dsrl":
            curves[method] = run_dsrl(sft_dir, sft, base)
        elif method == "flow_ppo":  # the lang_reach / lang_push preset's tuned settings (FLOW_PPO_TUNED)
            cfg = FlowPPOConfig(policy=dataclasses.replace(sft.cfg, init_noise_std=0.3), init_from=str(sft_dir),
                                rollout_length=args.ppo_rollout, actor_lr=3e-4, kl_target=40.0)
            curves[method] = run_onpolicy(method, cfg, sft, base)
        else:
            raise SystemExit(f"unknown method {method!r}: use flow_qc, flow_qc_fql, dsrl, flow_ppo")
        # After every method, so that a run stopped early keeps what it measured.
        args.out.write_text(json.dumps({"sft": str(sft_dir), "demos": str(demos), "rl": curves, "args": vars(args)},
                                       indent=1, default=str))
    plot(curves, args.plot or args.out.with_suffix(".png"))
    summarise(curves)


if __name__ == "__main__":
    main()
