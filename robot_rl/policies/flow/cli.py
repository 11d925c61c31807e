"""`robot-rl flow-sft`: record scripted demos (optional) and train a flow-VLA policy on them by flow matching."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from robot_rl.policies.flow.sft import FlowSFTConfig


@dataclass
class FlowSFTArgs:
    """Flow-matching SFT of a FlowVLAPolicy on demos (episode store or LeRobotDataset v3), with evaluation in sim.

    `robot-rl flow-sft demos/ --record 400 --out runs/flow-sft --sft.steps 3000` records 400
    scripted `lang_reach` episodes into demos/ (if it holds none yet), trains, evaluates and writes
    checkpoints to runs/flow-sft/checkpoints/; start RL from it with `robot-rl train --task lang_reach
    --algo flow_ppo algo.init_from=runs/flow-sft`.
    """

    demos: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DEMOS")]]
    """Episode store or LeRobotDataset v3 directory with the demonstrations."""
    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="task.KEY=VALUE")]] = ()
    """Dotted overrides of the evaluation task (e.g. task.image_size=32)."""
    task: str = "lang_reach"
    """Task the demos come from; evaluation runs there."""
    out: Path = Path("runs/flow-sft")
    """Run directory for checkpoints and results.json."""
    record: int = 0
    """First record this many scripted-demonstrator episodes into DEMOS (lang_reach, lang_push; skipped if DEMOS
    exists)."""
    sft: FlowSFTConfig = field(default_factory=FlowSFTConfig)
    """Policy, optimisation and evaluation settings."""


def run_flow_sft(args: FlowSFTArgs) -> int:
    """The `flow-sft` verb."""
    from robot_rl.core.config import ConfigError
    from robot_rl.loop.config import resolve_train_config

    bad = [o for o in args.overrides if not o.startswith("task.")]
    if bad:
        raise ConfigError(f"flow-sft takes task.KEY=VALUE overrides only, got {bad}")
    # "sac" only to resolve the task section: no task has SFT presets, and flow_ppo's would switch to chunk actions.
    task = resolve_train_config(args.task, "sac", overrides=list(args.overrides)).task
    if args.record and not args.demos.exists():
        from robot_rl.data.recorder import StoreSink, record_episodes
        from robot_rl.data.store import EpisodeStore
        from robot_rl.sims.lang_push import LangPushDemonstrator, LangPushTask
        from robot_rl.sims.lang_reach import LangReachDemonstrator, LangReachTask

        env = task.make(args.sft.device, args.sft.seed + 1000)
        demonstrator: LangPushDemonstrator | LangReachDemonstrator
        if isinstance(env, LangPushTask):
            demonstrator = LangPushDemonstrator(env)
        elif isinstance(env, LangReachTask):
            demonstrator = LangReachDemonstrator(env)
        else:
            raise ConfigError(f"--record has scripted demonstrators for lang_reach and lang_push, not {args.task}")
        store = EpisodeStore.create(args.demos, env.spec, fps=20.0)
        rec = record_episodes(env, demonstrator, StoreSink(store), args.record)
        print(f"recorded {rec.episodes} scripted episodes ({rec.frames} frames, {rec.successes} successes) "
              f"into {args.demos}", file=sys.stderr)
    from robot_rl.policies.flow.sft import train_sft

    result = train_sft(args.sft, args.demos, task, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"evaluations": result.evaluations, "final_loss": result.final_loss, "wall_s": result.wall_s,
               "checkpoint": str(result.checkpoint)}
    (args.out / "results.json").write_text(json.dumps(summary, indent=1))
    for step, stats in result.evaluations:
        print(f"step {step}: loss {stats['loss']:.4f}, success {stats['success_rate']:.2%}, "
              f"return {stats['mean_return']:.1f}")
    print(f"checkpoint: {result.checkpoint}")
    return 0
