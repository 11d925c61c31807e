"""`robot-rl deploy`: an actor checks everything before it connects; `--resume` needs something to resume.

- An actor that fails its own checks (a mistyped classifier path, a missing process reward model, a device that
  cannot drive the robot's control mode) stops before the robot connects and before the learner hears a hello: a
  hello as actor 0 would cut the episode the running actor 0 has in flight.
- `--resume` on a directory with no checkpoint and no replay is an error that writes nothing (deploy learner,
  `robot-rl train`, `robot-rl learner`), and a resumed learner says what it resumed.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_until

pytest.importorskip("msgpack")

from robot_rl.cli import main
from robot_rl.cli.deploy import DeployArgs
from robot_rl.hardware.sim_arm import SimulatedArm, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.observation import policy_spec
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig

CLI = str(Path(sys.executable).with_name("robot-rl"))
SMALL_SAC = ["algo.actor_hidden=[16]", "algo.critic_hidden=[16]"]


def _learner_cfg(**algo) -> DeployConfig:
    return DeployConfig(robot=SimulatedArmConfig(cameras={}),
                        algo=SACConfig(demo_ratio=0.5, actor_hidden=(16,), critic_hidden=(16,), **algo),
                        transport=ZmqTransportConfig(address="tcp://127.0.0.1:*", heartbeat_s=0.2), status=False)


@pytest.mark.integration
def test_an_actor_with_a_bad_classifier_path_never_reaches_the_learner(tmp_path, caplog):
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

    cfg = _learner_cfg()
    learner = HILLearner(cfg, tmp_path / "run")
    settings = ZmqSettings.from_config(cfg.transport)
    running = probe = None
    try:
        with caplog.at_level(logging.INFO, logger="robot_rl.transport"):
            running = ZmqActorEndpoint(learner.address, 0, learner.spec, settings)  # the actor 0 already at work
            wait_until(lambda: 0 in learner.endpoint.peers(), 20.0, "the running actor 0 to connect",
                       seen=learner.endpoint.peers)
            bad = subprocess.run([CLI, "deploy", "--mode", "learn", "--teleop", "scripted", "--no-status",
                                  "--connect", learner.address, "robot.cameras={}", "reward_source=classifier",
                                  f"classifier={tmp_path / 'typo'}"], cwd=tmp_path, capture_output=True, text=True,
                                 stdin=subprocess.DEVNULL, timeout=120)
            # Anything the failed actor sent reached the learner before this later hello does.
            probe = ZmqActorEndpoint(learner.address, 7, learner.spec, settings)
            wait_until(lambda: 7 in learner.endpoint.peers(), 20.0, "a probe actor to connect",
                       seen=learner.endpoint.peers)
        assert bad.returncode == 2, bad.stderr
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and "classifier=" in lines[0] and "typo" in lines[0], bad.stderr
        assert learner.endpoint.pop_cut_sessions() == []  # the running actor's episode was not cut
        text = caplog.text
        assert "restarted without saying goodbye" not in text, text
        assert text.count("actor 0 connected") == 1, text  # the running actor's own hello only
    finally:
        for endpoint in (running, probe):
            if endpoint is not None:
                endpoint.close()
        learner.close()


@pytest.mark.parametrize("overrides, teleop, error", [
    (("reward_source=classifier", "classifier=nowhere/typo"), "scripted", FileNotFoundError),
    (("help.enabled=true", "help.prm=nowhere/prm", "help.goal=pick"), "scripted", Exception),
    (("robot.control_mode=joint_delta",), "keyboard", ValueError),  # a relative device cannot drive joints
])
def test_a_check_that_fails_connects_neither_the_robot_nor_the_learner(monkeypatch, tmp_path, overrides, teleop,
                                                                        error):
    from robot_rl.cli import deploy_actor

    connected: list[str] = []

    def refuse(what: str):
        def connect(*args, **kwargs):
            connected.append(what)
            raise RuntimeError(f"{what} connected before the checks")
        return connect

    monkeypatch.setattr(SimulatedArm, "connect", refuse("robot"))
    monkeypatch.setattr(deploy_actor, "ZmqActorEndpoint", refuse("learner"))
    monkeypatch.chdir(tmp_path)
    args = DeployArgs(overrides=("robot.cameras={}", *overrides), mode="learn", teleop=teleop,
                      connect="tcp://127.0.0.1:9", status=False)
    with pytest.raises(error) as raised:
        args.run_actor(args.resolved_config())
    assert not isinstance(raised.value, RuntimeError), raised.value
    assert connected == []


def test_resume_of_a_directory_with_nothing_to_resume_is_an_error_that_writes_nothing(tmp_path, capsys):
    nope = tmp_path / "nope"
    common = ["--max-s", "0", "--no-status", "robot.cameras={}", "transport.address=tcp://127.0.0.1:*", *SMALL_SAC]
    assert main(["deploy", "--role", "learner", "--run-dir", str(nope), "--resume", *common]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert not nope.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["deploy", "--role", "learner", "--run-dir", str(empty), "--resume", *common]) == 2
    assert list(empty.iterdir()) == []


def test_train_and_learner_resume_need_a_checkpoint_or_replay(tmp_path, capsys):
    from robot_rl.config_io import save_yaml
    from robot_rl.loop.config import TrainConfig

    run = tmp_path / "started"  # a run killed before its first checkpoint, with no replay on disk
    run.mkdir()
    save_yaml(TrainConfig(), run / "config.yaml")
    before = sorted(p.name for p in run.iterdir())
    assert main(["train", "--resume", str(run)]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["learner", "--resume", str(run)]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before


def _chunk(spec, n: int, intervened: bool):
    import torch

    from robot_rl.core.transition import TransitionBatch

    obs = {k: torch.zeros(n, *a.shape, dtype=a.torch_dtype) for k, a in spec.observation.items()}
    flags = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs=obs, action=torch.zeros(n, *spec.action.shape), reward=torch.zeros(n),
                           terminated=flags, truncated=flags, next_obs=obs, intervened=torch.full((n,), intervened),
                           policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.zeros(n, dtype=torch.long))


def _feed(learner: HILLearner, chunks) -> None:
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

    actor = ZmqActorEndpoint(learner.address, 0, learner.spec, ZmqSettings.from_config(learner.cfg.transport))
    try:
        for chunk in chunks:
            assert actor.send(chunk, timeout_s=5.0)

        def stored() -> bool:
            learner.step(recv_timeout_s=0.02, max_updates=4)
            return actor.unacked() == 0

        wait_until(stored, 30.0, "every chunk stored and acknowledged", poll_s=0.0, seen=actor.unacked)
    finally:
        actor.close()


@pytest.mark.integration
def test_a_resumed_learner_says_what_it_resumed(tmp_path, capsys):
    run = tmp_path / "run"
    learner = HILLearner(_learner_cfg(), run)
    assert learner.start_line().startswith("HIL learner listening on tcp://127.0.0.1:")
    try:
        _feed(learner, [_chunk(learner.spec, 4, intervened=k == 1) for k in range(3)])
        checkpoint = learner.checkpoint().name
    finally:
        learner.close()
    assert main(["deploy", "--role", "learner", "--run-dir", str(run), "--resume", "--config", str(run / "config.yaml"),
                 "--max-s", "0", "--no-status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"HIL learner resumed from checkpoint {checkpoint}: 12 transitions (4 intervened), "
                             "0 updates, now publishing weights v2; replay rows: online 12, demos 4; listening on "
                             "tcp://127.0.0.1:"), out[0]
    assert out[-1].startswith("stopped after 12 transitions (4 intervened), 0 updates, weights v2;"), out[-1]


@pytest.mark.integration
def test_the_learner_counts_demonstrations_apart_from_interventions(tmp_path):
    from robot_rl.cli.deploy import learner_summary

    cfg = _learner_cfg(learning_starts=8, batch_size=8)
    # Demonstrations recorded with a teleop device are flagged intervened on every row, whoever built the batch.
    learner = HILLearner(cfg, tmp_path / "run", demos=_chunk(policy_spec(cfg), 12, intervened=True))
    try:
        _feed(learner, [_chunk(learner.spec, 4, intervened=False) for _ in range(3)])  # the policy alone
        wait_until(lambda: learner.step() or learner.stats.updates >= 4, 30.0, "four updates",
                   seen=lambda: learner.stats.updates)
    finally:
        learner.close()
    stats = learner.stats
    assert stats.rows_sampled > 0 and stats.intervened_sampled == 0, stats
    assert stats.demos_sampled == stats.rows_sampled // 2, stats  # the demo buffer's half of every batch
    assert learner_summary(stats).endswith(f"0/{stats.rows_sampled} sampled rows were interventions, "
                                           f"{stats.demos_sampled} demos")
