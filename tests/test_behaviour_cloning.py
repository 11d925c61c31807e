"""Behaviour cloning of demonstrations that sit on the action bound (saturated moves), for the tanh-Gaussian policies.

Scripted and human demos often push an axis to ±1. The tanh-Gaussian's likelihood of such an action has an infinite
(or, pulled inside, a huge) pre-image, and maximising it shrinks σ while the means stay off: on mujoco/pick_cube's
scripted demos that policy picked nothing (docs/algorithms.md). The supervised losses regress the deterministic
action instead; here each must fit a clipped ramp, two thirds of it on the bound, closely.
"""

from __future__ import annotations

import pytest
import torch

from robot_rl.core.config import ALGOS
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.sac import SACConfig

SPEC = EnvSpec(observation={"state": ArraySpec((1,), "float32")}, action=ArraySpec((2,), "float32", -2.0, 2.0))


def _ramp(n: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """States in [-1, 1]; actions (env units, bounds ±2): 6·x clipped on one axis, −x on the other."""
    x = torch.linspace(-1.0, 1.0, n)[:, None]
    return {"state": x}, torch.cat([(6.0 * x).clamp(-2.0, 2.0), -x], dim=-1)


@pytest.mark.parametrize("name", ["sac", "iql", "fastsac"])
def test_cloning_fits_actions_on_the_bound(name: str) -> None:
    fields: dict[str, object] = {"actor_hidden": (64, 64), "critic_hidden": (16,), "batch_size": 8}
    if name == "fastsac":
        fields["num_atoms"] = 11
    torch.manual_seed(0)
    algo = ALGOS.get(name)(**fields).build(SPEC, "cpu", 0)  # type: ignore[call-arg]
    obs, action = _ramp(256)
    algo.prepare_supervised(obs)
    optim = torch.optim.Adam(algo.supervised_parameters(), lr=3e-3)
    for _ in range(600):
        loss = algo.supervised_loss(obs, action, train_encoder=True)
        optim.zero_grad()
        loss.backward()
        optim.step()
    algo.finish_supervised()
    got, _ = algo.make_policy().act(obs, deterministic=True)
    error = (got - action).abs()
    saturated = action[:, 0].abs() >= 2.0
    assert float(saturated.float().mean()) > 0.6
    # Env units (the range is 4 wide). The likelihood left 0.060 here (SAC, same steps); this loss 0.014.
    assert float(error.mean()) < 0.03, error.mean(0)
    assert float(error[saturated, 0].mean()) < 0.04, error[saturated, 0].mean()


def _batch(obs: dict[str, torch.Tensor], action: torch.Tensor) -> TransitionBatch:
    """One-step episodes rewarded ``−a₀``: the critic learns to prefer ``a₀ = −2`` whatever the data did."""
    n = len(action)
    return TransitionBatch(obs=obs, action=action, reward=-action[:, 0], terminated=torch.ones(n, dtype=torch.bool),
                           truncated=torch.zeros(n, dtype=torch.bool), next_obs=obs,
                           intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n))


@pytest.mark.integration
def test_actor_bc_updates_clone_the_batch_then_hand_over_to_q() -> None:
    """``algo.actor_bc_updates`` (CQL's policy_eval_start): the first updates clone the batch's actions whatever Q
    says, the later ones maximise Q; without the warm-up the actor goes where Q points from the start."""
    obs, action = _ramp(256)
    batch = _batch(obs, action)

    def first_axis_error(bc_updates: int, updates: int) -> float:
        # α at 1: the entropy term's pull off the bound must not reach the clone (2/3 of the ramp is on it).
        cfg = SACConfig(actor_hidden=(64, 64), critic_hidden=(32,), batch_size=256, actor_lr=3e-3,
                        init_temperature=1.0, actor_bc_updates=bc_updates)
        algo = cfg.build(SPEC, "cpu", 0)
        for _ in range(updates):
            algo.update(batch)
        got, _ = algo.make_policy().act(obs, deterministic=True)
        return float((got - action)[:, 0].abs().mean())

    cloned, maximised = first_axis_error(400, 400), first_axis_error(0, 400)
    assert cloned < 0.1, cloned  # env units, a range 4 wide
    assert maximised > 1.0, maximised  # a₀ → −2 at every state: |ramp + 2| is 1.8 on average
    assert first_axis_error(400, 800) > 1.0  # handed over: 400 updates of −Q undo the clone


def test_actor_bc_updates_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="actor_bc_updates"):
        SACConfig(actor_bc_updates=-1).validate()
