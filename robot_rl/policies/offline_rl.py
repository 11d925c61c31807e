"""The maths of offline-to-online RL, as pure functions: IQL, CQL / Cal-QL, Monte-Carlo returns, chunk targets.

Each function works on tensors only (no networks, no state), so the learners that use them stay small and the
tests can check each against a hand computation.

- **IQL** (Kostrikov et al., 2021): the value ``V(s)`` is fitted to an upper *expectile* of ``Q(s, a)`` over the
  dataset's actions, so the policy is never evaluated on actions outside the data: :func:`expectile_loss`.
- **CQL** (Kumar et al., 2020): the critic loss gets ``α·(log Σ_a exp Q(s, a) − Q(s, a_data))``, which pushes
  down the Q of actions the data does not contain: :func:`cql_penalty`, with the log-sum-exp estimated from
  actions sampled from the policy and uniformly (importance weighted).
- **Cal-QL** (Nakamoto et al., 2023): the pushed-down values of the policy's actions are first clamped from
  below by a reference value, the Monte-Carlo return of the data's behaviour policy (:func:`mc_returns`), so the
  learned Q stays *calibrated* (on the scale of true returns) and online fine-tuning does not start with an
  unlearning dip. ``calibration=None`` in :func:`cql_penalty` is plain CQL.
- **Q-chunking** (Li et al., 2025): a critic over a whole action chunk of ``H`` steps backs up the chunk's
  discounted rewards and bootstraps ``γ^H`` later; :func:`chunk_targets` never bootstraps past an episode end
  inside the chunk.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# Re-exported: Cal-QL's maths reads as one page here; the function lives beside the replay's online returns, where the
# offline loader (robot_rl.data) reaches it without importing an algorithm.
from robot_rl.core.extras import MC_RETURN
from robot_rl.replay.returns import mc_returns  # noqa: F401


def mc_calibration(extras: dict[str, torch.Tensor], n: int) -> torch.Tensor:
    """Cal-QL's reference values ``[n]``: each row's Monte-Carlo return, ``extras["mc_return"]``.

    A NaN (a replayed row whose episode has not ended yet, :mod:`robot_rl.replay.returns`) becomes −inf: no clamp.
    """
    mc = extras.get(MC_RETURN.name)
    if mc is None:
        raise ValueError("calql=true needs each row's Monte-Carlo return in batch.extras['mc_return'] (offline "
                         "data loaded with its returns, robot_rl.replay.returns.mc_returns)")
    mc = mc.reshape(n).float()
    return torch.where(torch.isnan(mc), torch.full_like(mc, -math.inf), mc)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Mean of ``|τ − 1(diff < 0)|·diff²`` (IQL's value loss with ``diff = Q(s, a) − V(s)``, τ = ``expectile``).

    τ = 0.5 is half the squared error; τ → 1 fits the upper envelope of ``Q`` over the data's actions.
    """
    if not 0.0 < expectile < 1.0:
        raise ValueError(f"expectile {expectile} must be in (0, 1); IQL uses 0.7 (locomotion) to 0.9 (manipulation)")
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def cql_penalty(q_data: torch.Tensor, q_policy: torch.Tensor, log_prob_policy: torch.Tensor,
                q_uniform: torch.Tensor, action_dim: int, calibration: torch.Tensor | None = None) -> torch.Tensor:
    """CQL's conservative term per critic ``[E]``: ``log Σ_a exp Q(s, a) − Q(s, a_data)``, averaged over states.

    ``q_data`` ``[E, B]``: each critic's Q of the data's actions. ``q_policy`` ``[E, B, K]`` and
    ``log_prob_policy`` ``[B, K]``: Q and log-density of ``K`` actions sampled from the policy; ``q_uniform``
    ``[E, B, K]``: Q of ``K`` actions drawn uniformly from ``[-1, 1]^action_dim``. The log-sum-exp over all
    actions is estimated by importance sampling from both proposals (CQL(H)). ``calibration`` ``[B]``: Cal-QL's
    reference value (:func:`mc_returns`); the policy's Q values are clamped from below by it before the estimate.
    """
    if calibration is not None:
        q_policy = torch.maximum(q_policy, calibration.to(q_policy.dtype)[None, :, None])
    log_uniform = -action_dim * math.log(2.0)  # density of U([-1, 1]^d)
    k = q_policy.shape[-1] + q_uniform.shape[-1]
    weighted = torch.cat([q_uniform - log_uniform, q_policy - log_prob_policy[None]], dim=-1)
    logsumexp = torch.logsumexp(weighted, dim=-1) - math.log(k)
    return (logsumexp - q_data).mean(dim=-1)


