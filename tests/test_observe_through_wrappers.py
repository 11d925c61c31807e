"""An observation asked for outside ``step`` goes through every wrapper (issue 51 item 4).

Return-and-explore restores demo states and then needs the observation the policy would see. It used to call the
innermost env's private ``_observe`` through ``VecEnvWrapper.__getattr__``, which skipped every wrapper: a
``SelectObservation`` still showed the keys it hides. Now ``observe`` is declared (:class:`Observable`) and each
wrapper passes it through its own ``observation``.
"""

from __future__ import annotations

import pytest
import torch

from robot_rl.core.env import Observable, SelectObservation, VecEnvWrapper, observable, wrapped_envs
from robot_rl.hil.schedule import ReturnAndExplore
from robot_rl.testing.fake_env import FakeVecEnv

pytestmark = pytest.mark.unit


class RestorableFake(FakeVecEnv):
    """The fake env with a writable state and a current observation (what MuJoCo has)."""

    def get_state(self) -> torch.Tensor:
        return self._state.clone()

    def set_state(self, state: torch.Tensor) -> None:
        self._state.copy_(state)

    def observe(self) -> dict[str, torch.Tensor]:
        return self._obs()

    # What the old probe looked for (MuJoCo's private hook and readout): kept so that the test fails on that code.
    readout = None

    def _observe(self, readout: object) -> dict[str, torch.Tensor]:
        return self._obs()


def test_return_and_explore_observes_through_the_wrappers() -> None:
    inner = RestorableFake(num_envs=2, image=True)
    env = SelectObservation(VecEnvWrapper(inner), ["state"])
    env.reset(seed=0)
    rae = ReturnAndExplore(env)
    assert rae.supported
    demo_state = torch.tensor([0.5, -0.5, 0.25])
    rae.add_states([demo_state])
    obs = rae.reset_rows(torch.tensor([1]))
    assert obs is not None and set(obs) == {"state"}  # the wrapper hides the camera: so does this observation
    assert torch.equal(obs["state"][1], demo_state)


def test_restored_rows_start_their_episode_counters_at_zero() -> None:
    inner = RestorableFake(num_envs=2)
    inner.episode_length = torch.tensor([7, 3])  # the fake counts nothing itself: declare the counters
    inner.episode_return = torch.tensor([1.5, 0.5])
    rae = ReturnAndExplore(VecEnvWrapper(inner))
    rae.add_states([torch.zeros(3)])
    assert rae.reset_rows(torch.tensor([0])) is not None
    assert inner.episode_length.tolist() == [0, 3] and inner.episode_return.tolist() == [0.0, 0.5]


def test_an_env_that_cannot_observe_falls_back_to_ordinary_resets() -> None:
    env = VecEnvWrapper(FakeVecEnv(num_envs=2))
    assert observable(env) is None and isinstance(env, Observable)  # the wrapper has observe(); its env does not
    with pytest.raises(TypeError, match="cannot observe"):
        env.observe()
    rae = ReturnAndExplore(env)
    assert not rae.supported and rae.reset_rows(torch.tensor([0])) is None


def test_wrapped_envs_lists_the_chain_innermost_last() -> None:
    inner = FakeVecEnv(num_envs=1)
    middle = VecEnvWrapper(inner)
    outer = SelectObservation(middle, ["state"])
    assert list(wrapped_envs(outer)) == [outer, middle, inner]
    assert observable(SelectObservation(RestorableFake(num_envs=1), ["state"])) is not None
