"""kill -9 of a learner or an actor process: nothing lost, nothing stored twice, cut episodes marked."""

import itertools
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from transport_helpers import free_tcp_addr, tagged_batch
from waiting import wait_until

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
# One message per send: these tests follow single chunks (coalescing is tested on its own).
FAST = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3)

# A learner whose "replay" is a file: every chunk is committed (records + acknowledged windows, one
# atomic temp → fsync → rename) before it is acknowledged, as a checkpoint with persistence would be.
STORE_LEARNER = textwrap.dedent("""
    import json, os, sys
    from robot_rl.core.specs import ArraySpec, EnvSpec
    from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

    addr, path = sys.argv[1], sys.argv[2]
    spec = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
    ep = ZmqLearnerEndpoint(addr, spec, ZmqSettings(heartbeat_s=0.1, resend_after_s=0.3, ack_after="durable"))
    data = {"records": [], "transport": {"sessions": {}}}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        ep.load_state_dict(data["transport"])
    print("ready", flush=True)
    while True:
        b = ep.recv(0.1)
        if b is None:
            continue
        data["records"].append([b.actor_id, b.seq, int(b.reward[0])])
        ep.confirm(b)
        data["transport"] = ep.state_dict()
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        ep.flush_acks()
""")


def _records(path: Path) -> list[list[int]]:
    try:
        return json.loads(path.read_text())["records"]
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def _start_learner(script: Path, addr: str, store: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(script), addr, str(store)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.slow  # ~9 s: learner processes started twice
@pytest.mark.timeout(120)
def test_learner_kill9_and_restart_loses_nothing_and_stores_nothing_twice(tmp_path: Path):
    script, store = tmp_path / "learner.py", tmp_path / "store.json"
    script.write_text(STORE_LEARNER)
    addr = free_tcp_addr()
    learner = _start_learner(script, addr, store)
    actors = [ZmqActorEndpoint(addr, i, SPEC, FAST) for i in (1, 2)]
    n = 50
    try:
        for k in range(n):
            for i, a in enumerate(actors):
                assert a.send(tagged_batch(1000 * (i + 1) + k), timeout_s=5.0)
            if k == n // 2:  # mid-stream: half sent, some stored, the rest in flight or not yet sent
                wait_until(lambda: len(_records(store)) >= 25, 60, "the learner to store 25 chunks",
                           poll_s=0.005, seen=lambda: f"{len(_records(store))} stored")
                learner.send_signal(signal.SIGKILL)  # chunks in flight, acks unsent
                learner.wait()
                learner = _start_learner(script, addr, store)
        wait_until(lambda: not any(a.unacked() for a in actors), 60, "every chunk acknowledged",
                   poll_s=0.05, seen=lambda: [a.unacked() for a in actors])
        tags = sorted(r[2] for r in _records(store))
        assert tags == sorted(1000 * (i + 1) + k for i in range(2) for k in range(n))  # zero lost, zero twice
    finally:
        for a in actors:
            a.close()
        learner.kill()
        learner.wait()


@pytest.mark.slow  # ~16 s: two `robot-rl actor` processes
@pytest.mark.timeout(150)
def test_actor_kill9_keeps_acked_transitions_and_marks_the_cut(tmp_path: Path):
    from robot_rl.config_io import apply_overrides
    from robot_rl.core.config import ensure_registered
    from robot_rl.core.transport import VersionedWeights
    from robot_rl.loop.config import TrainConfig
    from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint

    ensure_registered()
    overrides = ["task.num_envs=2", "task.max_episode_steps=10", "algo.actor_hidden=[16,16]",
                 "algo.critic_hidden=[16,16]", "transport.heartbeat_s=0.1", "transport.resend_after_s=0.3"]
    cfg = apply_overrides(TrainConfig(), dict(o.split("=", 1) for o in ["transport.type=zmq", *overrides]))
    env = cfg.task.make(torch.device("cpu"), 0, num_envs=1)
    algo = cfg.algo.build(env.spec, torch.device("cpu"), 0)
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, env.spec, FAST)
    learner.publish_weights(VersionedWeights(1, algo.actor_weights()))

    def actor() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "actor", "--algo", "sac", "--connect", addr,
                                 "--actor-id", "1", *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)

    got: list[TransitionBatch] = []

    def receive() -> None:
        b = learner.recv(0.05)
        if b is not None:
            got.append(b)

    def drain_until(n: int, proc: subprocess.Popen) -> None:
        def enough() -> bool:
            receive()
            return len(got) >= n

        def seen() -> str:  # an actor that died says why
            code = proc.poll()
            return f"{len(got)} chunks; actor " + ("running" if code is None else
                                                   f"exited {code}: {proc.stderr.read()[-2000:]}")

        wait_until(enough, 60, f"{n} chunks from the actor", poll_s=0.0, seen=seen)

    first = actor()
    try:
        drain_until(45, first)  # 45 steps x 2 sub-envs: four 10-step episodes done, one under way
        first.send_signal(signal.SIGKILL)
        first.wait()
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # a 0.5 s window for chunks already on their way from the dead actor
            receive()
        before = len(got)
        second = actor()
        try:
            drain_until(before + 5, second)
            cuts = learner.pop_cut_sessions()
        finally:
            second.kill()
            second.communicate()
    finally:
        first.kill()
        learner.close()
    # The restarted actor is a new session; the learner found the old one cut, with every chunk it stored.
    assert len(cuts) == 1 and cuts[0].actor_id == 1 and cuts[0].stored_seqs == before
    old = got[:before]
    assert [b.seq for b in old] == list(range(before))  # acknowledged in order, none lost, none twice
    # Completed episodes are intact: in each sub-env, consecutive steps chain (s' of one step is the
    # next step's s) until the episode ends, and every finished episode has all its 10 steps.
    for e in range(2):
        rows = [(b.obs["state"][i], b.next_obs["state"][i], bool(b.terminated[i] | b.truncated[i]))
                for b in old for i in range(len(b)) if int(b.env_index[i]) == e]
        length, finished = 0, 0
        for (_, s_next, done), (s2, _, _) in itertools.pairwise(rows):
            length += 1
            if done:
                assert length == 10
                finished, length = finished + 1, 0
            else:
                assert torch.equal(s_next, s2)
        assert finished >= 4


