"""The actor: steps a VecEnv with a copy of the policy and ships transitions to the learner.

It picks up newer weights between steps without stopping, records which version acted, and never
lets a non-finite observation or reward reach the learner: such sub-envs are quarantined (given a
zero action, their rows dropped and counted) until their episode ends.

With ``max_staleness`` it stops exploring while its weights are more than that many versions behind
the newest the learner announced (``endpoint.learner_version``, from the ZeroMQ heartbeats): it does
not step the env (a simulator pauses; a real robot receives no new command, and its safety layer's
watchdog holds it) until fresh weights arrive. Pauses are counted and logged.

A learner that takes chunks more slowly than the actor makes them slows the actor down (``on_backlog="wait"``, the
default): ``send`` waits, so the env pauses, for as long as the learner answers; a learner that stops answering
(silent for ``send_timeout_s``: dead, stopped or cut off) ends the wait with :class:`LearnerUnreachable`, which
names what the actor knows of it. ``on_backlog="drop"`` (simulators that must not pause) drops a chunk the learner
has not taken within ``send_timeout_s``, counts it and tells the learner.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.env import VecEnv
from robot_rl.core.extension import StepHook, StepView
from robot_rl.core.transition import TransitionBatch, finite_obs_rows
from robot_rl.core.transport import (
    ActorEndpoint,
    DropCountingEndpoint,
    LearnerUnreachable,
    LinkStateEndpoint,
    RemoteActorEndpoint,
    VersionAwareEndpoint,
    wait_first_weights,
)

log = logging.getLogger(__name__)

BACKLOG_POLICIES = ("wait", "drop")
#: A wait for the learner to take a chunk is logged once it has lasted this long, then every this long again.
BACKLOG_NOTICE_S = 10.0


@dataclass
class EpisodeStats:
    """Finished-episode statistics since the last :meth:`Actor.pop_episode_stats`."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)


