"""Data-parallel PPO on 2 gloo ranks takes exactly the step one process takes on both ranks' data, and
`robot-rl train run.distributed=ddp` runs the ranks through torchrun as a user types it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gloo_ranks import join, leave, shared_ranks

from robot_rl.core.data_parallel import moments
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.ppo import PPOAlgorithm, PPOConfig

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
T, N, UPDATES = 8, 6, 3  # rollout length, envs per rank, updates


def _cfg(**kw: object) -> PPOConfig:
    base: dict[str, object] = dict(rollout_length=T, num_epochs=2, num_minibatches=1, actor_hidden=(16, 16),
                                   critic_hidden=(16, 16), schedule="adaptive")
    base.update(kw)
    return PPOConfig(**base)  # type: ignore[arg-type]


def _data(ranks: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    n = N * ranks
    obs = torch.randn(T + 1, n, 3, generator=g)
    return {"obs": obs[:-1], "next_obs": obs[1:], "action": torch.rand(T, n, 2, generator=g) * 2 - 1,
            "reward": torch.randn(T, n, generator=g), "terminated": torch.rand(T, n, generator=g) < 0.1}


def _fill(algo: PPOAlgorithm, data: dict[str, torch.Tensor], cols: slice) -> None:
    n = cols.stop - cols.start
    storage = algo.make_storage(n)
    for t in range(T):
        storage.add(TransitionBatch(
            obs={"state": data["obs"][t, cols]}, action=data["action"][t, cols], reward=data["reward"][t, cols],
            terminated=data["terminated"][t, cols], truncated=torch.zeros(n, dtype=torch.bool),
            next_obs={"state": data["next_obs"][t, cols]}, intervened=torch.zeros(n, dtype=torch.bool),
            policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n)))
    algo.update(storage)


def _params(algo: PPOAlgorithm) -> dict[str, torch.Tensor]:
    return {**{f"policy.{k}": v.clone() for k, v in algo.policy.state_dict().items()},
            **{f"critic.{k}": v.clone() for k, v in algo.critic.state_dict().items()}, "lr": torch.tensor(algo.lr)}


#: Update variants checked in one pair of rank processes (spawning them is most of the test's time).
VARIANTS: dict[str, dict[str, object]] = {
    "adaptive-lr": {},
    "per-minibatch-advantages": {"normalize_advantage_per_minibatch": True, "schedule": "fixed"},
    "two-minibatches": {"num_minibatches": 2},
}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    results = {}
    for name, kw in VARIANTS.items():
        algo = _cfg(**kw).build(SPEC, "cpu", seed=0)
        algo.enable_data_parallel(dp)
        data = _data(world)
        for _ in range(UPDATES):
            _fill(algo, data, slice(rank * N, (rank + 1) * N))
        results[name] = _params(algo)
    torch.save(results, f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank


@pytest.fixture(scope="module")
def two_rank_results(request: pytest.FixtureRequest) -> dict[str, dict[str, dict[str, torch.Tensor]]]:
    rank0, rank1 = shared_ranks(request)
    return {"rank0": rank0, "rank1": rank1}


@pytest.mark.parametrize("variant", ["adaptive-lr", "per-minibatch-advantages"])
@pytest.mark.integration
def test_two_gloo_ranks_equal_one_process_on_both_ranks_data(
        two_rank_results: dict[str, dict[str, dict[str, torch.Tensor]]], variant: str) -> None:
    kw = VARIANTS[variant]
    single = _cfg(**kw).build(SPEC, "cpu", seed=0)
    data = _data(2)
    for _ in range(UPDATES):
        _fill(single, data, slice(0, 2 * N))
    ddp, ref = two_rank_results["rank0"][variant], _params(single)
    assert ref.keys() == ddp.keys()
    moved = max(float((ref[k] - v).abs().max()) for k, v in _params(_cfg(**kw).build(SPEC, "cpu", 0)).items())
    assert moved > 1e-3  # the updates did change the weights, so equality below means something
    for k in ref:
        torch.testing.assert_close(ddp[k], ref[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_ranks_stay_identical(two_rank_results: dict[str, dict[str, dict[str, torch.Tensor]]], variant: str) -> None:
    # With several minibatches a rank's minibatch is a random half of its own data, so no single process draws
    # the same union; what must hold for every variant is that the ranks take the same steps (averaged gradients,
    # one learning rate, one normaliser) and stay bit-for-bit equal.
    r0, r1 = two_rank_results["rank0"][variant], two_rank_results["rank1"][variant]
    start = _params(_cfg(**VARIANTS[variant]).build(SPEC, "cpu", 0))
    assert max(float((start[k] - v).abs().max()) for k, v in r0.items()) > 1e-3
    for k in r0:
        torch.testing.assert_close(r0[k], r1[k], rtol=0, atol=0, msg=lambda m, k=k: f"{k}: {m}")


def test_moments_without_ranks_are_the_tensor_s_own() -> None:
    x = torch.tensor([1.0, 2.0, 4.0])
    mean, std = moments(x, None)
    assert float(mean) == pytest.approx(7 / 3) and float(std) == pytest.approx(float(x.std()))


@pytest.mark.slow
def test_train_ddp_runs_two_ranks_through_torchrun(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).with_name("robot-rl"))
    out = subprocess.run([exe, "train", "--task", "reach", "--algo", "ppo", "--name", "ddp", "run.distributed=ddp",
                          "run.nproc_per_node=2", "run.progress=false", "task.num_envs=64", "algo.rollout_length=16",
                          "loop.total_env_steps=6144", "loop.eval_episodes=10", "loop.eval_num_envs=10",
                          "loop.eval_every_env_steps=4096"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    # 2 ranks × 64 envs × 16 steps = 2,048 env steps per iteration, counted once for the whole run.
    assert "after 6,144 env steps" in out.stdout, out.stdout
    run = tmp_path / "runs" / "ddp"
    assert (run / "checkpoints").exists() and (run / "eval.csv").exists()
    assert (run / "ranks" / "rank1" / "train.log").exists() and not (run / "ranks" / "rank1" / "checkpoints").exists()
