"""Offline-to-online maths against hand computations: IQL's expectile, CQL / Cal-QL, MC returns, chunk targets."""

from __future__ import annotations

import math

import pytest
import torch

from robot_rl.policies.offline_rl import chunk_targets, cql_penalty, expectile_loss, mc_returns


def test_the_expectile_loss_weights_the_two_sides_by_tau() -> None:
    diff = torch.tensor([2.0, -1.0])
    # 0.9·4 and 0.1·1, averaged: (3.6 + 0.1) / 2
    assert expectile_loss(diff, 0.9).item() == pytest.approx(1.85)
    assert expectile_loss(diff, 0.5).item() == pytest.approx(0.5 * (4 + 1) / 2)
    # Minimising it over a constant v fits an upper expectile: above the mean of the samples for τ > 0.5.
    q = torch.tensor([0.0, 1.0, 2.0, 10.0])
    v = torch.zeros((), requires_grad=True)
    opt = torch.optim.SGD([v], lr=0.1)
    for _ in range(2000):
        opt.zero_grad()
        expectile_loss(q - v, 0.9).backward()
        opt.step()
    # The 0.9-expectile solves Σ w_i (q_i − v) = 0; for v in (2, 10):
    # 0.1·(v − 0) + 0.1·(v − 1) + 0.1·(v − 2) = 0.9·(10 − v).
    assert v.item() == pytest.approx((0.3 + 9.0) / 1.2, abs=1e-3)
    with pytest.raises(ValueError, match="expectile"):
        expectile_loss(diff, 1.0)


def test_mc_returns_restart_at_episode_ends_and_refuse_nan() -> None:
    r = torch.tensor([1.0, 1.0, 1.0, 5.0, 0.0])
    end = torch.tensor([False, False, True, False, False])
    out = mc_returns(r, end, 0.5)
    assert out.tolist() == pytest.approx([1 + 0.5 + 0.25, 1 + 0.5, 1.0, 5.0, 0.0])
    boot = torch.tensor([0.0, 0.0, 8.0, 0.0, 0.0])  # the first episode was truncated; its tail is worth 8
    assert mc_returns(r, end, 0.5, bootstrap=boot)[0].item() == pytest.approx(1.75 + 0.125 * 8)
    with pytest.raises(ValueError, match="non-finite rewards at rows \\[1\\]"):
        mc_returns(torch.tensor([0.0, math.nan]), torch.tensor([False, True]), 0.9)


def test_cql_penalty_is_the_importance_weighted_logsumexp_minus_the_data_q() -> None:
    q_data = torch.tensor([[1.0]])
    q_pi = torch.tensor([[[2.0]]])
    logp = torch.tensor([[0.5]])
    q_u = torch.tensor([[[0.0]]])
    # log((exp(0 + log 2) + exp(2 − 0.5)) / 2) − 1, with d = 1: the uniform density on [-1, 1] is 1/2.
    want = math.log((math.exp(math.log(2.0)) + math.exp(1.5)) / 2) - 1.0
    assert cql_penalty(q_data, q_pi, logp, q_u, action_dim=1).item() == pytest.approx(want)
    # Cal-QL: the policy's Q is clamped from below by the reference value 4 before the estimate.
    cal = torch.tensor([4.0])
    want_cal = math.log((2.0 + math.exp(4.0 - 0.5)) / 2) - 1.0
    assert cql_penalty(q_data, q_pi, logp, q_u, 1, calibration=cal).item() == pytest.approx(want_cal)


def test_the_conservative_term_lowers_out_of_distribution_q_on_a_bandit() -> None:
    # One state, actions on a grid of [-1, 1]; the data only holds a = 0.5 with reward 1. A tabular critic starts
    # optimistic (Q = 5 everywhere). TD alone never touches the unseen actions; CQL pushes them below the seen one.
    grid = torch.linspace(-1, 1, 9)
    seen = 6  # grid[6] = 0.5

    def train(alpha: float) -> torch.Tensor:
        q = torch.full((9,), 5.0, requires_grad=True)
        opt = torch.optim.Adam([q], lr=0.05)
        for _ in range(600):
            opt.zero_grad()
            td = (q[seen] - 1.0).square()
            # Both proposals cover the grid: uniform with density 1/2 per unit; the "policy" is uniform too.
            all_q = q[None, None, :]
            penalty = cql_penalty(q[seen].reshape(1, 1), all_q, torch.full((1, 9), -math.log(2.0)), all_q, 1)
            (td + alpha * penalty.sum()).backward()
            opt.step()
        return q.detach()

    plain, conservative = train(0.0), train(1.0)
    unseen = [i for i in range(9) if i != seen]
    assert plain[unseen].min().item() == pytest.approx(5.0)  # TD alone leaves them optimistic
    assert conservative[unseen].max() < conservative[seen] - 0.5
    assert conservative[seen].item() == pytest.approx(1.0, abs=0.3) and grid[seen].item() == 0.5


def test_chunk_targets_sum_the_chunk_and_never_bootstrap_past_an_end() -> None:
    r = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    done = torch.tensor([[False, False, False], [False, True, False], [False, True, False]])
    terminated = torch.tensor([[False, False, False], [False, True, False], [False, False, False]])
    v = torch.tensor([10.0, 10.0, 10.0])
    g = 0.5
    out = chunk_targets(r, done, g, v, terminated)
    assert out[0].item() == pytest.approx(1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10)  # the full chunk, then V
    assert out[1].item() == pytest.approx(1 + 0.5 * 2)  # terminated at step 1: step 2's reward and V dropped
    assert out[2].item() == pytest.approx(1 + 0.5 * 2 + 0.25 * 10)  # truncated at step 1: bootstrap there
    assert chunk_targets(r, done, g, v)[2].item() == pytest.approx(1 + 0.5 * 2)  # no flags: every end terminal
    with pytest.raises(ValueError, match=r"\[B, H\]"):
        chunk_targets(r[0], done[0], g, v)
