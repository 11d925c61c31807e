"""Data-parallel IQL (``run.distributed=ddp``): two gloo ranks on half a batch each take the step one process takes
on the whole batch (V, actor and critics, the normaliser), and stay bit-for-bit equal."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gloo_ranks import join, leave, leaves, state_batch

from robot_rl.core.data_parallel import SupportsDataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.policies.iql import IQLAlgorithm, IQLConfig

STATE = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
B, UPDATES = 8, 3  # rows per rank per update, updates


def _algo(batch_size: int) -> IQLAlgorithm:
    cfg = IQLConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=batch_size, normalize_obs=True)
    return cfg.build(STATE, "cpu", seed=0)


def _train(algo: IQLAlgorithm, rows: slice) -> dict[str, Any]:
    grads: dict[str, torch.Tensor] = {}
    for u in range(UPDATES):
        algo.update(state_batch(u, rows, 2 * B))
        if u == 0:
            named = {**{f"value.{k}": p for k, p in algo.value.named_parameters()},
                     **{f"critic.{k}": p for k, p in algo.critic.named_parameters()},
                     **{f"actor.{k}": p for k, p in algo.actor.trunk.named_parameters()}}
            grads = {k: p.grad.clone() for k, p in named.items() if p.grad is not None}
    return {"grads": grads, "state": leaves(algo.state_dict())}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    algo = _algo(B)
    algo.enable_data_parallel(dp)
    torch.save(_train(algo, slice(rank * B, (rank + 1) * B)), f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



def test_iql_supports_data_parallel():
    assert isinstance(_algo(B), SupportsDataParallel)


@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_both_batches(two_ranks: list[dict[str, Any]]) -> None:
    single = _train(_algo(2 * B), slice(0, 2 * B))
    ddp = two_ranks[0]
    assert ddp["grads"].keys() == single["grads"].keys()
    assert {k.split(".")[0] for k in single["grads"]} == {"value", "critic", "actor"}  # all three losses trained
    for k, ref in single["grads"].items():
        torch.testing.assert_close(ddp["grads"][k], ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"gradient {k}: {m}")
    start = leaves(_algo(2 * B).state_dict())
    moved = max(float((single["state"][k] - v).abs().max()) for k, v in start.items()
                if isinstance(v, torch.Tensor) and v.is_floating_point() and k.startswith(("actor.", "critic.")))
    assert moved > 1e-4  # the updates changed the weights, so the equality below means something
    for k, ref in single["state"].items():
        if isinstance(ref, torch.Tensor) and k.startswith(("actor.", "critic.", "critic_target.", "value.")):
            torch.testing.assert_close(ddp["state"][k], ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]]) -> None:
    r0, r1 = two_ranks[0]["state"], two_ranks[1]["state"]
    assert r0.keys() == r1.keys()
    for k, v in r0.items():
        assert torch.equal(v, r1[k]) if isinstance(v, torch.Tensor) else v == r1[k], k
