"""The run strategies make the decisions the runner made when it tested ``self.dp`` itself (no process group here)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import robot_rl.testing.fake_env  # noqa: F401  (registers the "fake" task the runner builds here)
from robot_rl.core.algorithm import Algorithm
from robot_rl.core.config import ConfigError
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.loop.async_updates import AsyncOnPolicyUpdates, async_rollout
from robot_rl.loop.config import LoopConfig, resolve_train_config
from robot_rl.loop.data_parallel_run import DataParallelRanks
from robot_rl.loop.learner import Learner
from robot_rl.loop.learner_driver import LearnerDriver
from robot_rl.loop.lockstep import LockstepOffPolicyUpdates
from robot_rl.loop.run_strategy import OneProcess, RunStrategy, run_strategy_for
from robot_rl.loop.runner import InProcessRunner
from robot_rl.loop.updates import OffPolicyUpdates, OnPolicyUpdates, UpdateStrategy
from robot_rl.policies.ppo import PPOConfig
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.inproc import InprocTransport

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((1,), low=-1.0, high=1.0))
ALONE, RANK0, RANK1 = OneProcess(), DataParallelRanks(DataParallel(0, 2, 0)), DataParallelRanks(DataParallel(1, 2, 1))


def _sac() -> Algorithm:
    return SACConfig(actor_hidden=(8,), critic_hidden=(8,)).build(SPEC, "cpu", seed=0)


def _ppo() -> Algorithm:
    return PPOConfig(rollout_length=4, actor_hidden=(8,), critic_hidden=(8,)).build(SPEC, "cpu", 0)


def _schedule(strategy: RunStrategy, algo: Algorithm, loop: LoopConfig) -> UpdateStrategy:
    storage = async_rollout(loop, algo, SPEC, "cpu", 4, 4)
    strategy.check(algo, loop, storage)
    learner = Learner(algo, SPEC, InprocTransport().learner_endpoint(), "cpu", 4, storage)
    return strategy.updates(learner, algo, [], loop, threading.Event(), remote=False)


def test_who_writes_the_run_and_what_the_offline_phase_sees() -> None:
    assert (ALONE.is_main, RANK0.is_main, RANK1.is_main) == (True, True, False)
    assert ALONE.data_parallel is None and RANK1.data_parallel == DataParallel(1, 2, 1)


def test_env_seeds_are_the_runs_alone_and_apart_on_ranks() -> None:
    # The old runner's env_seed(seed, dp): seed alone, seed + 100_003 · rank on ranks.
    assert [s.env_seed(7) for s in (ALONE, RANK0, RANK1)] == [7, 7, 100_010]


def test_the_update_schedule_alone_and_on_ranks() -> None:
    sync, unsync = LoopConfig(), LoopConfig(on_policy_sync=False, max_staleness=1)
    assert type(_schedule(ALONE, _sac(), sync)) is OffPolicyUpdates
    assert type(_schedule(RANK1, _sac(), sync)) is LockstepOffPolicyUpdates  # ranks update in lockstep
    assert type(_schedule(ALONE, _ppo(), sync)) is OnPolicyUpdates
    assert type(_schedule(RANK0, _ppo(), sync)) is OnPolicyUpdates  # each rank collects one rollout
    assert type(_schedule(ALONE, _ppo(), unsync)) is AsyncOnPolicyUpdates
    with pytest.raises(ConfigError, match="runs one learner"):
        _schedule(RANK0, _ppo(), unsync)
    _schedule(RANK0, _sac(), unsync)  # an off-policy run ignores on_policy_sync, on ranks too


def test_one_process_stops_on_its_own_vote() -> None:
    assert ALONE.agree_stop(True, torch.device("cpu")) and not ALONE.agree_stop(False, torch.device("cpu"))


class _Driver:
    """What the strategies call on a LearnerDriver, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def restore(self, checkpoint: bool = True) -> dict[str, Any] | None:
        self.calls.append(f"restore(checkpoint={checkpoint})")
        return {"wall_s": 1.0} if checkpoint else None

    def commit_replay(self) -> None:
        self.calls.append("commit_replay")


def _calls(strategy: RunStrategy) -> tuple[dict[str, Any] | None, bool, list[str]]:
    driver = _Driver()
    meta = strategy.restore(driver)  # type: ignore[arg-type]
    return meta, strategy.keep_shard(driver), driver.calls  # type: ignore[arg-type]


def test_a_rank_above_0_resumes_and_ends_with_its_replay_shard_only() -> None:
    assert _calls(ALONE) == ({"wall_s": 1.0}, False, ["restore(checkpoint=True)"])
    assert _calls(RANK0) == ({"wall_s": 1.0}, False, ["restore(checkpoint=True)"])
    assert _calls(RANK1) == (None, True, ["restore(checkpoint=False)", "commit_replay"])


def test_without_torchrun_a_run_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert isinstance(run_strategy_for(resolve_train_config("fake", "sac")), OneProcess)
    with pytest.raises(ConfigError, match="needs its ranks started by torchrun"):
        run_strategy_for(resolve_train_config("fake", "sac", overrides=["run.distributed=ddp"]))


class _Recording(OneProcess):
    """One process that notes where the runner asked it."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def env_seed(self, seed: int) -> int:
        self.asked.append("env_seed")
        return super().env_seed(seed)

    def attach(self, algo: Algorithm, learner: Learner, resumed: bool) -> None:
        self.asked.append("attach")

    def updates(self, *args: Any, **kw: Any) -> UpdateStrategy:
        self.asked.append("updates")
        return super().updates(*args, **kw)

    def restore(self, driver: LearnerDriver) -> dict[str, Any] | None:
        self.asked.append("restore")
        return super().restore(driver)


def test_the_runner_asks_its_strategy(tmp_path: Path) -> None:
    cfg = resolve_train_config("fake", "sac", overrides=[f"run.root={tmp_path}", "run.progress=false",
                                                         "loop.eval_episodes=1", "replay.persist=false"])
    default = InProcessRunner(cfg)
    default.close()
    assert isinstance(default.strategy, OneProcess) and default.is_main and default.data_parallel is None
    strategy = _Recording()
    InProcessRunner(cfg, run_dir=tmp_path / "asked", strategy=strategy).close()
    # The RNG's seed, the envs' and actors', the group before the first publish, the schedule; no resume, no restore.
    assert strategy.asked == ["env_seed", "env_seed", "attach", "updates"]
