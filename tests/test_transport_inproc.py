import threading
import time

import torch

from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import VersionedWeights
from robot_rl.testing import FakeVecEnv
from robot_rl.transport.inproc import InprocTransport


def _batch(n: int = 2) -> TransitionBatch:
    z = torch.zeros(n)
    b = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs={"state": torch.zeros(n, 3)}, action=torch.zeros(n, 2), reward=z,
                           terminated=b, truncated=b, next_obs={"state": torch.zeros(n, 3)}, intervened=b,
                           policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n))


def test_bounded_queue_times_out_and_counts():
    t = InprocTransport(max_queued_batches=2)
    a = t.actor_endpoint(3)
    assert a.send(_batch(), 0.01) and a.send(_batch(), 0.01)
    t0 = time.monotonic()
    assert not a.send(_batch(), 0.05)
    assert time.monotonic() - t0 >= 0.04
    assert t.stats.send_timeouts == 1
    learner = t.learner_endpoint()
    got = learner.recv(0.01)
    assert got is not None and got.actor_id == 3 and got.seq == 0
    assert learner.recv(0.01).seq == 1
    assert learner.recv(0.01) is None
    assert t.stats.transitions_received == 4


def test_weights_latest_wins_and_stalled_actor_catches_up():
    t = InprocTransport()
    a = t.actor_endpoint(0)
    learner = t.learner_endpoint()
    assert a.poll_weights(-1) is None
    for v in range(1, 6):
        learner.publish_weights(VersionedWeights(v, {"w": torch.tensor([float(v)])}))
    got = a.poll_weights(0)
    assert got is not None and got.version == 5 and got.weights["w"].item() == 5.0
    assert a.poll_weights(5) is None


def test_wait_weights_has_a_deadline_and_wakes_up():
    t = InprocTransport()
    a = t.actor_endpoint(0)
    t0 = time.monotonic()
    assert a.wait_weights(0, timeout_s=0.05) is None
    assert time.monotonic() - t0 < 1.0
    threading.Timer(0.05, lambda: t.learner_endpoint().publish_weights(VersionedWeights(1, {}))).start()
    got = a.wait_weights(0, timeout_s=5)
    assert got is not None and got.version == 1


def test_fake_env_follows_autoreset_contract():
    env = FakeVecEnv(num_envs=3, episode_length=4)
    env.reset(seed=0)
    for _step in range(1, 5):
        r = env.step(torch.zeros(3, 2))
    assert bool(r.truncated.all()) and r.info["episode_length"].tolist() == [4, 4, 4]
    assert not torch.equal(r.obs["state"], r.info["final_obs"]["state"])
