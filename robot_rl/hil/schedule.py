"""The graded human-in-the-loop schedule (VLAC) as a config, and return-and-explore resets.

Three phases, in order, each lasting a number of env steps:

1. ``offline``: replay demos only (the learner trains on the demo buffer; actors do not act);
2. ``return_and_explore``: episodes start, with probability ``reset_to_demo_prob``, from a state
   visited by a demo (chosen uniformly, or from the demo's later part with ``late_bias``), so the
   policy practises the hard end of the task; needs a backend with ``get_state``/``set_state``
   (the MuJoCo tasks); other backends fall back to ordinary resets and say so once;
3. ``human_guided``: ordinary resets; a human may take over (teleop) and press success/failure
   keys, which the reward composer turns into the success term.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from robot_rl.core.algorithm import NamedBufferStorage
from robot_rl.core.config import ConfigError
from robot_rl.core.env import CountsEpisodes, StepResult, VecEnv, observable, wrapped_envs
from robot_rl.hil.config import PHASES, HILConfig, HILPhase, HILSchedule

__all__ = ["PHASES", "HILConfig", "HILController", "HILPhase", "HILSchedule", "ReturnAndExplore", "StateRestorable",
           "demo_buffer", "run_offline_phase"]

if TYPE_CHECKING:
    from robot_rl.hardware.teleop import TeleopDevice

log = logging.getLogger(__name__)

@runtime_checkable
class StateRestorable(Protocol):
    """A VecEnv whose physics state can be read and written (``[N, S]`` for all worlds)."""

    def get_state(self) -> torch.Tensor:
        """Every world's state."""

    def set_state(self, state: torch.Tensor) -> None:
        """Load every world's state."""


