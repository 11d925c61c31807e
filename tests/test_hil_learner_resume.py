"""The deploy learner keeps robot data through a kill: replay segments on disk, durable acks, resume."""


import pytest
import torch
from waiting import wait_until

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, robot_spec
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


def _chunk(spec: EnvSpec, n: int, start: int, intervened: bool) -> TransitionBatch:
    g = torch.Generator().manual_seed(start)
    obs = {k: torch.rand(n, *s.shape, generator=g).to(s.torch_dtype) for k, s in spec.observation.items()}
    nxt = {k: torch.rand(n, *s.shape, generator=g).to(s.torch_dtype) for k, s in spec.observation.items()}
    f = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs=obs, action=torch.rand(n, *spec.action.shape, generator=g) * 2 - 1,
                           reward=torch.full((n,), float(start)), terminated=f, truncated=f, next_obs=nxt,
                           intervened=torch.full((n,), intervened), policy_version=torch.zeros(n, dtype=torch.long),
                           env_index=torch.zeros(n, dtype=torch.long))


def _send_and_store(learner: HILLearner, actor: ZmqActorEndpoint, chunks: list[TransitionBatch]) -> None:
    for c in chunks:
        assert actor.send(c, timeout_s=5.0)

    def stored() -> bool:  # acknowledged only once on disk
        learner.step(recv_timeout_s=0.02, max_updates=2)
        return actor.unacked() == 0

    wait_until(stored, 30, "every chunk stored and acknowledged", poll_s=0.0, seen=actor.unacked)


def _robot(name: str):
    if name == "sim_so101":  # the LeRobot driver's spec (joints in radians, FK pose, gripper) on the simulated SO-101
        pytest.importorskip("mink")
        from robot_rl.hardware.sim_so101 import SimSo101Config

        return SimSo101Config(cameras={"front": (16, 16)})
    return SimulatedArmConfig(cameras={})


@pytest.mark.parametrize("robot", ["sim_arm", "sim_so101"])
def test_a_killed_deploy_learner_resumes_with_every_acknowledged_row(tmp_path, robot):
    cfg = DeployConfig(robot=_robot(robot),
                       algo=SACConfig(demo_ratio=0.5, learning_starts=16, batch_size=16, actor_hidden=(32, 32),
                                      critic_hidden=(32, 32)),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*", heartbeat_s=0.2))
    spec = robot_spec(cfg.robot)
    demos = _chunk(spec, 12, 1000, intervened=False)
    run = tmp_path / "run"
    learner = HILLearner(cfg, run, demos=demos)
    actor = ZmqActorEndpoint(learner.address, 0, spec, ZmqSettings.from_config(cfg.transport))
    try:
        assert actor.connected.wait(10)
        # 6 chunks of 4 rows, every other one driven by the human.
        _send_and_store(learner, actor, [_chunk(spec, 4, k, intervened=k % 2 == 1) for k in range(3)])
        learner.step(max_updates=8)
        learner.checkpoint()
        updates_at_checkpoint = learner.learner.updates
        sampled_at_checkpoint = (learner.stats.rows_sampled, learner.stats.intervened_sampled)
        assert sampled_at_checkpoint[0] > 0
        _send_and_store(learner, actor, [_chunk(spec, 4, k, intervened=k % 2 == 1) for k in range(3, 6)])
    finally:
        actor.close()
        learner.endpoint.close()  # killed: no final checkpoint, nothing flushed on the way out

    with pytest.raises(ConfigError, match="--resume"):
        HILLearner(cfg, run, demos=demos)
    resumed = HILLearner(cfg, run, demos=demos, resume=True)
    try:
        buffers = resumed.learner.storage.buffers
        assert len(buffers["online"]) == 24  # every acknowledged row, including those after the checkpoint
        assert len(buffers["demos"]) == 12 + 12  # the demos once (not reloaded on top) + 3 intervened chunks
        assert resumed.learner.transitions == 24
        assert resumed.learner.updates == updates_at_checkpoint
        # The counters are the whole run's, like the transitions: 12 demos loaded at its start, 12 intervened rows.
        assert resumed.stats.demos == 12 and resumed.stats.intervened_received == 12
        assert resumed.learner.storage.rows_sampled == sampled_at_checkpoint[0]
        assert resumed.learner.storage.intervened_sampled == sampled_at_checkpoint[1]
        rewards = sorted(set(buffers["online"].sample(512).reward.tolist()))
        assert rewards == [float(k) for k in range(6)]
    finally:
        resumed.close()