def test_learner_marks_a_cut_actors_last_rollout_step_truncated():
    from robot_rl.loop.learner import Learner
    from robot_rl.policies.ppo import PPOConfig
    from robot_rl.testing import FakeVecEnv
    from robot_rl.transport.inproc import InprocTransport
    from robot_rl.transport.zmq_transport import CutSession

    env = FakeVecEnv(num_envs=2, episode_length=50)
    algo = PPOConfig(rollout_length=8).build(env.spec, "cpu", 0)
    from robot_rl.core.transport import SessionEndpoint
    from robot_rl.transport.inproc import InprocLearnerEndpoint

    cuts: list[CutSession] = []

    class CuttingEndpoint(InprocLearnerEndpoint):  # reports cut sessions as the ZeroMQ learner does
        def session_of(self, batch):
            return None

        def pop_cut_sessions(self):
            return [cuts.pop() for _ in range(len(cuts))]

    t = InprocTransport()
    endpoint = CuttingEndpoint(t)
    assert isinstance(endpoint, SessionEndpoint)
    learner = Learner(algo, env.spec, endpoint, "cpu", num_envs_total=2)
    from robot_rl.loop.actor import Actor

    actor = Actor(env, algo.make_policy(), t.actor_endpoint(1))
    for _ in range(3):
        actor.step()
        learner.pump(1.0)
    assert not bool(learner.storage.truncated.any())
    cuts.append(CutSession(actor_id=1, session="dead", stored_seqs=3))
    learner.pump(0.0)
    assert learner.cut_sessions == 1
    assert learner.storage.truncated[2].all() and not learner.storage.truncated[:2].any()
