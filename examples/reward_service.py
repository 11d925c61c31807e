"""Serve a success classifier over ZeroMQ and let two actors' envs take their reward from it.

    .venv/bin/python examples/reward_service.py

1. trains and calibrates a small classifier on scripted ``reach`` pixel demos (what
   `robot-rl reward train-classifier` does);
2. serves it (what `robot-rl reward serve --model DIR --bind tcp://127.0.0.1:PORT` does; here in a
   thread of this process);
3. wraps two ``reach_pixels`` envs with :func:`~robot_rl.rewards.wrapper.remote_reward_wrapper`
   and steps them from two threads (two actors), then prints how the server batched their requests,
   and what happens to the reward when the server goes away (the fallback, within the step's deadline).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import torch

from robot_rl.rewards.classifier import ClassifierConfig, train_classifier
from robot_rl.rewards.demos import reach_pixel_demos
from robot_rl.rewards.service import RewardServer, load_reward_model
from robot_rl.rewards.wrapper import RewardWrapper, remote_reward_wrapper
from robot_rl.sims.reach_pixels import ReachPixelsConfig

SIZE = 32


def main() -> None:
    """Train, serve, step two remote-reward envs, stop the server, step again."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # an actor's share of a small CPU; many threads make the 2D renderer crawl
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "classifier"
        report = train_classifier(reach_pixel_demos(24, image_size=SIZE, seed=0), model_dir,
                                  ClassifierConfig(steps=60, target_precision=0.9))
        print(report.summary())

        server = RewardServer(load_reward_model(model_dir), "tcp://127.0.0.1:*", batch_wait_s=0.002)
        stop = threading.Event()
        thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
        thread.start()
        print(f"serving {server.kind} at {server.address}")

        cfg = ReachPixelsConfig(image_size=SIZE, num_envs=8)
        envs = [remote_reward_wrapper(cfg.make("cpu", seed), server.address, max_wait_s=0.05) for seed in (1, 2)]
        for env in envs:
            env.reset()
        steps = 50

        def actor(env: RewardWrapper) -> None:  # two actors stepping at once: their requests share batches
            for _ in range(steps):
                env.step(torch.rand(cfg.num_envs, 2) * 2 - 1)

        t0 = time.perf_counter()
        actors = [threading.Thread(target=actor, args=(env,)) for env in envs]
        for th in actors:
            th.start()
        for th in actors:
            th.join()
        period = (time.perf_counter() - t0) / steps
        st = server.stats
        print(f"{steps} steps of {len(envs)} actors in parallel: {period * 1e3:.2f} ms per step; server answered "
              f"{st.requests} requests ({st.rows} frames) in {st.batches} forward passes; rejected {dict(st.errors)}")
        for env in envs:
            assert isinstance(env, RewardWrapper)
            print(f"  reward terms per transition: {env.term_means()}")

        stop.set()
        thread.join(timeout=5)
        server.close()
        remote = envs[0].classifier  # type: ignore[attr-defined]
        for i in range(3):
            t0 = time.perf_counter()
            res = envs[0].step(torch.zeros(cfg.num_envs, 2))
            print(f"server stopped, step {i}: {(time.perf_counter() - t0) * 1e3:.1f} ms (at most one 50 ms deadline, "
                  f"then no wait); fallback reward {res.reward.tolist()[:3]}..., late replies {remote.late}")
        for env in envs:
            env.close()


if __name__ == "__main__":
    main()
