"""How fairly one learner serves many actors, and what it drops, before and after issue 52.

    .venv/bin/python benchmarks/actor_fairness.py                      # everything: minutes (more when loaded)
    .venv/bin/python benchmarks/actor_fairness.py --only sessions --turns 5

A learner (this process) that cannot keep up: a ZeroMQ learner endpoint whose loop spends ``--learner-ms`` of CPU on
each chunk it takes (standing for a gradient update), next to actors that make chunks as fast as they can. Measured
over a window once every actor is connected (the next ``--turns`` chunks per actor the learner takes, at most
``--max-seconds``): the transitions the learner accepted from each actor,
Jain's fairness index of them per env (``(Σx)² / (n·Σx²)``: 1 when every env is served alike, 1/n when one actor
gets everything), and the transitions the actors dropped.

1. ``processes``: 2, 4 and 8 actor processes (``robot_rl.loop.actor.Actor`` stepping a ``FakeVecEnv`` of
   ``--envs`` envs with a zero policy: the real send path, back-pressure and drop policy) and two processes that
   spin the CPU beside them, as in the issue's run on this 2-core machine.
2. ``sessions``: 64 lightweight actor sessions in one process, each a ``ZmqActorEndpoint`` (its own socket, I/O
   thread and wire traffic) fed by one driver loop that gives each session a new chunk as soon as it took the last;
   all with ``--envs`` envs (``sessions``), and with 1, 2, 4 or 8 envs by turn (``sessions_weighted``, chunks of one
   step of every env: the index is of transitions per env).

Each case runs twice, the same way but for the learner and the actors' backlog policy:

- ``before``: the transport before issue 52, kept as a flag for this comparison: one inbox shared by all actors,
  first come first served (``ZmqSettings(fair_service=False)``), and actors that drop a chunk the learner has not
  taken within ``--give-up-s`` (``loop.on_backlog=drop``, the only behaviour before; its 60 s default is scaled to
  the short window, so drops show within it);
- ``after``: per-actor inboxes taken in turn by env count (the default) and actors that wait
  (``loop.on_backlog=wait``, the default).

Writes one result file (``--out``; default ``benchmarks/results/actor_fairness/<UTC time>.json``);
:func:`fairness_table` renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "actor_fairness"
MODES = {"before": {"fair_service": False, "on_backlog": "drop"}, "after": {"fair_service": True, "on_backlog": "wait"}}


def _settings(fair: bool) -> Any:
    from robot_rl.transport.zmq_transport import ZmqSettings

    # Small queues, so that a window of seconds sees the steady state rather than the queues filling up.
    return ZmqSettings(outbox_size=16, inbox_size=8, fair_service=fair)


def _spin(stop: Any) -> None:
    """A busy CPU loop (other work on the machine)."""
    x = 0
    while not stop.value:
        for _ in range(100_000):
            x += 1


def _zero_policy() -> Any:
    import torch

    from robot_rl.core.algorithm import Policy

    class ZeroPolicy(Policy):
        def act(self, obs: Any, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            return torch.zeros(obs["state"].shape[0], 2), {}

    return ZeroPolicy()


def _watch(stop: Any, halt: threading.Event) -> None:
    """Set ``halt`` once the shared ``stop`` flag is set (a raw shared byte: no lock a dying process could hold)."""
    while not stop.value:
        time.sleep(0.05)
    halt.set()


def _actor_process(addr: str, actor_id: int, envs: int, on_backlog: str, give_up_s: float, stop: Any,
                   out: Any) -> None:
    """One actor process: the real Actor (send path, back-pressure, drops) on a FakeVecEnv until ``stop``."""
    import torch

    from robot_rl.loop.actor import Actor
    from robot_rl.testing import FakeVecEnv
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint

    torch.set_num_threads(1)
    env = FakeVecEnv(num_envs=envs, seed=actor_id)
    endpoint = ZmqActorEndpoint(addr, actor_id, env.spec, _settings(True), num_envs=envs)
    halt = threading.Event()
    threading.Thread(target=_watch, args=(stop, halt), daemon=True).start()
    actor = Actor(env, _zero_policy(), endpoint, send_timeout_s=give_up_s, stop=halt, on_backlog=on_backlog)
    while not halt.is_set():
        actor.step()
    out.put({"actor": actor_id, "env_steps": actor.env_steps, "dropped": actor.dropped_transitions,
             "backlog_s": actor.backlog_s})
    endpoint.close()


class _Sessions:
    """Lightweight actor sessions in one process: one endpoint each, one driver loop for all of them."""

    def __init__(self, addr: str, envs: list[int], on_backlog: str, give_up_s: float) -> None:
        from robot_rl.testing import FakeVecEnv
        from robot_rl.transport.zmq_transport import ZmqActorEndpoint

        self.on_backlog, self.give_up_s = on_backlog, give_up_s
        spec = FakeVecEnv().spec
        self.endpoints = [ZmqActorEndpoint(addr, i, spec, _settings(True), num_envs=n) for i, n in enumerate(envs)]
        self.envs = [FakeVecEnv(num_envs=n, seed=i) for i, n in enumerate(envs)]
        self.obs = [env.reset(seed=i) for i, env in enumerate(self.envs)]
        self.policy = _zero_policy()
        self.pending: list[Any] = [None] * len(envs)  # the chunk each session waits to hand over, since when
        self.dropped = [0] * len(envs)
        self.made = [0] * len(envs)

    def _chunk(self, i: int) -> Any:
        """One step of session ``i``'s envs, as the chunk an actor would send."""
        import torch

        from robot_rl.core.transition import TransitionBatch

        env, obs = self.envs[i], self.obs[i]
        action, _ = self.policy.act(obs)
        r = env.step(action)
        self.obs[i] = r.obs
        self.made[i] += env.num_envs
        n = env.num_envs
        return TransitionBatch(obs=obs, action=action, reward=r.reward, terminated=r.terminated,
                               truncated=r.truncated, next_obs=r.info.get("final_obs", r.obs),
                               intervened=torch.zeros(n, dtype=torch.bool),
                               policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n))

    def drive(self, stop: Any) -> None:
        """Round robin over the sessions: hand over each one's chunk without waiting; wait or drop (its policy)."""
        while not stop.value:
            busy = False
            for i, ep in enumerate(self.endpoints):
                if self.pending[i] is None:
                    self.pending[i] = (self._chunk(i), time.monotonic())
                batch, since = self.pending[i]
                if ep.send(batch, 0.0):
                    self.pending[i], busy = None, True
                elif self.on_backlog == "drop" and time.monotonic() - since >= self.give_up_s:
                    self.dropped[i] += len(batch)
                    ep.count_dropped(len(batch))
                    self.pending[i] = None
            if not busy:
                time.sleep(0.002)  # every session waits on the learner: do not spin

    def close(self) -> None:
        """Close every session's endpoint."""
        for ep in self.endpoints:
            ep.close()


