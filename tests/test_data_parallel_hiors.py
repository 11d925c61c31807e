"""Data-parallel Hi-ORS (``run.distributed=ddp``): each rank keeps its own accepted rows, every rank judges every
rank's finished episodes against one return history, and the ranks stay bit-for-bit equal while they train."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gloo_ranks import join, leave

from robot_rl.core.data_parallel import SupportsDataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.flow.hiors import HiORSAlgorithm, HiORSConfig
from robot_rl.policies.flow.model import FlowVLAConfig

H, A = 2, 2
SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((H, A), low=-1.0, high=1.0))
T, N, UPDATES = 4, 3, 3  # rollout length, sub-envs per rank, updates


def _algo() -> HiORSAlgorithm:
    policy = FlowVLAConfig(horizon=H, num_steps=2, hidden=16, expert_layers=1, state_features=8)
    cfg = HiORSConfig(policy=policy, rollout_length=T, accept="top_return", top_fraction=0.5, min_buffer=4,
                      updates_per_rollout=2, batch_size=8, lr=1e-3)
    algo = cfg.build(SPEC, "cpu", seed=0)
    assert isinstance(algo, HiORSAlgorithm)
    return algo


def _rollout(rank: int, update: int) -> list[TransitionBatch]:
    """Rank ``rank``'s rollout of update ``update``: its own rewards and episode ends (ranks see different data)."""
    g = torch.Generator().manual_seed(100 * rank + update)
    steps = []
    for _ in range(T):
        steps.append(TransitionBatch(
            obs={"state": torch.randn(N, 3, generator=g)}, action=torch.rand(N, H, A, generator=g) * 2 - 1,
            reward=torch.randn(N, generator=g), terminated=torch.rand(N, generator=g) < 0.3,
            truncated=torch.rand(N, generator=g) < 0.2, next_obs={"state": torch.randn(N, 3, generator=g)},
            intervened=torch.zeros(N, dtype=torch.bool), policy_version=torch.zeros(N, dtype=torch.long),
            env_index=torch.arange(N)))
    return steps


def _train(algo: HiORSAlgorithm, rank: int) -> dict[str, Any]:
    stats = []
    for u in range(UPDATES):
        storage = algo.make_storage(N)
        for step in _rollout(rank, u):
            storage.add(step)
        stats.append(algo.update(storage))
    return {"weights": {k: v.clone() for k, v in algo.policy.state_dict().items()}, "returns": list(algo.returns),
            "episodes": algo.episodes, "accepted": algo.accepted_episodes, "buffer": len(algo.buffer),
            "stats": stats}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    algo = _algo()
    algo.enable_data_parallel(dp)
    torch.save(_train(algo, rank), f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



def test_hiors_supports_data_parallel():
    assert isinstance(_algo(), SupportsDataParallel)


@pytest.mark.integration
def test_ranks_judge_every_rank_s_episodes_alike_and_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]]) -> None:
    r0, r1 = two_ranks
    alone = [_train(_algo(), rank) for rank in range(2)]  # each rank's own episodes, judged without the other's
    assert r0["episodes"] == r1["episodes"] == alone[0]["episodes"] + alone[1]["episodes"]
    assert r0["returns"] == r1["returns"] and r0["accepted"] == r1["accepted"]
    assert sorted(r0["returns"]) == pytest.approx(sorted(alone[0]["returns"] + alone[1]["returns"]))
    assert r0["buffer"] > 0 and r1["buffer"] > 0  # each keeps its own accepted rows
    assert any(s["flow_loss"] == s["flow_loss"] for s in r0["stats"])  # some update took gradient steps
    start = _algo().policy.state_dict()
    assert max(float((r0["weights"][k] - v).abs().max()) for k, v in start.items()) > 1e-4
    for k, v in r0["weights"].items():
        assert torch.equal(v, r1["weights"][k]), k
