"""Data-parallel Flow-Noise PPO on a LeRobot SmolVLA (``--algo flow_ppo algo.init_from=<SmolVLA> run.distributed=ddp``):
two gloo ranks, each with half the sub-envs of a rollout, take the step one process takes on the whole rollout (the
action expert, σ, the critic head, the KL guard's β); the frozen VLM stays bit-identical and the ranks equal.

Runs where lerobot and transformers are installed (CI's `.venv-lerobot` step); skips elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from gloo_ranks import assert_bit_equal, assert_close_floats, join, leave

from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.flow.lerobot_flow_ppo import LeRobotFlowPPOAlgorithm
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

WORDS = "reach the red green blue target".split()
T, N, UPDATES = 2, 2, 2  # rollout length, sub-envs per rank, updates


def _smolvla(out: Path) -> Path:
    """The tiny SmolVLA (seeded: every process builds the same weights)."""
    return build_tiny_smolvla(out, {"top": (48, 48)}, state_dim=6, action_dim=2, chunk_size=8, words=WORDS)


def _algo(ckpt: Path) -> LeRobotFlowPPOAlgorithm:
    spec = LangReachConfig(num_envs=1, chunk_horizon=8).make("cpu", 0).spec
    # kl_target small: the guard's β moves every update, so a β that differed between ranks would show.
    cfg = FlowPPOConfig(init_from=str(ckpt), rollout_length=T, num_minibatches=1, num_epochs=2, actor_lr=1e-3,
                        kl_target=1e-4)
    algo = cfg.build(spec, "cpu", 0)
    assert isinstance(algo, LeRobotFlowPPOAlgorithm)
    return algo


def _rollout(algo: LeRobotFlowPPOAlgorithm, update: int, cols: slice) -> list[TransitionBatch]:
    """Update ``update``'s rollout of both ranks (2·N sub-envs of lang_reach), cut to the sub-envs ``cols``."""
    g = torch.Generator().manual_seed(100 + update)
    n, policy = 2 * N, algo.policy
    env = LangReachConfig(num_envs=n, chunk_horizon=8).make("cpu", update)
    obs, steps = env.reset(seed=update), []
    for _ in range(T):
        chain = torch.randn(n, policy.num_steps + 1, policy.chunk_size, policy.pad_dim, generator=g) * 0.5
        action = torch.rand(n, 8, 2, generator=g) * 2 - 1
        r = env.step(action)
        steps.append(TransitionBatch(
            obs={k: v[cols] for k, v in obs.items()}, action=action[cols], reward=torch.randn(n, generator=g)[cols],
            terminated=r.terminated[cols], truncated=r.truncated[cols],
            next_obs={k: v[cols] for k, v in r.info["final_obs"].items()},
            intervened=torch.zeros(n, dtype=torch.bool)[cols], policy_version=torch.zeros(n, dtype=torch.long)[cols],
            env_index=torch.arange(cols.stop - cols.start), extras={"chain": chain[cols]}))
        obs = r.obs
    env.close()
    return steps


def _train(algo: LeRobotFlowPPOAlgorithm, cols: slice) -> dict[str, Any]:
    for u in range(UPDATES):
        storage = algo.make_storage(cols.stop - cols.start)
        for step in _rollout(algo, u, cols):
            storage.add(step)
        algo.update(storage)
    trainable = set(algo.policy.trainable_names())
    return {"trainable": {n: p.detach().clone() for n, p in algo.policy.named_parameters() if n in trainable},
            "frozen_sum": sum(float(p.double().sum()) for n, p in algo.policy.named_parameters() if n not in trainable),
            "critic": {k: v.clone() for k, v in algo.critic.state_dict().items()}, "kl_coef": algo.kl_coef}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    algo = _algo(_smolvla(Path(f"{out}.smolvla{rank}")))
    dp = join(rank, world, port)
    algo.enable_data_parallel(dp)
    torch.save(_train(algo, slice(rank * N, (rank + 1) * N)), f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_the_whole_rollout(two_ranks: list[dict[str, Any]],
                                                                      tmp_path: Path) -> None:
    torch.set_num_threads(1)
    algo = _algo(_smolvla(tmp_path / "smolvla"))
    start = {n: p.detach().clone() for n, p in algo.policy.named_parameters()}
    single, ddp = _train(algo, slice(0, 2 * N)), two_ranks[0]
    assert single["trainable"].keys() == ddp["trainable"].keys() and "log_sigma" in single["trainable"]
    assert max(float((single["trainable"][n] - start[n]).abs().max()) for n in single["trainable"]) > 1e-4
    # Adam divides by the gradient's running RMS: where a gradient is ~0, summation-order noise of 1e-7 in it moves
    # the weight by a fraction of the learning rate (seen: 2e-6 in one of 12,288 weights after 4 steps at lr 1e-3).
    for name in ("trainable", "critic"):
        assert_close_floats(ddp[name], single[name], atol=2e-5)
    assert ddp["kl_coef"] == pytest.approx(single["kl_coef"], rel=1e-6) != FlowPPOConfig().kl_coef  # β moved
    assert ddp["frozen_sum"] == single["frozen_sum"]  # the VLM is the checkpoint's, untouched


@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]]) -> None:
    r0, r1 = two_ranks
    for name in ("trainable", "critic"):
        assert_bit_equal(r0[name], r1[name])
    assert r0["kl_coef"] == r1["kl_coef"] and r0["frozen_sum"] == r1["frozen_sum"]


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
