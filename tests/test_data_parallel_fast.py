"""Data-parallel FastTD3 and FastSAC (``run.distributed=ddp``): two gloo ranks on half a batch each take the step one
process takes on the whole batch (critics, the delayed actor, FastSAC's α, the normaliser), stay bit-for-bit equal,
and count the steps before the first update over every rank's sub-envs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gloo_ranks import assert_bit_equal, assert_close_floats, join, leave, leaves, state_batch

from robot_rl.core.data_parallel import SupportsDataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.policies.fast_offpolicy import FastOffPolicyLearner
from robot_rl.policies.fastsac import FastSACConfig
from robot_rl.policies.td3 import TD3Config

STATE = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
B, UPDATES = 8, 3  # rows per rank per update, updates (FastTD3's delayed actor learns at the 2nd)
ALGOS = {"fasttd3": TD3Config, "fastsac": FastSACConfig}


def _algo(name: str, batch_size: int) -> FastOffPolicyLearner:
    cfg = ALGOS[name](actor_hidden=(16,), critic_hidden=(16,), num_atoms=11, batch_size=batch_size,
                      learning_starts_steps=5)
    algo = cfg.build(STATE, "cpu", seed=0)
    algo.make_storage(4)
    return algo


def _train(algo: FastOffPolicyLearner, rows: slice) -> dict[str, Any]:
    grads: dict[str, torch.Tensor] = {}
    for u in range(UPDATES):
        algo.update(state_batch(u, rows, 2 * B))
        if u == 1:  # the gradients of the 2nd update: FastTD3's delayed actor learns there
            named = {**{f"critic.{k}": p for k, p in algo.critic.named_parameters()},
                     **{f"actor.{k}": p for k, p in algo.actor.trunk.named_parameters()}}
            named.update({"log_alpha": algo.log_alpha} if hasattr(algo, "log_alpha") else {})
            grads = {k: p.grad.clone() for k, p in named.items() if p.grad is not None}
    return {"grads": grads, "state": leaves(algo.state_dict()), "learning_starts": algo.learning_starts,
            "utd_ratio": algo.utd_ratio}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    results = {}
    for name in ALGOS:
        algo = _algo(name, B)
        algo.enable_data_parallel(dp)
        results[name] = _train(algo, slice(rank * B, (rank + 1) * B))
    torch.save(results, f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



@pytest.mark.parametrize("name", sorted(ALGOS))
def test_fast_learners_support_data_parallel(name: str) -> None:
    assert isinstance(_algo(name, B), SupportsDataParallel)


@pytest.mark.parametrize("name", sorted(ALGOS))
@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_both_batches(two_ranks: list[dict[str, Any]], name: str) -> None:
    single = _train(_algo(name, 2 * B), slice(0, 2 * B))
    ddp = two_ranks[0][name]
    assert ddp["grads"].keys() == single["grads"].keys()
    trained = {k.split(".")[0] for k in single["grads"]}
    assert trained == ({"critic", "actor", "log_alpha"} if name == "fastsac" else {"critic", "actor"})
    for k, ref in single["grads"].items():
        torch.testing.assert_close(ddp["grads"][k], ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"gradient {k}: {m}")
    start = leaves(_algo(name, 2 * B).state_dict())
    moved = max(float((single["state"][k] - v).abs().max()) for k, v in start.items()
                if isinstance(v, torch.Tensor) and v.is_floating_point() and k.startswith(("actor.", "critic.")))
    assert moved > 1e-4  # the updates changed the weights, so the equality below means something
    assert_close_floats(ddp["state"], single["state"])


@pytest.mark.parametrize("name", sorted(ALGOS))
@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]], name: str) -> None:
    assert_bit_equal(two_ranks[0][name]["state"], two_ranks[1][name]["state"])


@pytest.mark.parametrize("name", sorted(ALGOS))
@pytest.mark.integration
def test_learning_starts_counts_every_rank_s_rows(two_ranks: list[dict[str, Any]], name: str) -> None:
    # 5 vectorised steps of 4 sub-envs (at least a batch) per rank: the lockstep schedule compares the run's rows.
    alone = _algo(name, B)
    assert alone.learning_starts == max(5 * 4, B)
    assert two_ranks[0][name]["learning_starts"] == 2 * alone.learning_starts
    assert two_ranks[0][name]["utd_ratio"] == alone.utd_ratio  # updates_per_step per step of a rank's sub-envs
