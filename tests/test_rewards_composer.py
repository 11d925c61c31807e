"""Reward composition: shaping keeps the optimal policy (value iteration by hand), relabelling, wrapper, schedule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.human_loop.schedule import HILPhase, HILSchedule, ReturnAndExplore
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.composer import ComposerConfig, compose, relabel_replay, relabel_store, shaping
from robot_rl.rewards.demos import reach_pixel_demos
from robot_rl.rewards.wrapper import RewardWrapper
from robot_rl.sims.reach import ReachConfig
from robot_rl.sims.reach_pixels import ReachPixelsConfig

# A corridor of 6 states; actions 0 = left, 1 = right, 2 = stay. State 5 is the goal (terminal).
# From state 0, "stay" pays 0.08 per step forever; reaching the goal pays 1 once.
N_STATES, GOAL, GAMMA = 6, 5, 0.9


def _mdp_reward(s: int, a: int) -> tuple[int, float, bool]:
    nxt = max(0, s - 1) if a == 0 else min(GOAL, s + 1) if a == 1 else s
    reward = 1.0 if nxt == GOAL else (0.08 if (s == 0 and a == 2) else 0.0)
    return nxt, reward, nxt == GOAL


def _q_values(phi: np.ndarray | None, extra: float = 0.0) -> np.ndarray:
    """Value iteration; ``phi`` adds potential shaping through ``compose``, ``extra`` a non-potential bonus."""
    q = np.zeros((N_STATES, 3))
    cfg = ComposerConfig(gamma=GAMMA, success_weight=1.0)
    for _ in range(500):
        v = q.max(1)
        new = np.zeros_like(q)
        for s in range(GOAL):
            for a in range(3):
                nxt, r, term = _mdp_reward(s, a)
                total = r
                if phi is not None:
                    _, terms = compose(cfg, torch.tensor([False]), torch.tensor([term]),
                                            torch.tensor([phi[s]]), torch.tensor([phi[nxt]]))
                    total = r + float(terms["shaping"][0])
                if a == 2 and s == 2:
                    total += extra
                new[s, a] = total + (0.0 if term else GAMMA * v[nxt])
        q = new
    return q


def test_potential_shaping_leaves_the_optimal_policy_unchanged() -> None:
    base = _q_values(None)
    # By hand: staying at 0 forever is worth 0.08 / (1 − 0.9) = 0.8 > going right (0.9^4 = 0.656);
    # from state 1, right (0.9^3 = 0.729) narrowly beats left-then-stay (0.9 · 0.8 = 0.72).
    assert np.isclose(base[0, 2], 0.8) and np.isclose(base[0, 1], 0.9**4)
    assert np.isclose(base[1, 1], 0.9**3) and np.isclose(base[1, 0], 0.72) and np.isclose(base[4, 1], 1.0)
    policy = base[:GOAL].argmax(1)
    assert policy.tolist() == [2, 1, 1, 1, 1]
    rng = np.random.default_rng(0)
    for phi in (np.linspace(0, 1, N_STATES), rng.normal(size=N_STATES) * 5, -np.arange(N_STATES) * 2.0):
        phi = phi.astype(np.float32)
        shaped = _q_values(phi)
        assert shaped[:GOAL].argmax(1).tolist() == policy.tolist()
        # Ng et al.: Q_shaped(s, a) = Q(s, a) − Φ(s) exactly (Φ(goal) counts as 0 at termination).
        np.testing.assert_allclose(shaped[:GOAL], base[:GOAL] - phi[:GOAL, None], atol=1e-4)
    # A bonus that is not a potential difference does change the policy (the check is not vacuous).
    assert _q_values(None, extra=1.0)[2].argmax() == 2 != policy[2]


def test_compose_logs_each_term_and_human_keys_override() -> None:
    cfg = ComposerConfig(gamma=0.5, step_penalty=0.1, change_penalty=0.2, human_success=2.0, human_failure=-3.0)
    total, terms = compose(cfg, success=torch.tensor([True, False, True, False]),
                           terminated=torch.tensor([True, False, False, False]),
                           phi=torch.tensor([0.2, 0.4, 0.0, 1.0]), phi_next=torch.tensor([1.0, 0.6, 0.5, 1.0]),
                           human=torch.tensor([0, 1, -1, 0]), signal=torch.tensor([True, True, False, False]),
                           signal_prev=torch.tensor([True, False, False, False]))
    torch.testing.assert_close(terms["success"], torch.tensor([1.0, 2.0, -3.0, 0.0]))
    torch.testing.assert_close(terms["shaping"], torch.tensor([-0.2, -0.1, 0.25, -0.5]))
    torch.testing.assert_close(terms["change_penalty"], torch.tensor([0.0, -0.2, 0.0, 0.0]))
    torch.testing.assert_close(total, terms["success"] + terms["shaping"] + terms["change_penalty"] - 0.1)
    assert torch.equal(shaping(torch.ones(1), torch.ones(1), torch.tensor([True]), 0.9), torch.tensor([-1.0]))


def _old(obs: dict[str, torch.Tensor], nxt: dict[str, torch.Tensor]) -> torch.Tensor:
    return (nxt["state"][:, 0] > 0.5).float()


def _new(obs: dict[str, torch.Tensor], nxt: dict[str, torch.Tensor]) -> torch.Tensor:
    return (nxt["state"][:, 0] > 0.7).float()


def test_relabel_replay_changes_exactly_the_rows_whose_term_changed() -> None:
    spec = EnvSpec(observation={"state": ArraySpec((2,))}, action=ArraySpec((1,)))
    buf = ReplayBuffer(spec, capacity=30)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(4, 2, generator=gen)
    for _ in range(10):  # 4 envs × 10 steps = 40 rows into 30: the ring wraps
        nx = torch.rand(4, 2, generator=gen)
        term = torch.rand(4, generator=gen) < 0.2
        base = torch.randn(4, generator=gen)
        buf.add(TransitionBatch(obs={"state": x}, next_obs={"state": nx}, action=torch.zeros(4, 1),
                                reward=base + (nx[:, 0] > 0.5).float(), terminated=term,
                                truncated=torch.zeros(4, dtype=torch.bool), intervened=torch.arange(4) == 3,
                                policy_version=torch.zeros(4, dtype=torch.long), env_index=torch.arange(4)))
        x = torch.where(term[:, None], torch.rand(4, 2, generator=gen), nx)
    every = torch.arange(len(buf))
    before = buf.gather(every)
    changed = relabel_replay(buf, _old, _new, chunk=7, keep_intervened=True)
    after = buf.gather(every)
    flips = (before.next_obs["state"][:, 0] > 0.5) & (before.next_obs["state"][:, 0] <= 0.7) & ~before.intervened
    assert changed == int(flips.sum()) > 0
    assert torch.equal(after.reward[~flips], before.reward[~flips])  # bit for bit
    torch.testing.assert_close(after.reward[flips], before.reward[flips] - 1.0)
    assert relabel_replay(buf, _new, _new) == 0


def test_relabel_store_writes_a_new_store(tmp_path: Path) -> None:
    eps = reach_pixel_demos(3, image_size=8, seed=0, travel=3, hover=2)
    for ep in eps:
        ep.obs["state"] = np.linspace(0, 1, len(ep) * 2, dtype=np.float32).reshape(len(ep), 2)
        ep.final_obs["state"] = np.array([1.0, 1.0], np.float32)  # type: ignore[index]
    src = EpisodeStore.create(tmp_path / "src", spec_of(eps[0]), fps=20, task="t")
    for ep in eps:
        src.append(ep)
    n = relabel_store(tmp_path / "src", tmp_path / "dst", _old, _new)
    dst = list(EpisodeStore(tmp_path / "dst"))
    diffs = sum(int((a.reward != b.reward).sum()) for a, b in zip(EpisodeStore(tmp_path / "src"), dst, strict=True))
    assert n == diffs > 0


def test_reward_wrapper_scores_all_envs_in_one_forward() -> None:
    env = ReachPixelsConfig(image_size=16).make("cpu", 0, num_envs=5)
    clf = SuccessClassifier({"image.top": (16, 16, 3)}, features=8, channels=4, threshold=0.5)
    calls: list[int] = []
    clf.head.register_forward_hook(lambda _m, inp, _out: calls.append(inp[0].shape[0]))
    wrapped = RewardWrapper(env, clf, mode="add", success_bonus=2.0)
    wrapped.reset(seed=1)
    for _ in range(3):
        res = wrapped.step(torch.zeros(5, 2))
        fired = clf.predict({"image.top": res.info["final_obs"]["image.top"]})
        torch.testing.assert_close(res.reward, res.info["reward_terms"]["env"] + 2.0 * fired.float())
    assert calls[0::2] == [5, 5, 5]  # one batched forward per step (the other call is the check above)
    assert set(wrapped.term_means()) == {"env", "classifier"}
    with pytest.raises(ValueError, match="trained on"):
        RewardWrapper(ReachPixelsConfig(image_size=24).make("cpu", 0, num_envs=2), clf)


def test_schedule_phases_and_return_and_explore_fallback() -> None:
    sched = HILSchedule()
    assert [sched.phase_at(s).name for s in (0, 4_999, 5_000, 25_000, 10**9)] == \
        ["offline", "offline", "return_and_explore", "human_guided", "human_guided"]
    with pytest.raises(ValueError, match="unknown HIL phase"):
        HILPhase("explore", 10)
    rae = ReturnAndExplore(ReachConfig().make("cpu", 0, num_envs=2))
    assert not rae.supported and rae.reset_rows(torch.tensor([0])) is None


@pytest.mark.sim
def test_return_and_explore_restores_demo_states_in_mujoco() -> None:
    pytest.importorskip("mujoco")
    from robot_rl.sims.mujoco.tasks import MujocoReachConfig

    env = MujocoReachConfig(num_envs=3, num_threads=1).make("cpu", 0)
    rae = ReturnAndExplore(env, late_bias=1.0)
    gen = torch.Generator().manual_seed(0)
    for t in range(4):
        env.step(torch.rand(3, 3, generator=gen) * 2 - 1)
        rae.record(torch.tensor([0]), torch.tensor([t / 3]))
    late = {i for i, p in enumerate(rae.progress) if p >= 0.5}
    env.step(torch.rand(3, 3, generator=gen) * 2 - 1)
    before = env.get_state()
    obs = rae.reset_rows(torch.tensor([1, 2]))
    after = env.get_state()
    assert obs is not None and torch.equal(after[0], before[0])
    for r in (1, 2):
        assert any(torch.equal(after[r], rae.states[i]) for i in late)  # late_bias=1: late demo states only
    torch.testing.assert_close(obs["state"], env._observe(env.readout)["state"])
    assert int(env.episode_length[1]) == 0
    env.close()


def test_progress_shaping_wrapper_telescopes_per_episode() -> None:
    from robot_rl.rewards.wrapper import ProgressShapingWrapper

    env = ReachPixelsConfig(image_size=16, max_episode_steps=6).make("cpu", 0, num_envs=3)
    calls: list[int] = []

    def fake_prm(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], goals: list[str]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(len(goals))  # Φ: mean brightness change since the first frame (any state function)
        d = (b["image.top"].float().mean((1, 2, 3)) - a["image.top"].float().mean((1, 2, 3))) / 10
        return d, torch.zeros_like(d)

    wrapped = ProgressShapingWrapper(env, fake_prm, "reach", gamma=1.0)
    wrapped.reset(seed=0)
    total = torch.zeros(3)
    finals = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):  # exactly one episode per sub-env (truncated at step 6; random actions never succeed)
        res = wrapped.step(torch.rand(3, 2, generator=gen) * 0.2 - 0.1)
        total += res.info["reward_terms"]["shaping"]
        finals.append(res.info["progress"])
    assert calls == [3] * 6
    assert bool(res.truncated.all())
    # γ = 1: Σ F = Φ(s_T) − Φ(s_0) = Φ(s_T) for a truncated episode (potential-based shaping telescopes).
    torch.testing.assert_close(total, finals[-1])
