"""In-process actors on threads of their own: what the off-policy and the asynchronous on-policy strategies share."""

from __future__ import annotations

import threading

from robot_rl.loop.actor import Actor


class ActorThreads:
    """One thread per in-process actor, stepping its envs and loading the newest weights between steps.

    They run until ``stop`` is set; the first error an actor raises stops the others and :meth:`check` raises it.
    """

    def __init__(self, actors: list[Actor], stop: threading.Event) -> None:
        self.stop_event = stop
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(a,), daemon=True,
                                         name=f"actor-{a.endpoint.actor_id}") for a in actors]

    def start(self) -> None:
        """Start one thread per actor."""
        for th in self.threads:
            th.start()

    def _run(self, actor: Actor) -> None:
        try:
            while not self.stop_event.is_set():
                actor.sync_weights()
                actor.step()
        except BaseException as e:
            self.errors.append(e)
            self.stop_event.set()

    def check(self) -> None:
        """Raise what an actor thread raised, if one did."""
        if self.errors:
            raise self.errors[0]

    def stopped(self) -> BaseException:
        """Why the actors stopped (their error, or that their threads ended)."""
        return self.errors[0] if self.errors else RuntimeError("actor thread stopped")

    def join(self, timeout_s: float) -> None:
        """Tell the actor threads to hold and join them."""
        self.stop_event.set()
        for th in self.threads:
            if th.is_alive() or th.ident is not None:
                th.join(timeout=timeout_s)
