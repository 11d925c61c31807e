"""`robot-rl learner` and two `robot-rl actor` processes on 127.0.0.1 with free ports and hard timeouts."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # 35-50 s each on 2 cores
@pytest.mark.timeout(240)
@pytest.mark.parametrize("algo", ["sac", "ppo", "ppo-async"])
def test_learner_and_two_actor_processes(tmp_path: Path, algo: str):
    addr = f"tcp://127.0.0.1:{_free_port()}"
    common = ["task.num_envs=4", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "run.progress=false",
              "transport.resend_after_s=1.0"]
    if algo == "sac":
        common += ["algo.learning_starts=64", "algo.batch_size=32"]
    else:
        common += ["algo.rollout_length=8", "loop.remote_actors=2"]
    if algo == "ppo-async":  # actors that never wait; the learner drops blocks over 2 versions old
        common += ["loop.on_policy_sync=false", "loop.max_staleness=2"]
    algo = algo.split("-")[0]
    budget = 1200
    learner = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "learner", "--algo", algo, "--bind", addr, "--name", "dist",
         f"run.root={tmp_path}", f"loop.total_env_steps={budget}", "loop.eval_every_env_steps=100000",
         "loop.eval_episodes=4", "loop.success_threshold=null", *common],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    actors = [subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "actor", "--algo", algo, "--connect", addr, "--actor-id", str(i),
         "--max-env-steps", str(budget), *common],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (1, 2)]
    try:
        try:
            out, _ = learner.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            learner.kill()
            out = learner.communicate()[0]
            for a in actors:
                a.kill()
            actor_out = [a.communicate()[0][-3000:] for a in actors]
            pytest.fail(f"learner did not finish:\n{out[-3000:]}\nactors:\n" + "\n---\n".join(actor_out))
        assert learner.returncode == 0, out
    finally:
        for a in actors:
            a.kill()
        learner.kill()
    summary = json.loads((tmp_path / "dist" / "summary.json").read_text())
    assert summary["env_steps"] >= budget
    assert summary["gradient_updates"] > 0 and summary["policy_version"] > 1
    # Resends of chunks whose ack was still in flight are dropped by the dedup; nothing else is rejected.
    # Besides duplicates, only a connection that hung up during the ZeroMQ handshake (an actor reconnecting
    # while a learner dies or starts) may be counted: a socket event, not a message.
    assert set(summary["rejected_batches"]) <= {"duplicate", "handshake_aborted"}, summary["rejected_batches"]
