"""The help gate on synthetic score streams: the budget, hysteresis, fail-safe NaNs and bad configs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.human_loop.help_gate import HELP_SCORES, HelpGate, HelpGateConfig


def _stream(kind: str, rng: np.random.Generator, t: int) -> dict[str, float]:
    if kind == "normal":
        return {"novelty": rng.normal(), "risk": rng.normal()}
    if kind == "heavy_tailed":  # Cauchy novelty: no mean, no variance
        return {"novelty": float(rng.standard_cauchy()), "risk": float(rng.exponential())}
    return {"novelty": rng.normal() + t / 2000, "risk": 3.0 * rng.normal()}  # drifting, different scales


@pytest.mark.parametrize("kind", ["normal", "heavy_tailed", "drifting"])
@pytest.mark.parametrize("budget", [0.05, 0.1, 0.2])
def test_the_ask_rate_converges_to_the_budget(budget: float, kind: str) -> None:
    gate = HelpGate(HelpGateConfig(enabled=True, budget=budget))
    rng = np.random.default_rng(0)
    asked = []
    for t in range(12_000):
        asked.append(gate.step(_stream(kind, rng, t)).ask)
        if t % 200 == 199:
            gate.end_episode()
    late = float(np.mean(asked[6_000:]))
    assert abs(late - budget) <= 0.1 * budget + 0.005, (late, budget)
    assert abs(gate.ask_rate - budget) <= 0.15 * budget + 0.005


def test_the_episode_budget_counts_episodes_with_a_request() -> None:
    gate = HelpGate(HelpGateConfig(enabled=True, budget=0.25, budget_unit="episodes", warmup_steps=20))
    rng = np.random.default_rng(1)
    per_episode = []
    for _ in range(800):
        asked = [gate.step({"risk": rng.normal()}).ask for _ in range(40)]
        per_episode.append(any(asked))
        gate.end_episode()
    assert abs(float(np.mean(per_episode[400:])) - 0.25) <= 0.05
    assert gate.asked_episodes == sum(per_episode)


@pytest.mark.parametrize("n", [5, 20])
def test_hysteresis_allows_at_most_one_switch_per_n_steps_on_a_noisy_stream(n: int) -> None:
    # White noise right at the threshold is the worst case for flapping: every step crosses it half the time.
    gate = HelpGate(HelpGateConfig(enabled=True, budget=0.5, min_ask_steps=n, min_gap_steps=n, warmup_steps=0))
    rng = np.random.default_rng(2)
    flags = [gate.step({"novelty": rng.normal()}).ask for _ in range(5_000)]
    switches = [i for i in range(1, len(flags)) if flags[i] != flags[i - 1]]
    assert len(switches) > 20  # it does switch
    assert min(np.diff(switches)) >= n
    assert gate.switches == len(switches) + (1 if flags[0] else 0)


def test_a_request_lasts_until_the_operator_is_done_or_the_urgency_passes() -> None:
    gate = HelpGate(HelpGateConfig(enabled=True, min_ask_steps=3, warmup_steps=0, initial_threshold=1.0))
    for _ in range(100):
        gate.step({"risk": 0.0})
    first = gate.step({"risk": 50.0})
    assert first.ask and first.started and first.reason.startswith("risk +")
    steady = [gate.step({"risk": 50.0}) for _ in range(5)]
    assert all(d.ask and not d.started for d in steady)  # still urgent: still asking
    assert not gate.step({"risk": 50.0}, operator_done=True).ask  # the operator handed back


def test_a_non_finite_score_asks_at_once_and_says_which() -> None:
    gate = HelpGate(HelpGateConfig(enabled=True, warmup_steps=1_000, budget=0.05))
    gate.step({"novelty": 0.1, "risk": 0.2})
    for bad in (math.nan, math.inf, -math.inf):
        d = gate.step({"novelty": 0.1, "risk": bad})
        assert d.ask and "risk score is" in d.reason and "fail safe" in d.reason
    # It keeps asking while the score stays NaN, past min_ask_steps, and the threshold did not learn from it.
    threshold = gate.threshold
    assert all(gate.step({"risk": math.nan}).ask for _ in range(30))
    assert gate.threshold == threshold
    assert gate.stats["risk"].count == 1


def test_scores_that_are_not_configured_are_ignored() -> None:
    gate = HelpGate(HelpGateConfig(enabled=True, scores=["risk"], warmup_steps=0, initial_threshold=0.5))
    for _ in range(50):
        gate.step({"risk": 0.0, "novelty": 0.0})
    assert not gate.step({"risk": 0.0, "novelty": 1e9}).ask
    assert "novelty" not in gate.stats


@pytest.mark.parametrize("kwargs, match", [
    ({"budget": 0.0}, r"help.budget = 0.0 must be in \(0, 1\]"),
    ({"budget": 1.5}, r"help.budget = 1.5 must be in \(0, 1\]"),
    ({"budget": -0.1}, r"must be in \(0, 1\]"),
    ({"scores": ["risk", "boredom"]}, r"unknown score\(s\) 'boredom'; known: " + ", ".join(HELP_SCORES)),
    ({"scores": []}, "help.scores is empty"),
    ({"fallback": "panic"}, "help.fallback = 'panic'; valid: continue, reset, skip"),
    ({"budget_unit": "minutes"}, "help.budget_unit"),
    ({"window": 0}, "help.window = 0 must be >= 1"),
])
def test_bad_configs_are_refused_with_the_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HelpGateConfig(**kwargs)