class Actor:
    """One actor: an env, a policy copy and an endpoint."""

    def __init__(self, env: VecEnv, policy: Policy, endpoint: ActorEndpoint, seed: int = 0,
                 send_timeout_s: float = 60.0, stop: threading.Event | None = None,
                 max_staleness: int | None = None, on_backlog: str = "wait") -> None:
        if on_backlog not in BACKLOG_POLICIES:
            raise ValueError(f"on_backlog {on_backlog!r}; valid: {list(BACKLOG_POLICIES)}")
        self.env = env
        self.policy = policy
        self.endpoint = endpoint
        self.policy_version = -1
        self.send_timeout_s = send_timeout_s
        self.stop = stop or threading.Event()
        self.env_steps = 0
        self.nonfinite_rows = 0
        self.on_backlog = on_backlog
        self.dropped_batches = 0
        self.dropped_transitions = 0  # on_backlog="drop" only
        self.backlog_s = 0.0  # time spent waiting for the learner to take a chunk (the env paused)
        #: A monotonic time after which a blocked send gives up (a stop's grace time); None: only the timeout.
        self.send_cutoff: float | None = None
        self.max_staleness = max_staleness
        self.stale_pauses = 0
        self.stale_s = 0.0
        #: The run's extensions' hooks in this actor's step (robot_rl.core.extension), in their order.
        self.hooks: list[StepHook] = []
        self.episodes = EpisodeStats()
        n = env.num_envs
        self._obs = env.reset(seed=seed)
        self._quarantined = ~finite_obs_rows(self._obs, n)
        self._env_index = torch.arange(n, device=env.device)

    def sync_weights(self) -> bool:
        """Load newer weights if the learner published any; ``True`` if the version changed."""
        new = self.endpoint.poll_weights(self.policy_version)
        if new is None:
            return False
        self.policy.load_actor_weights(new.weights)
        self.policy_version = new.version
        return True

    def wait_for_weights(self, newer_than: int, timeout_s: float) -> None:
        """Block until weights newer than ``newer_than`` arrive (on-policy sync); raise on deadline."""
        new = (wait_first_weights(self.endpoint, timeout_s) if newer_than < 0
               else self.endpoint.wait_weights(newer_than, timeout_s))
        if new is None:
            raise TimeoutError(f"actor {self.endpoint.actor_id}: no weights newer than v{newer_than} "
                               f"within {timeout_s:.0f}s; is the learner alive?")
        self.policy.load_actor_weights(new.weights)
        self.policy_version = new.version

    def staleness(self) -> int:
        """Versions between the weights this actor acts with and the newest the learner announced."""
        newest = self.endpoint_version()
        return max(newest - self.policy_version, 0) if newest >= 0 and self.policy_version >= 0 else 0

    def hold_while_stale(self, timeout_s: float) -> bool:
        """Do not explore while the weights are too old: wait (up to ``timeout_s``) for fresh ones.

        ``True`` if it paused. Raises ``TimeoutError`` if no fresh weights came within the deadline.
        """
        if self.max_staleness is None or self.staleness() <= self.max_staleness:
            return False
        self.stale_pauses += 1
        newest = self.endpoint_version()
        log.warning("actor %d: acting weights v%d are %d versions behind the learner's v%d (max_staleness %d): "
                    "pausing collection until fresh weights arrive", self.endpoint.actor_id, self.policy_version,
                    newest - self.policy_version, newest, self.max_staleness)
        t0 = time.monotonic()
        while self.staleness() > self.max_staleness and not self.stop.is_set() and not self.learner_finished():
            if time.monotonic() - t0 > timeout_s:
                self.stale_s += time.monotonic() - t0
                raise TimeoutError(f"actor {self.endpoint.actor_id}: no fresh weights within {timeout_s:.0f}s "
                                   f"(acting v{self.policy_version}, learner at v{self.endpoint_version()})")
            newest = self.endpoint_version()
            self.endpoint.wait_weights(newest - self.max_staleness - 1, timeout_s=0.05)
            self.sync_weights()
        waited = time.monotonic() - t0
        self.stale_s += waited
        log.info("actor %d: resumed with weights v%d after %.2fs", self.endpoint.actor_id, self.policy_version,
                 waited)
        return True

    def learner_finished(self) -> str | None:
        """Why the learner ended the run, once it said so (actor processes only); None while it runs."""
        return self.endpoint.learner_finished if isinstance(self.endpoint, RemoteActorEndpoint) else None

    def endpoint_version(self) -> int:
        """The newest weight version the learner announced (-1 if unknown)."""
        return self.endpoint.learner_version if isinstance(self.endpoint, VersionAwareEndpoint) else -1

    @torch.no_grad()
    def step(self) -> TransitionBatch:
        """One vectorised step: act, step the env, send the finite rows. Returns the full batch."""
        if self.max_staleness is not None:
            self.hold_while_stale(self.send_timeout_s)
        env, n = self.env, self.env.num_envs
        obs = self._obs
        safe_obs = {k: torch.where(self._bcast(self._quarantined, v), torch.zeros_like(v), v)
                    if v.is_floating_point() else v for k, v in obs.items()}
        for hook in self.hooks:
            safe_obs = hook.before_act(safe_obs)
        action, extras = self.policy.act(safe_obs)
        intervened = torch.zeros(n, dtype=torch.bool, device=env.device)
        for hook in self.hooks:
            action, extras, intervened = hook.after_act(safe_obs, action, extras, intervened)
        # Quarantined sub-envs get a zero action, unless a human took over (their action is sent as it came).
        zero = self._quarantined & ~intervened if self.hooks else self._quarantined  # no hooks: none intervened
        action = torch.where(self._bcast(zero, action), torch.zeros_like(action), action)
        result = env.step(action)
        done = result.terminated | result.truncated
        final_obs = result.info.get("final_obs", result.obs)
        next_obs = {k: torch.where(self._bcast(done, v), final_obs[k], v) for k, v in result.obs.items()}
        reward = result.reward
        for hook in self.hooks:
            reward = hook.reward(reward)
        batch = TransitionBatch(
            obs=obs, action=action, reward=reward.to(torch.float32),
            terminated=result.terminated, truncated=result.truncated, next_obs=next_obs,
            intervened=intervened,
            policy_version=torch.full((n,), self.policy_version, dtype=torch.int64, device=env.device),
            env_index=self._env_index, extras=extras,
        )
        good = batch.finite_rows() & ~self._quarantined
        # One host sync per step for both counts (each .item()/bool() would be its own on CUDA).
        bad, n_done = torch.stack([(~good).sum(), done.sum()]).tolist()
        if bad:
            if self.nonfinite_rows == 0:
                log.warning("env produced NaN/inf in %d sub-env(s); rows dropped and sub-envs quarantined "
                            "until their episode ends (reported as nonfinite_rows)", bad)
            self.nonfinite_rows += bad
        if n_done:
            self._record_episodes(result.info, done, good)
        if self.hooks:
            view = StepView(self.env_steps // n, obs, action, intervened, reward, result, done, n_done > 0)
            for hook in self.hooks:
                hook.after_step(view)
        # Sub-envs with a non-finite fresh observation stay quarantined until they finish an episode.
        self._quarantined = (self._quarantined & ~done) | ~finite_obs_rows(result.obs, n) | (
            ~torch.isfinite(result.reward) & ~done)
        self._obs = result.obs
        for hook in self.hooks:
            self._obs = hook.next_obs(result, self._obs)
        self.env_steps += n
        to_send = batch if bad == 0 else batch.index(good)
        if len(to_send):
            self._send(to_send)
        return batch

    def _send(self, batch: TransitionBatch) -> None:
        """Hand ``batch`` over; under back-pressure wait (``on_backlog``) or drop it (counted)."""
        # Wait in short slices so that a stop request is honoured promptly even when the queue is full.
        start = time.monotonic()
        told = start
        drop_at = start + self.send_timeout_s if self.on_backlog == "drop" else float("inf")
        try:
            while not self.stop.is_set():
                if self.learner_finished():
                    return  # the run is over: nobody will store it (the actor's loop ends before its next step)
                now = time.monotonic()
                cutoff = min(drop_at, self.send_cutoff if self.send_cutoff is not None else float("inf"))
                if self.endpoint.send(batch, min(0.1, max(cutoff - now, 0.0))):
                    return
                now = time.monotonic()
                if now >= cutoff:
                    break
                if self.on_backlog == "wait":  # with drop, a silent learner's chunks are dropped (and counted)
                    self._check_learner_alive(now - start)
                if now - told >= BACKLOG_NOTICE_S:
                    told = now
                    log.warning("actor %d: the learner is behind; waiting %.0fs so far to hand over a chunk, the env "
                                "paused (loop.on_backlog=wait); %s", self.endpoint.actor_id, now - start,
                                self._learner_state())
        finally:
            self.backlog_s += time.monotonic() - start
        self.dropped_batches += 1  # reported by `robot-rl actor`, with the chunks its endpoint gave up on
        if time.monotonic() < drop_at:
            return  # a stop came while it waited: the chunk in hand is not delivered (its grace time ran out)
        self.dropped_transitions += len(batch)
        if isinstance(self.endpoint, DropCountingEndpoint):
            self.endpoint.count_dropped(len(batch))
        log.warning("actor %d: the learner did not take a chunk within %.0fs: %d transitions dropped "
                    "(loop.on_backlog=drop; %d dropped so far)", self.endpoint.actor_id, self.send_timeout_s,
                    len(batch), self.dropped_transitions)

    def _check_learner_alive(self, waited_s: float) -> None:
        """Raise :class:`LearnerUnreachable` once the learner has been silent for ``send_timeout_s``.

        A slow learner, one that still answers, is waited for as long as it takes.
        """
        if not isinstance(self.endpoint, LinkStateEndpoint):
            return  # an in-process learner: it lives as long as this thread's process does
        state = self.endpoint.link_state()
        if state.silent_s >= self.send_timeout_s:
            raise LearnerUnreachable(
                f"actor {self.endpoint.actor_id}: {state.describe()}; it has not answered for {state.silent_s:.0f}s "
                f"(loop.max_wait_s={self.send_timeout_s:.0f}) while this actor waited {waited_s:.0f}s to hand over a "
                "chunk; this actor stops, and its unacknowledged chunks end with it. Is the learner running and "
                "reachable? Start it again (`robot-rl learner --resume RUN_DIR`), or raise loop.max_wait_s to wait "
                "longer for it.")

    def _learner_state(self) -> str:
        if isinstance(self.endpoint, LinkStateEndpoint):
            return self.endpoint.link_state().describe()
        return "an in-process learner"

    @staticmethod
    def _bcast(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return mask.reshape(-1, *([1] * (like.dim() - 1)))

    def _record_episodes(self, info: dict[str, torch.Tensor], done: torch.Tensor, good: torch.Tensor) -> None:
        idx = (done & good).nonzero().flatten()
        if idx.numel() == 0:
            return
        self.episodes.returns += info["episode_return"][idx].tolist()
        self.episodes.lengths += [int(x) for x in info["episode_length"][idx].tolist()]
        self.episodes.successes += [bool(x) for x in info["success"][idx].tolist()]

    def pop_episode_stats(self) -> EpisodeStats:
        """Return and reset the finished-episode statistics."""
        out, self.episodes = self.episodes, EpisodeStats()
        return out