def chunk_targets(reward: torch.Tensor, done: torch.Tensor, gamma: float, next_value: torch.Tensor,
                  terminated: torch.Tensor | None = None) -> torch.Tensor:
    """TD targets of a critic over action chunks: ``Σ_h γ^h r_h + γ^H·V(s_{t+H})``, cut at an episode end.

    ``reward``, ``done`` ``[B, H]``: the chunk's per-step rewards and whether each step ended the episode.
    ``next_value`` ``[B]``: the target critic's value after the chunk. Rewards after the first ``done`` in a chunk
    are not counted, and the chunk does not bootstrap past it: a terminated end adds nothing, a truncated one
    (``terminated`` ``[B, H]`` given and False there) bootstraps from ``next_value`` discounted to that step
    (the value must then be of the observation at that step, as the replay stores it).
    """
    if reward.shape != done.shape or reward.ndim != 2:
        raise ValueError(f"reward {tuple(reward.shape)} and done {tuple(done.shape)} must both be [B, H]")
    b, h = reward.shape
    done = done.bool()
    # alive[:, i]: no episode end strictly before step i inside the chunk.
    ended_before = torch.cumsum(done.int(), dim=1) - done.int()
    alive = ended_before == 0
    discounts = gamma ** torch.arange(h, dtype=reward.dtype, device=reward.device)
    ret = (reward * alive * discounts).sum(dim=1)
    any_done = done.any(dim=1)
    # The step the chunk stops at: its first done, or H (bootstrap after the full chunk).
    stop = torch.where(any_done, done.int().argmax(dim=1) + 1, torch.full((b,), h, device=reward.device))
    if terminated is None:
        bootstraps = ~any_done
    else:
        term_at_stop = terminated.bool().gather(1, (stop - 1).clamp(max=h - 1)[:, None])[:, 0]
        bootstraps = ~(any_done & term_at_stop)
    return ret + bootstraps.to(reward.dtype) * gamma ** stop.to(reward.dtype) * next_value


def sampled_action_q(critic: Any, sample: Any, critic_features: torch.Tensor, actor_features: torch.Tensor,
                     noise: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inputs :func:`cql_penalty` needs, from networks: ``(q_policy [E, B, K], log π [B, K], q_uniform [E, B, K])``.

    ``critic(features, action) → [E, N]``; ``sample(features, noise) → (action, log π)``. ``noise`` and
    ``uniform`` ``[K, B, |A|]``: the Gaussian noise of ``K`` policy samples per state and ``K`` uniform actions
    (drawn by the caller, so this stays a pure function). The sampled actions carry no gradient to the actor;
    their Q values do to the critic.
    """
    k, b, a = noise.shape
    with torch.no_grad():
        flat_actor = actor_features.detach().unsqueeze(0).expand(k, b, -1).reshape(k * b, -1)
        actions, log_prob = sample(flat_actor, noise.reshape(k * b, a))
    flat = critic_features.unsqueeze(0).expand(k, b, -1).reshape(k * b, -1)
    q_policy = critic(flat, actions).reshape(-1, k, b).permute(0, 2, 1)
    q_uniform = critic(flat, uniform.reshape(k * b, a)).reshape(-1, k, b).permute(0, 2, 1)
    return q_policy, log_prob.reshape(k, b).T, q_uniform
