"""SAC with CQL / Cal-QL: on offline data of one action the critic's Q of unseen actions goes down."""

from __future__ import annotations

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.sac import SACConfig

SPEC = EnvSpec(observation={"state": ArraySpec((2,), "float32")}, action=ArraySpec((1,), "float32", -1.0, 1.0))


def _bandit_data(n: int, mc_return: float | None = None) -> TransitionBatch:
    # One-step episodes from random states; the data's behaviour always takes a ≈ 0.5 and is paid 1.
    g = torch.Generator().manual_seed(0)
    obs = {"state": torch.rand((n, 2), generator=g) * 2 - 1}
    action = (0.5 + 0.05 * torch.randn((n, 1), generator=g)).clamp(-1, 1)
    extras = {} if mc_return is None else {"mc_return": torch.full((n,), mc_return)}
    return TransitionBatch(obs=obs, action=action, reward=torch.ones(n), terminated=torch.ones(n, dtype=torch.bool),
                           truncated=torch.zeros(n, dtype=torch.bool), next_obs=obs,
                           intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.int64),
                           env_index=torch.zeros(n, dtype=torch.int64), extras=extras)


def _q_gap(cfg: SACConfig, data: TransitionBatch, updates: int = 300) -> tuple[float, float]:
    """(mean Q at the data's action, mean Q at actions far from it) after ``updates`` offline updates."""
    algo = cfg.build(SPEC, "cpu", 0)
    g = torch.Generator().manual_seed(1)
    for _ in range(updates):
        idx = torch.randint(0, len(data), (64,), generator=g)
        algo.update(TransitionBatch(obs={"state": data.obs["state"][idx]}, action=data.action[idx],
                                    reward=data.reward[idx], terminated=data.terminated[idx],
                                    truncated=data.truncated[idx], next_obs={"state": data.next_obs["state"][idx]},
                                    intervened=data.intervened[idx], policy_version=data.policy_version[idx],
                                    env_index=data.env_index[idx], extras={k: v[idx] for k, v in data.extras.items()}))
    states = torch.rand((256, 2), generator=g) * 2 - 1
    with torch.no_grad():
        f = algo.actor.encoder({"state": states})
        seen = algo.critic(f, torch.full((256, 1), 0.5)).mean().item()
        unseen = torch.stack([algo.critic(f, torch.full((256, 1), a)).mean() for a in (-0.9, -0.5, 0.0)]).mean().item()
    return seen, unseen


def _cfg(**kw) -> SACConfig:
    return SACConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=64, learning_starts=0,
                     init_temperature=0.01, **kw)


def test_cql_pushes_unseen_actions_below_the_data_and_plain_sac_does_not() -> None:
    data = _bandit_data(512)
    seen_plain, unseen_plain = _q_gap(_cfg(), data)
    seen_cql, unseen_cql = _q_gap(_cfg(cql_alpha=2.0), data)
    assert seen_cql == pytest.approx(1.0, abs=0.35)  # the data's action keeps its value (reward 1, terminal)
    assert seen_cql - unseen_cql > 1.0, (seen_cql, unseen_cql)
    assert (seen_cql - unseen_cql) > (seen_plain - unseen_plain) + 0.5, (seen_plain, unseen_plain)


def test_calql_keeps_the_policy_values_at_least_at_the_data_returns() -> None:
    data = _bandit_data(512, mc_return=1.0)
    seen, unseen = _q_gap(_cfg(cql_alpha=2.0, calql=True), data)
    assert seen == pytest.approx(1.0, abs=0.35) and seen - unseen > 0.5
    with pytest.raises(ValueError, match="mc_return"):
        _q_gap(_cfg(cql_alpha=2.0, calql=True), _bandit_data(64), updates=1)
    with pytest.raises(ValueError, match="calql needs cql_alpha"):
        _cfg(calql=True).validate()


def test_the_conservative_term_ends_with_the_offline_phase() -> None:
    from robot_rl.core.algorithm import OfflinePhaseAware

    algo = _cfg(cql_alpha=2.0, calql=True).build(SPEC, "cpu", 0)
    assert isinstance(algo, OfflinePhaseAware)
    algo.finish_offline()
    assert algo.cfg.cql_alpha == 0.0 and not algo.cfg.calql
    algo.update(_bandit_data(64))  # online rows without Monte-Carlo returns update without error


@pytest.mark.parametrize("backup_entropy", [True, False])
def test_td_target_backs_up_the_entropy_only_when_asked(backup_entropy: bool) -> None:
    """``algo.backup_entropy=false`` (CQL's and Cal-QL's reference): y = r + γ·min Q̄(s', a'), no −α·log π(a'|s')."""
    cfg = SACConfig(critic_hidden=(16,), actor_hidden=(16,), gamma=0.9, init_temperature=0.5,
                    backup_entropy=backup_entropy)
    algo = cfg.build(SPEC, "cpu", 0)
    n = 8
    g = torch.Generator().manual_seed(3)
    obs, next_obs = {"state": torch.randn((n, 2), generator=g)}, {"state": torch.randn((n, 2), generator=g)}
    action, noise = torch.rand((n, 1), generator=g) * 2 - 1, torch.randn((n, 1), generator=g)
    reward, terminated = torch.randn(n, generator=g), torch.zeros(n, dtype=torch.bool)
    alpha = torch.tensor(0.5)
    loss, _, _ = algo.critic_loss(obs, action, reward, terminated, next_obs, noise, None, alpha)
    with torch.no_grad():  # by hand
        feats = algo.actor.encoder(next_obs)
        next_action, log_prob = algo.actor.sample(feats, noise)
        soft = algo.critic_target(feats, next_action).min(dim=0).values
        if backup_entropy:
            soft = soft - alpha * log_prob
        target = reward + 0.9 * soft
        q = algo.critic(algo.actor.encoder(obs), action)
        expected = 0.5 * (q - target).square().mean(dim=1).sum()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert float(log_prob.abs().mean()) > 0.1  # the two settings differ on these rows
