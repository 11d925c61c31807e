"""Periodic evaluation during training: the learner's current actor weights on a fresh evaluation env."""

from __future__ import annotations

from robot_rl.core.algorithm import Algorithm
from robot_rl.core.env import VecEnv
from robot_rl.loop.config import LoopConfig
from robot_rl.loop.evaluate import EvalResult, evaluate
from robot_rl.runlog import RunLog


class Evaluator:
    """Scores the algorithm's actor on ``env`` every ``loop.eval_every_env_steps`` and writes ``eval.csv``."""

    def __init__(self, algo: Algorithm, env: VecEnv, loop: LoopConfig, seed: int) -> None:
        self.algo = algo
        self.env = env
        self.loop = loop
        self.seed = seed
        self.policy = algo.make_policy()
        self.last: EvalResult | None = None
        self.best_success = 0.0
        self.next_at = loop.eval_every_env_steps

    def resume_at(self, env_steps: int, best_success: float) -> None:
        """After a resume: the next evaluation is the first multiple of the interval past ``env_steps``."""
        every = self.loop.eval_every_env_steps
        self.next_at = (env_steps // every + 1) * every
        self.best_success = best_success

    def due(self, env_steps: int) -> bool:
        """Whether an evaluation is due at ``env_steps`` (and if so, schedule the next one)."""
        if env_steps < self.next_at:
            return False
        self.next_at += self.loop.eval_every_env_steps
        return True

    def reached(self, result: EvalResult) -> bool:
        """Whether ``result`` meets ``loop.success_threshold``."""
        threshold = self.loop.success_threshold
        return threshold is not None and result.success_rate >= threshold

    def run(self, runlog: RunLog, env_steps: int, updates: int, version: int, wall_s: float) -> EvalResult:
        """Evaluate the current actor weights (deterministic actions) and log the row."""
        self.policy.load_actor_weights(self.algo.actor_weights())
        result = evaluate(self.policy, self.env, self.loop.eval_episodes, seed=self.seed)
        self.last = result
        self.best_success = max(self.best_success, result.success_rate)
        runlog.eval_row({"env_steps": env_steps, "updates": updates, "wall_s": round(wall_s, 2),
                         "policy_version": version, **result.as_dict()})
        return result
