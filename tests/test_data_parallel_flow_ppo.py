"""Data-parallel Flow-Noise PPO (``run.distributed=ddp``): two gloo ranks, each with half the sub-envs of a rollout,
take the step one process takes on the whole rollout (policy, σ, critic, the KL guard's β), and stay bit-for-bit
equal also with several minibatches and a frozen encoder."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gloo_ranks import join, leave

from robot_rl.core.data_parallel import SupportsDataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.ppo import FlowPPOAlgorithm, FlowPPOConfig

H, A, K = 2, 2, 2  # chunk horizon, action dims, denoising steps
SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((H, A), low=-1.0, high=1.0))
T, N, UPDATES = 4, 3, 3  # rollout length, sub-envs per rank, updates

#: The variants one pair of rank processes checks. "one-minibatch" is the step of one process on the union;
#: with several minibatches a rank's minibatch is part of its own rollout, so only the ranks' equality holds.
VARIANTS: dict[str, dict[str, Any]] = {
    "one-minibatch": {"num_minibatches": 1, "num_epochs": 2},
    "minibatches-frozen-encoder": {"num_minibatches": 2, "num_epochs": 2, "freeze_encoder": True},
}


def _algo(variant: str) -> FlowPPOAlgorithm:
    policy = FlowVLAConfig(horizon=H, num_steps=K, hidden=16, expert_layers=1, state_features=8)
    # kl_target small: the guard's β moves every update, so a β that differed between ranks would show.
    cfg = FlowPPOConfig(policy=policy, rollout_length=T, actor_lr=1e-3, kl_target=1e-4, critic_hidden=(16,),
                        **VARIANTS[variant])
    algo = cfg.build(SPEC, "cpu", seed=0)
    assert isinstance(algo, FlowPPOAlgorithm)
    return algo


def _rollout(update: int, cols: slice) -> list[TransitionBatch]:
    """Update ``update``'s rollout of both ranks (2·N sub-envs), cut to the sub-envs ``cols``."""
    g = torch.Generator().manual_seed(100 + update)
    n = 2 * N
    obs = torch.randn(T + 1, n, 3, generator=g)
    steps = []
    for t in range(T):
        chain = torch.randn(n, K + 1, H, A, generator=g) * 0.5
        steps.append(TransitionBatch(
            obs={"state": obs[t, cols]}, action=chain[cols, -1].clamp(-1, 1), reward=torch.randn(n, generator=g)[cols],
            terminated=(torch.rand(n, generator=g) < 0.2)[cols], truncated=torch.zeros(n, dtype=torch.bool)[cols],
            next_obs={"state": obs[t + 1, cols]}, intervened=torch.zeros(n, dtype=torch.bool)[cols],
            policy_version=torch.zeros(n, dtype=torch.long)[cols], env_index=torch.arange(cols.stop - cols.start),
            extras={"chain": chain[cols]}))
    return steps


def _train(algo: FlowPPOAlgorithm, cols: slice) -> dict[str, Any]:
    stats = []
    for u in range(UPDATES):
        storage = algo.make_storage(cols.stop - cols.start)
        for step in _rollout(u, cols):
            storage.add(step)
        stats.append(algo.update(storage))
    return {"params": _weights(algo), "kl_coef": algo.kl_coef, "stats": stats}


def _weights(algo: FlowPPOAlgorithm) -> dict[str, torch.Tensor]:
    return {f"{net}.{k}": v.clone() for net in ("policy", "critic") for k, v in getattr(algo, net).state_dict().items()}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    results = {}
    for variant in VARIANTS:
        algo = _algo(variant)
        algo.enable_data_parallel(dp)
        results[variant] = _train(algo, slice(rank * N, (rank + 1) * N))
    torch.save(results, f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



def test_flow_ppo_supports_data_parallel():
    assert isinstance(_algo("one-minibatch"), SupportsDataParallel)


@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_the_whole_rollout(two_ranks: list[dict[str, Any]]) -> None:
    single = _train(_algo("one-minibatch"), slice(0, 2 * N))
    ddp = two_ranks[0]["one-minibatch"]
    ref, got = single["params"], ddp["params"]
    assert ref.keys() == got.keys() and "policy.log_sigma" in ref
    start = _weights(_algo("one-minibatch"))
    assert max(float((ref[k] - v).abs().max()) for k, v in start.items()) > 1e-4  # the updates moved the weights
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
    assert ddp["kl_coef"] == pytest.approx(single["kl_coef"])
    assert [s["kl_ref"] for s in ddp["stats"]] == pytest.approx([s["kl_ref"] for s in single["stats"]], rel=1e-4)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]], variant: str) -> None:
    r0, r1 = two_ranks[0][variant]["params"], two_ranks[1][variant]["params"]
    for k, v in r0.items():
        assert torch.equal(v, r1[k]), k
    assert two_ranks[0][variant]["kl_coef"] == two_ranks[1][variant]["kl_coef"]