def _sessions_process(addr: str, envs: list[int], on_backlog: str, give_up_s: float, stop: Any, out: Any) -> None:
    import torch

    torch.set_num_threads(1)
    sessions = _Sessions(addr, envs, on_backlog, give_up_s)
    sessions.drive(stop)
    for i in range(len(envs)):
        out.put({"actor": i, "env_steps": sessions.made[i], "dropped": sessions.dropped[i], "backlog_s": None})
    sessions.close()


def _learner_window(learner: Any, actors: int, chunks: int, max_s: float, learner_ms: float,
                    connect_s: float) -> tuple[dict[int, int], float]:
    """Serve until every actor is connected (plus a second), then count each actor's transitions.

    The window is the next ``chunks`` chunks taken (at most ``max_s``); returns the counts and its length in seconds.
    """
    deadline = time.monotonic() + connect_s
    while len(learner.peers()) < actors:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(learner.peers())} of {actors} actors connected within {connect_s:.0f}s")
        _serve(learner, learner_ms, None)
    settle = time.monotonic() + 1.0
    while time.monotonic() < settle:
        _serve(learner, learner_ms, None)
    counts: dict[int, int] = {}
    start = time.monotonic()
    taken = 0
    while taken < chunks and time.monotonic() - start < max_s:
        taken += _serve(learner, learner_ms, counts)
    return counts, time.monotonic() - start


def _serve(learner: Any, learner_ms: float, counts: dict[int, int] | None) -> bool:
    batch = learner.recv(0.05)
    if batch is None:
        return False
    spin_until = time.perf_counter() + learner_ms / 1000  # the update this chunk pays for
    while time.perf_counter() < spin_until:
        pass
    learner.confirm(batch)
    if counts is not None:
        counts[batch.actor_id] = counts.get(batch.actor_id, 0) + len(batch)
    return True


