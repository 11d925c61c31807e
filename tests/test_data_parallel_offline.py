"""The offline phase on data-parallel ranks (``--offline DATA run.distributed=ddp``): each rank trains on its own rows
of every update's draw, so 2 gloo ranks with ``batch_size`` rows each take the steps one process takes with twice
the batch (Cal-QL: CQL's sampled actions, the calibration, SAC's noise), and stay bit-for-bit equal."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gloo_ranks import assert_bit_equal, assert_close_floats, join, leave, leaves

from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.offline import OfflineData
from robot_rl.loop.offline_phase import OfflineConfig, pretrain
from robot_rl.policies.sac import SACConfig

# Both tests read what two gloo rank processes measured (tests/gloo_ranks.py; docs/testing.md's tiers).
pytestmark = pytest.mark.integration

STATE = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
B, UPDATES, ROWS = 8, 3, 40  # rows per rank per update, offline updates, rows of data


def _data() -> OfflineData:
    g, n = torch.Generator().manual_seed(5), ROWS
    train = TransitionBatch(obs={"state": torch.randn(n, 3, generator=g)},
                            action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                            terminated=torch.rand(n, generator=g) < 0.1, truncated=torch.zeros(n, dtype=torch.bool),
                            next_obs={"state": torch.randn(n, 3, generator=g)},
                            intervened=torch.zeros(n, dtype=torch.bool),
                            policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.zeros(n, dtype=torch.long),
                            extras={"mc_return": torch.randn(n, generator=g) * 5})
    return OfflineData(train=train, heldout=None, episodes=4, quarantined=0)


def _pretrain(batch_size: int, dp: DataParallel | None) -> dict[str, Any]:
    algo = SACConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=batch_size, cql_alpha=1.0, cql_samples=3,
                     calql=True).build(STATE, "cpu", seed=0)
    if dp is not None:
        algo.enable_data_parallel(dp)
    curve = pretrain(algo, _data(), OfflineConfig(updates=UPDATES, log_every=1), batch_size, seed=3, progress=False,
                     data_parallel=dp)
    return {"state": leaves(algo.state_dict()), "curve": curve}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    torch.save(_pretrain(B, dp), f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



def test_two_ranks_pretrain_as_one_process_with_both_ranks_rows(two_ranks: list[dict[str, Any]]) -> None:
    single, ddp = _pretrain(2 * B, None), two_ranks[0]
    assert len(ddp["curve"]) == UPDATES
    start = leaves(SACConfig(actor_hidden=(16,), critic_hidden=(16,)).build(STATE, "cpu", seed=0).state_dict())
    moved = max(float((single["state"][k] - v).abs().max()) for k, v in start.items()
                if isinstance(v, torch.Tensor) and v.is_floating_point() and k.startswith("critic."))
    assert moved > 1e-4  # the updates changed the weights, so the equality below means something
    assert_close_floats(ddp["state"], single["state"])


def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]]) -> None:
    assert_bit_equal(two_ranks[0]["state"], two_ranks[1]["state"])
