"""`robot-rl launch --backend ray`: the learner and the actors as processes held by Ray actors on a cluster.

Ray places each process (a :class:`ProcessHost` per role) and restarts a host that dies (``max_restarts``);
a restarted host starts its process again with the same id. ZeroMQ stays the data path, and the learner's
exactly-once delivery covers a restarted actor's data. The processes get SIGTERM when their host dies (the
Linux parent-death signal), so an actor drains even when Ray kills its host outright.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from robot_rl.launch.local import LaunchResult
from robot_rl.launch.plan import LaunchPlan, parse_listening
from robot_rl.launch.ray_host import ProcessHost
from robot_rl.loop.stop_signals import StopRequest

log = logging.getLogger(__name__)

#: The Ray namespace of the hosts, named ``robot-rl-<stamp>-learner`` and ``robot-rl-<stamp>-actor-<i>``
#: (``ray list actors`` shows them; ``ray.get_actor(name, namespace=NAMESPACE)`` reaches one).
NAMESPACE = "robot_rl"


def import_ray() -> Any:
    """Ray, or an error saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("--backend ray needs Ray: pip install 'robot-rl[ray]' (and `ray start --head` on the "
                          "head node)") from e
    return ray


def connect(ray: Any, address: str, timeout_s: float = 30.0) -> None:
    """Join the cluster at ``address`` or fail with a clear message within ``timeout_s`` (never hang)."""
    import threading

    os.environ.setdefault("RAY_gcs_rpc_server_connect_timeout_s", str(int(timeout_s)))
    error: list[BaseException] = []

    def join() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except BaseException as e:
            error.append(e)

    t = threading.Thread(target=join, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive() or error:
        why = f"no answer within {timeout_s:.0f}s" if t.is_alive() else str(error[0]).splitlines()[0]
        raise ConnectionError(f"could not join the Ray cluster at {address!r}: {why}. Start one with "
                              "`ray start --head`, or pass --ray-address ray://HOST:10001")


class RayLauncher:
    """One learner host and ``plan.actors`` actor hosts on a Ray cluster, watched until the learner exits."""

    def __init__(self, plan: LaunchPlan, address: str = "auto", bind: str | None = None, max_restarts: int = 5,
                 grace_s: float = 30.0, start_timeout_s: float = 180.0, resume: Path | None = None,
                 log_dir: Path | None = None, connect_timeout_s: float = 30.0) -> None:
        self.plan, self.address, self.bind, self.resume = plan, address, bind, resume
        self.max_restarts, self.grace_s, self.start_timeout_s = max_restarts, grace_s, start_timeout_s
        self.connect_timeout_s = connect_timeout_s
        # Absolute: Ray workers do not start in the driver's directory (a shared filesystem is assumed).
        self.cwd = str(Path.cwd())
        self.log_dir = (log_dir or Path("runs") / "launch-logs").absolute()
        self.restarts = dict.fromkeys(range(plan.actors), 0)
        self.exits: dict[int, list[int]] = {i: [] for i in range(plan.actors)}

    def run(self, stop: StopRequest | None = None) -> LaunchResult:
        """Launch on the cluster, relay the learner's output, restart actors that die, stop all at the end."""
        ray = import_ray()
        connect(ray, self.address, self.connect_timeout_s)
        stop = stop or StopRequest()
        host_cls = ray.remote(num_cpus=1, max_restarts=self.max_restarts, max_task_retries=0)(ProcessHost)
        tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        learner = host_cls.options(name=f"robot-rl-{tag}-learner", namespace=NAMESPACE).remote(
            self.plan.learner_argv(self.bind or "tcp://0.0.0.0:*", self.resume), str(self.log_dir / "learner.log"),
            self.cwd)
        actors: list[Any] = []
        run_dir: Path | None = None
        code = 1
        try:
            with stop.installed():
                address, run_dir = self._wait_listening(ray, learner, stop)
                actors = [host_cls.options(name=f"robot-rl-{tag}-actor-{i}", namespace=NAMESPACE).remote(
                    self.plan.actor_argv(i, address), str(self.log_dir / f"actor-{i}.log"), self.cwd)
                    for i in range(self.plan.actors)]
                code = self._supervise(ray, learner, actors, stop)
        finally:
            self._stop_all(ray, learner, actors)
        return LaunchResult(code, run_dir, dict(self.restarts), self.exits)

    def _wait_listening(self, ray: Any, learner: Any, stop: StopRequest) -> tuple[str, Path]:
        deadline = time.monotonic() + self.start_timeout_s
        while not stop.is_set() and time.monotonic() < deadline:
            for line in ray.get(learner.new_output.remote(), timeout=30):
                print(line, end="", flush=True)
                found = parse_listening(line)
                if found is not None:
                    address, run_dir = found
                    # A wildcard bind is reached at the learner's node address.
                    node = ray.get(learner.node_ip.remote(), timeout=30)
                    return address.replace("0.0.0.0", node).replace("*", node), run_dir
            if ray.get(learner.poll.remote(), timeout=30) is not None:
                raise RuntimeError("the learner exited before it listened; its output above says why")
            time.sleep(0.2)
        raise TimeoutError(f"the learner did not listen within {self.start_timeout_s:.0f}s")

    def _supervise(self, ray: Any, learner: Any, actors: list[Any], stop: StopRequest) -> int:
        while not stop.is_set():
            for line in ray.get(learner.new_output.remote(), timeout=30):
                print(line, end="", flush=True)
            code = ray.get(learner.poll.remote(), timeout=30)
            if code is not None:
                return int(code)
            for i, host in enumerate(actors):
                self._watch(ray, i, host)
            stop.sleep(0.5)
        return 0

    def _watch(self, ray: Any, actor_id: int, host: Any) -> None:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            code = ray.get(host.poll.remote(), timeout=30)
        except RayActorError:  # the host died; Ray starts it again (and with it the actor) up to max_restarts
            self.restarts[actor_id] += 1
            print(f"launch: actor {actor_id}'s Ray host died; Ray restarts it", flush=True)
            return
        except GetTimeoutError:
            return
        if code is not None and code != 0:
            self.exits[actor_id].append(int(code))
            if self.restarts[actor_id] < self.max_restarts:
                self.restarts[actor_id] += 1
                print(f"launch: actor {actor_id} exited with code {code}; restarting it", flush=True)
                ray.get(host.restart.remote(), timeout=30)

    def _stop_all(self, ray: Any, learner: Any, actors: list[Any]) -> None:
        refs = [h.stop.remote(self.grace_s) for h in [learner, *actors]]
        try:
            codes = ray.get(refs, timeout=self.grace_s + 30)
            for i, code in enumerate(codes[1:]):
                if code is not None:
                    self.exits[i].append(int(code))
        except Exception as e:
            log.warning("stopping the Ray hosts: %s", e)
        for h in [learner, *actors]:
            ray.kill(h, no_restart=True)