def run_case(kind: str, actors: int, mode: str, args: argparse.Namespace, envs: list[int]) -> dict[str, Any]:
    """One case: the learner here, the actors (processes, or sessions in one process), two spinners beside them."""
    from robot_rl.testing import FakeVecEnv
    from robot_rl.transport.fair_inbox import jain_index
    from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint

    ctx = mp.get_context("forkserver")
    stop, out = ctx.RawValue("b", 0), ctx.Queue()
    learner = ZmqLearnerEndpoint("tcp://127.0.0.1:*", FakeVecEnv().spec, _settings(MODES[mode]["fair_service"]))
    # Before: a chunk is dropped after give_up_s. After: actors wait for as long as the learner answers, and only
    # one silent for loop.max_wait_s (60 s) is an error.
    policy = str(MODES[mode]["on_backlog"])
    give_up = args.give_up_s if policy == "drop" else 60.0
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.spinners)]
    if kind == "processes":
        procs += [ctx.Process(target=_actor_process, args=(learner.address, i, envs[i], policy, give_up, stop, out),
                              daemon=True) for i in range(actors)]
    else:
        procs.append(ctx.Process(target=_sessions_process, args=(learner.address, envs, policy, give_up, stop, out),
                                 daemon=True))
    load_before = os.getloadavg()[0]
    for p in procs:
        p.start()
    try:
        counts, window_s = _learner_window(learner, actors, args.turns * actors, args.max_seconds, args.learner_ms,
                                           args.connect_s)
        dropped_seen = {k: v for k, v in learner.metrics().items() if k.startswith("dropped/")}
    finally:
        stop.value = 1
        reports = []
        try:
            reports = [out.get(timeout=60) for _ in range(actors)]
        except queue.Empty:
            print(f"only {len(reports)} of {actors} actors reported", flush=True)
        for p in procs:
            p.join(30)
        learner.close()
    accepted = [counts.get(i, 0) for i in range(actors)]
    per_env = [a / n for a, n in zip(accepted, envs)]
    dropped = sum(r["dropped"] for r in reports)
    row = {"kind": kind, "actors": actors, "mode": mode, "envs": envs, "fair_service": MODES[mode]["fair_service"],
           "on_backlog": policy, "accepted": accepted, "jain": jain_index(per_env),
           "min_share_of_fair": min(per_env) / (sum(per_env) / actors) if sum(per_env) else None,
           "window_s": window_s, "chunks_taken_target": args.turns * actors,
           "accepted_per_s": sum(accepted) / window_s, "dropped": dropped,
           "dropped_seen_by_learner": int(sum(dropped_seen.values())),
           "env_steps": sum(r["env_steps"] for r in reports), "load_average": [load_before, os.getloadavg()[0]]}
    print(f"{kind:>17} {actors:>2} actors {mode:>6}: Jain {row['jain']:.3f}, accepted {sum(accepted):,} in "
          f"{window_s:.1f}s ({min(accepted):,}..{max(accepted):,} per actor), dropped {dropped:,}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    return row


def fairness_table(runs: list[dict[str, Any]]) -> str:
    """| actors | before: Jain · lowest share · dropped | after: the same |, one row per case."""
    rows = []
    for run in runs:
        res = run["results"]
        cases: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        for r in res["rows"]:
            cases.setdefault((r["kind"], r["actors"]), {})[r["mode"]] = r
        for (kind, actors), modes in cases.items():
            label = {"processes": f"{actors} actor processes + {res['spinners']} busy loops",
                     "sessions": f"{actors} sessions in one process",
                     "sessions_weighted": f"{actors} sessions in one process, 1/2/4/8 envs"}[kind]
            cells = [label]
            for mode in ("before", "after"):
                r = modes.get(mode)
                cells += ["–"] * 3 if r is None else [
                    f"{r['jain']:.3f}", f"{r['min_share_of_fair']:.2f}" if r["min_share_of_fair"] is not None else "–",
                    f"{r['dropped']:,}"]
            rows.append(cells)
    return markdown_table(["actors", "before: Jain", "before: lowest share", "before: dropped", "after: Jain",
                           "after: lowest share", "after: dropped"], rows, "lrrrrrr")


def main() -> None:
    """Run the selected cases (before and after each), write the result file, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["processes", "sessions"], nargs="*")
    ap.add_argument("--processes", type=int, nargs="*", default=[2, 4, 8], help="actor process counts")
    ap.add_argument("--sessions", type=int, default=64, help="lightweight sessions in one process")
    ap.add_argument("--envs", type=int, default=8, help="envs per actor (sessions_weighted: 1, 2, 4, 8 by turn)")
    ap.add_argument("--turns", type=int, default=25,
                    help="measured window: this many chunks per actor taken by the learner (all actors together)")
    ap.add_argument("--max-seconds", type=float, default=45.0, help="measured window's limit (a loaded machine)")
    ap.add_argument("--learner-ms", type=float, default=5.0, help="learner CPU per chunk taken (its update)")
    ap.add_argument("--give-up-s", type=float, default=2.0,
                    help="before: a chunk not taken within this long is dropped (the old 60 s, scaled to the window)")
    ap.add_argument("--spinners", type=int, default=2, help="busy CPU loops beside the actors")
    ap.add_argument("--connect-s", type=float, default=180.0, help="deadline for every actor to connect")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    mp.set_forkserver_preload(["torch", "robot_rl.loop.actor", "robot_rl.transport.zmq_transport",
                               "robot_rl.testing"])
    started = dt.datetime.now(dt.UTC)
    which = args.only or ["processes", "sessions"]
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    if "processes" in which:
        for n in args.processes:
            for mode in MODES:
                rows.append(run_case("processes", n, mode, args, [args.envs] * n))
    if "sessions" in which:
        for kind, envs in (("sessions", [args.envs] * args.sessions),
                           ("sessions_weighted", [(1, 2, 4, 8)[i % 4] for i in range(args.sessions)])):
            for mode in MODES:
                rows.append(run_case(kind, args.sessions, mode, args, envs))
    results = {"rows": rows, "spinners": args.spinners, "learner_ms": args.learner_ms, "turns": args.turns,
               "give_up_s": args.give_up_s, "wall_s": time.monotonic() - t0, "cpus": os.cpu_count()}
    print(fairness_table([{"results": results}]))
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
