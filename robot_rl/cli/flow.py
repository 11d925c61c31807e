"""`robot-rl flow-sft`: record scripted demos (optional) and train a flow-VLA policy on them by flow matching.

The scripted demonstrators of the language tasks are wired here, in the CLI: the policy package
(`robot_rl.policies.flow`) knows no task or simulator.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import tyro

from robot_rl.cli.base import Command
from robot_rl.policies.flow.sft import FlowSFTConfig

if TYPE_CHECKING:
    from robot_rl.sims.chunked import ChunkDemonstrator


@dataclass
class FlowSFTArgs(Command):
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

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The evaluation task's settings (``task.KEY=VALUE``); the SFT settings are its own ``--sft.*`` flags."""
        return ("task",)

    def run(self) -> int:
        """Record demos (--record, when DEMOS does not exist), train, write results.json, print the evaluations."""
        task = self.resolved_config()["task"]
        if self.record and not self.demos.exists():
            from robot_rl.data.recorder import StoreSink, record_episodes
            from robot_rl.data.store import EpisodeStore

            env = task.make(self.sft.device, self.sft.seed + 1000)
            demonstrator = scripted_demonstrator(env, self.task)
            store = EpisodeStore.create(self.demos, env.spec, fps=20.0)
            rec = record_episodes(env, demonstrator, StoreSink(store), self.record)
            print(f"recorded {rec.episodes} scripted episodes ({rec.frames} frames, {rec.successes} successes) "
                  f"into {self.demos}", file=sys.stderr)
        from robot_rl.policies.flow.sft import train_sft

        result = train_sft(self.sft, self.demos, task, self.out)
        self.out.mkdir(parents=True, exist_ok=True)
        summary = {"evaluations": result.evaluations, "final_loss": result.final_loss, "wall_s": result.wall_s,
                   "checkpoint": str(result.checkpoint)}
        (self.out / "results.json").write_text(json.dumps(summary, indent=1))
        for step, stats in result.evaluations:
            print(f"step {step}: loss {stats['loss']:.4f}, success {stats['success_rate']:.2%}, "
                  f"return {stats['mean_return']:.1f}")
        print(f"checkpoint: {result.checkpoint}")
        return 0

    def resolved_config(self) -> dict[str, Any]:
        """``{"task": the evaluation task's config, "sft": the SFT settings}``."""
        from robot_rl.core.config import ConfigError
        from robot_rl.loop.config import resolve_train_config

        bad = [o for o in self.overrides if not o.startswith("task.")]
        if bad:
            raise ConfigError(f"flow-sft takes task.KEY=VALUE overrides only, got {bad}")
        # "sac" only to resolve the task section: no task has SFT presets, and flow_ppo's would switch to chunk actions.
        task = resolve_train_config(self.task, "sac", overrides=list(self.overrides)).task
        return {"task": task, "sft": self.sft}


def scripted_demonstrator(env: Any, task_name: str) -> ChunkDemonstrator:
    """The scripted demonstrator for ``env`` (a lang_reach or lang_push task); a ConfigError for any other task."""
    from robot_rl.core.config import ConfigError
    from robot_rl.sims.lang_push import LangPushDemonstrator, LangPushTask
    from robot_rl.sims.lang_reach import LangReachDemonstrator, LangReachTask

    if isinstance(env, LangPushTask):
        return LangPushDemonstrator(env)
    if isinstance(env, LangReachTask):
        return LangReachDemonstrator(env)
    raise ConfigError(f"--record has scripted demonstrators for lang_reach and lang_push, not {task_name}")