class ReturnAndExplore:
    """A pool of demo states and the reset that puts chosen sub-envs back into them.

    Call :meth:`record` on every step of a demo rollout (states of sub-env rows that are in a demo),
    then :meth:`reset_rows` on the sub-envs whose episode just ended.
    """

    def __init__(self, env: VecEnv, late_bias: float = 0.0, seed: int = 0) -> None:
        self.env = env
        self.source = observable(env)
        self.supported = isinstance(env, StateRestorable) and self.source is not None
        if not self.supported:
            log.warning("%s has no get_state/set_state or observe: return-and-explore falls back to ordinary resets",
                        type(env).__name__)
        self.late_bias = late_bias
        self.states: list[torch.Tensor] = []
        self.progress: list[float] = []
        self.gen = torch.Generator().manual_seed(seed)

    def record(self, rows: torch.Tensor, progress: torch.Tensor) -> None:
        """Store the current states of sub-envs ``rows`` with their progress (t / demo length)."""
        if not self.supported:
            return
        state = self.env.get_state()  # type: ignore[attr-defined]
        for r, p in zip(rows.tolist(), progress.tolist(), strict=True):
            self.states.append(state[r].clone())
            self.progress.append(float(p))

    def add_states(self, states: list[torch.Tensor]) -> None:
        """Store the states of one successful demonstrated episode, in order (progress = t / length)."""
        if not self.supported:
            return
        for t, st in enumerate(states):
            self.states.append(st.clone())
            self.progress.append(t / max(len(states), 1))

    def reset_rows(self, rows: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """Put sub-envs ``rows`` into demo states; returns the new observation of all sub-envs.

        ``None`` (nothing changed) if the backend cannot restore states or the pool is empty.
        Episode counters of those rows restart at 0: a new episode begins at the demo state.
        """
        if not self.supported or not self.states or len(rows) == 0:
            return None
        prog = torch.tensor(self.progress)
        weight = torch.where(prog >= 0.5, 1.0, 1.0 - self.late_bias)
        pick = torch.multinomial(weight, len(rows), replacement=True, generator=self.gen)
        state = self.env.get_state()  # type: ignore[attr-defined]
        for r, i in zip(rows.tolist(), pick.tolist(), strict=True):
            state[r] = self.states[i]
        self.env.set_state(state)  # type: ignore[attr-defined]
        counting = next((e for e in wrapped_envs(self.env) if isinstance(e, CountsEpisodes)), None)
        for counter in (counting.episode_length, counting.episode_return) if counting is not None else ():
            counter[rows.to(counter.device)] = 0
        assert self.source is not None  # supported
        return self.source.observe()  # through every wrapper: the observation the policy sees


# ---- the schedule in the training loop ---------------------------------------------------------

def demo_buffer(learner: Any) -> Any:
    """The learner's non-empty demo buffer, or a ``ValueError`` saying how to give it one."""
    storage = learner.storage
    demos = storage.buffers.get("demos") if isinstance(storage, NamedBufferStorage) else None
    if demos is None or len(demos) == 0:
        raise ConfigError("loop.hil: the offline phase trains on demos; set demos.path and give the "
                          "algorithm a demo buffer (e.g. algo.demo_ratio=0.5), or loop.hil.offline_updates=0")
    return demos


def run_offline_phase(learner: Any, updates: int) -> int:
    """The offline phase: ``updates`` gradient updates on batches drawn from the demo buffer only."""
    if updates == 0:
        return 0
    demos = demo_buffer(learner)
    for _ in range(updates):
        learner.last_stats = learner.algo.update(demos.sample(learner.algo.batch_size))
        learner.updates += 1
    learner.publish()
    log.info("HIL phase offline: %d updates on %d demo transitions", updates, len(demos))
    return updates


class HILController:
    """One actor's side of the schedule: the phase clock, teleop takeover of sub-env 0, demo resets.

    The actor calls :meth:`act` between the policy and ``env.step`` and :meth:`after_step` after it.
    ``clock()`` gives the env steps of the whole run (all actors), so every actor changes phase together.
    """

    def __init__(self, cfg: HILConfig, env: VecEnv, clock: Callable[[], int], device: TeleopDevice | None = None,
                 seed: int = 0) -> None:
        self.cfg, self.env, self.clock = cfg, env, clock
        self.schedule = cfg.schedule()
        self.phase = "return_and_explore" if cfg.return_steps else "human_guided"
        self._keys_on = False
        self.returns = ReturnAndExplore(env, cfg.late_bias, seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.device_obj: TeleopDevice | None = None
        self.intervention: Any = None
        self.intervened_steps = 0
        self.demo_resets = 0
        self.human_successes = 0
        self.human_failures = 0
        self._key = 0  # this step's human label of sub-env 0: +1 success key, −1 failure key
        self._run: list[torch.Tensor] = []
        self._last_intervened = False
        self.action_dim = int(env.spec.action.shape[-1])
        if device is not None:
            self.attach_device(device)

    def attach_device(self, device: TeleopDevice) -> None:
        """Use ``device`` for takeovers of sub-env 0 (connects it)."""
        from robot_rl.hardware.intervention import InterventionConfig, InterventionController

        if self.action_dim not in (3, 4, 6, 7):
            raise ConfigError(f"teleop takeover needs end-effector delta actions of 3, 4, 6 or 7 numbers; "
                              f"this env's actions have {self.action_dim}")
        device.connect()
        self.device_obj = device
        self.intervention = InterventionController(device, InterventionConfig(mode=self.cfg.intervention_mode))

    def _update_phase(self) -> None:
        current = self.schedule.phase_at(self.cfg.offline_updates + self.clock())
        self._keys_on = current.human_keys
        phase = current.name
        if phase != self.phase:
            log.info("HIL phase %s -> %s at %d env steps (%d demo resets, %d intervened steps so far)",
                     self.phase, phase, self.clock(), self.demo_resets, self.intervened_steps)
            self.phase = phase

    def act(self, obs: dict[str, torch.Tensor], action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The action to step with and the ``intervened`` flags ``[N]``."""
        self._update_phase()
        intervened = torch.zeros(action.shape[0], dtype=torch.bool, device=action.device)
        self._last_intervened = False
        self._key = 0
        if self.intervention is None:
            return action, intervened
        a0 = action[0].detach().cpu().numpy().astype(np.float64)
        grip = float(a0[-1]) if self.action_dim in (4, 7) else 0.0
        full = np.zeros(7)
        full[:min(self.action_dim, 6)] = a0[:min(self.action_dim, 6)]
        full[6] = grip
        out = self.intervention.step(full)
        if self._keys_on and ("success" in out.events or "failure" in out.events):
            self._key = 1 if "success" in out.events else -1
        if not out.intervened:
            return action, intervened
        human = out.action
        mapped = {3: human[:3], 4: np.r_[human[:3], human[6]], 6: human[:6], 7: human}[self.action_dim]
        action = action.clone()
        action[0] = torch.as_tensor(mapped, dtype=action.dtype, device=action.device)
        intervened[0] = True
        self.intervened_steps += 1
        self._last_intervened = True
        return action, intervened

    def reward(self, reward: torch.Tensor) -> torch.Tensor:
        """The env's reward with this step's human key on sub-env 0 (human-guided phase) added.

        A success key adds ``human_success_reward``, a failure key ``human_failure_reward``: success is
        labelled on the step it is seen, not only at the episode's end.
        """
        if self._key == 0:
            return reward
        if self._key > 0:
            self.human_successes += 1
        else:
            self.human_failures += 1
        bonus = self.cfg.human_success_reward if self._key > 0 else self.cfg.human_failure_reward
        reward = reward.clone()
        reward[0] += bonus
        self._key = 0
        return reward

    def after_step(self, result: StepResult) -> dict[str, torch.Tensor]:
        """The observation to act on next: ``result.obs``, with return-and-explore rows put in demo states."""
        done = result.terminated | result.truncated
        if self._last_intervened or self._run:
            self._collect_demo_states(result, bool(done[0]))
        if self.phase != "return_and_explore" or not bool(done.any()):
            return result.obs
        pick = done & (torch.rand(done.shape[0], generator=self.gen) < self.cfg.reset_to_demo_prob).to(done.device)
        rows = pick.nonzero().flatten()
        obs = self.returns.reset_rows(rows)
        if obs is None:
            return result.obs
        self.demo_resets += len(rows)
        return obs

    def _collect_demo_states(self, result: StepResult, done0: bool) -> None:
        if not self.returns.supported:
            return
        if not done0:
            if self._last_intervened:
                self._run.append(self.env.get_state()[0].clone())  # type: ignore[attr-defined]
            else:
                self._run = []  # the human let go: not a whole demonstration
            return
        success = result.info.get("success")
        if self._run and success is not None and bool(success[0]):
            self.returns.add_states(self._run)
            log.debug("HIL: a demonstrated episode added %d start states (%d in the pool)", len(self._run),
                     len(self.returns.states))
        self._run = []

    def close(self) -> None:
        """Disconnect the device."""
        if self.device_obj is not None:
            self.device_obj.disconnect()
