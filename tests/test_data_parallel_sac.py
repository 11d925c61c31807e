"""Data-parallel SAC on 2 gloo ranks takes the step one process takes on both ranks' batches together, the lockstep
schedule keeps the ranks' counters and weights equal when their data is not, and `robot-rl train --algo sac
run.distributed=ddp` runs, checkpoints once and resumes on one rank."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from gloo_ranks import join, leave, leaves

from robot_rl.checkpoint import list_checkpoints
from robot_rl.core.config import ALGOS, ConfigError
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.config import LoopConfig, resolve_train_config
from robot_rl.loop.data_parallel_run import prepare_rank
from robot_rl.loop.learner import Learner
from robot_rl.loop.lockstep import LockstepOffPolicyUpdates
from robot_rl.policies.sac import SACAlgorithm, SACConfig
from robot_rl.transport.config import InprocTransportConfig

STATE = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
PIXELS = EnvSpec({"state": ArraySpec((3,)), "image.cam": ArraySpec((16, 16, 3), dtype="uint8")},
                 ArraySpec((2,), low=-1.0, high=1.0))
B, UPDATES = 8, 3  # rows per rank per update, updates

#: Update variants checked in one pair of rank processes (spawning them is most of the test's time): the
#: normaliser, REDQ's critic subset with CQL's per-row draws and a fixed α, and DrQ's per-image shifts with a CNN
#: that the critic's loss trains.
VARIANTS: dict[str, tuple[EnvSpec, dict[str, Any]]] = {
    "state-normalised": (STATE, {"normalize_obs": True}),
    "redq-cql-fixed-alpha": (STATE, {"num_critics": 4, "num_critics_sampled": 2, "cql_alpha": 1.0, "cql_samples": 3,
                                     "autotune_entropy": False}),
    "pixels-drq": (PIXELS, {"image_channels": 4, "image_features": 8, "image_shift_pad": 2}),
    # Cal-QL's reference settings: two updates of the actor's cloning warm-up (σ and α get zero gradients, which
    # DDP must still reduce), then one that maximises Q.
    "warmup-then-q": (STATE, {"cql_alpha": 1.0, "cql_samples": 2, "actor_bc_updates": 2, "backup_entropy": False}),
}


def _algo(variant: str, batch_size: int) -> SACAlgorithm:
    spec, kw = VARIANTS[variant]
    return SACConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=batch_size, **kw).build(spec, "cpu", seed=0)


def _batch(spec: EnvSpec, update: int, rows: slice) -> TransitionBatch:
    """Update ``update``'s batch of both ranks (2·B rows), cut to ``rows``: rank r holds rows [r·B, (r+1)·B)."""
    g = torch.Generator().manual_seed(100 + update)
    n = 2 * B

    def obs() -> dict[str, torch.Tensor]:
        o = {"state": torch.randn(n, 3, generator=g) * 3 + 1}
        if "image.cam" in spec.observation:
            o["image.cam"] = torch.randint(0, 256, (n, 16, 16, 3), generator=g, dtype=torch.uint8)
        return o

    full = TransitionBatch(obs=obs(), action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                           terminated=torch.rand(n, generator=g) < 0.2, truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs=obs(), intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n))
    return full.index(torch.arange(n)[rows])


def _grads(algo: SACAlgorithm) -> dict[str, torch.Tensor | None]:
    named = {**{f"critic.{k}": p for k, p in algo.critic.named_parameters()},
             **{f"actor.{k}": p for k, p in algo.actor.named_parameters()}, "log_alpha": algo.log_alpha}
    return {k: None if p.grad is None else p.grad.clone() for k, p in named.items()}


def _train(algo: SACAlgorithm, variant: str, rows: slice) -> dict[str, Any]:
    grads: dict[str, torch.Tensor | None] = {}
    for u in range(UPDATES):
        algo.update(_batch(VARIANTS[variant][0], u, rows))
        if u == 0:
            grads = _grads(algo)
    return {"grads": grads, "state": leaves(algo.state_dict())}


class _FakeActor:
    """Stores ``rows`` transitions per step straight into the learner (ranks store different amounts)."""

    def __init__(self, learner: Learner, rows: int, rank: int) -> None:
        self.learner, self.rows, self.steps = learner, rows, 0
        self.g = torch.Generator().manual_seed(rank)

    def sync_weights(self) -> bool:
        return False

    def step(self) -> None:
        n, g = self.rows, self.g
        obs = {"state": torch.randn(n, 3, generator=g)}
        self.learner.ingest(TransitionBatch(
            obs=obs, action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
            terminated=torch.zeros(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
            next_obs={"state": torch.randn(n, 3, generator=g)}, intervened=torch.zeros(n, dtype=torch.bool),
            policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n)))


def _lockstep(dp: DataParallel) -> list[tuple[int, int]]:
    """Rank 0 stores 4 rows an iteration, rank 1 stores 3; (env steps, updates) after each of 5 iterations."""
    algo = SACConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=4, learning_starts=10).build(STATE, "cpu", 0)
    algo.enable_data_parallel(dp)
    learner = Learner(algo, STATE, InprocTransportConfig().open_learner(STATE).endpoint, "cpu", 4)
    learner.ranks = dp.world_size
    actors: Any = [_FakeActor(learner, 4 - dp.rank, dp.rank)]
    steps = LockstepOffPolicyUpdates(learner, algo, actors, LoopConfig(weight_sync_every_updates=2),
                                     threading.Event(), dp)
    counts = []
    for _ in range(5):
        steps.iteration()
        counts.append((learner.transitions, learner.updates))
    return counts


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    results: dict[str, Any] = {}
    for variant in VARIANTS:
        algo = _algo(variant, B)
        algo.enable_data_parallel(dp)
        results[variant] = _train(algo, variant, slice(rank * B, (rank + 1) * B))
    results["lockstep"] = _lockstep(dp)
    torch.save(results, f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_both_batches(two_ranks: list[dict[str, Any]], variant: str) -> None:
    single = _train(_algo(variant, 2 * B), variant, slice(0, 2 * B))
    ddp = two_ranks[0][variant]
    assert ddp["grads"].keys() == single["grads"].keys()
    trained = 0
    for k, ref in single["grads"].items():
        got = ddp["grads"][k]
        assert (got is None) == (ref is None), k
        if ref is not None:
            trained += 1
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"gradient {k}: {m}")
    assert trained > 4
    assert (ddp["grads"]["log_alpha"] is None) == variant.endswith("fixed-alpha")  # α learns unless it is fixed
    start = leaves(_algo(variant, 2 * B).state_dict())
    moved = max(float((single["state"][k] - v).abs().max()) for k, v in start.items()
                if isinstance(v, torch.Tensor) and v.is_floating_point() and k.startswith(("actor.", "critic.")))
    assert moved > 1e-4  # the updates changed the weights, so the equality below means something
    for k, ref in single["state"].items():
        if k.startswith(("actor.", "critic.", "critic_target.", "encoder_target.", "log_alpha")):
            torch.testing.assert_close(ddp["state"][k], ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]], variant: str) -> None:
    # Networks, targets, α, optimiser moments, normaliser statistics and the generator: everything a rank holds.
    r0, r1 = two_ranks[0][variant]["state"], two_ranks[1][variant]["state"]
    assert r0.keys() == r1.keys()
    for k, v in r0.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, r1[k]), k
        else:
            assert v == r1[k], k


@pytest.mark.integration
def test_lockstep_ranks_agree_on_steps_and_updates_when_their_data_differs(two_ranks: list[dict[str, Any]]) -> None:
    # 4 + 3 = 7 env steps an iteration on every rank. Updates start once every shard holds learning_starts / 2 = 5
    # rows (rank 1's 3 rows an iteration: from iteration 2) and owe utd · 7 / 2 = 3.5 an iteration from then on.
    assert two_ranks[0]["lockstep"] == two_ranks[1]["lockstep"]
    assert two_ranks[0]["lockstep"] == [(7, 0), (14, 3), (21, 7), (28, 10), (35, 14)]


@dataclasses.dataclass
class _PluginSACConfig(SACConfig):
    """An algorithm a plugin registers: the data-parallel runner knows nothing of its update."""


def test_algorithms_without_data_parallel_support_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALGOS._entries, "plugin_sac", _PluginSACConfig)
    cfg = dataclasses.replace(resolve_train_config("reach", "sac"), algo=_PluginSACConfig())
    with pytest.raises(ConfigError, match=r"'plugin_sac' does not train data-parallel yet; supported: ppo, sac, iql, "
                                          r"flow_ppo, hiors, flow_qc, fasttd3, fastsac .*Why: its update does not "
                                          r"average gradients over ranks"):
        prepare_rank(cfg, DataParallel(0, 2, 0), None)


def _robot_rl(args: list[str], cwd: Path) -> tuple[int, int]:
    """Run ``robot-rl ARGS`` in ``cwd``; the env steps and updates it reports."""
    exe = str(Path(sys.executable).with_name("robot-rl"))
    out = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"after ([\d,]+) env steps, ([\d,]+) updates", out.stdout)
    assert m is not None, out.stdout
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


#: 2 ranks × 8 envs = 16 env steps an iteration; updates start once each shard holds 32 rows (iteration 4), then
#: utd · 16 / 2 = 8 an iteration (UTD 1, set: reach's SAC preset has 0.25): 8 · 17 = 136 by 320 env steps.
FIRST_RUN = (320, 136)


@pytest.fixture(scope="module")
def sac_ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, int]]:
    cwd = tmp_path_factory.mktemp("sac_ddp_cli")
    counts = _robot_rl(["train", "--task", "reach", "--algo", "sac", "--name", "ddp", "run.distributed=ddp",
                        "run.nproc_per_node=2", "run.progress=false", "task.num_envs=8", "algo.batch_size=32",
                        "algo.learning_starts=64", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]",
                        "algo.utd_ratio=1.0", "loop.eval_episodes=4", "loop.eval_num_envs=4",
                        "loop.eval_every_env_steps=100000", "loop.success_threshold=null",
                        f"loop.total_env_steps={FIRST_RUN[0]}"], cwd)
    return cwd / "runs" / "ddp", counts


@pytest.mark.slow
def test_train_sac_on_two_ranks_writes_one_checkpoint_set(sac_ddp_run: tuple[Path, tuple[int, int]]) -> None:
    run, counts = sac_ddp_run
    assert counts == FIRST_RUN
    assert len(list_checkpoints(run)) == 1 and (run / "eval.csv").exists()
    rank1 = run / "ranks" / "rank1"
    assert (rank1 / "train.log").exists() and not list_checkpoints(rank1)
    shards = [max((d / "replay" / "online").glob("seg_*"), key=lambda f: f.stat().st_size) for d in (run, rank1)]
    # Each rank's own shard, committed at the end for a resume, and its own data: the ranks' envs are seeded apart.
    assert shards[0].stat().st_size > 1000 and shards[0].read_bytes() != shards[1].read_bytes()


@pytest.mark.slow
def test_a_two_rank_sac_run_resumes_on_one_rank(sac_ddp_run: tuple[Path, tuple[int, int]]) -> None:
    run, _ = sac_ddp_run
    steps, updates = _robot_rl(["train", "--resume", str(run), "run.distributed=none", "loop.total_env_steps=400"],
                               run.parent.parent)
    assert steps == 400 and updates > FIRST_RUN[1]  # rank 0's counters, weights and replay shard came back
    assert "replay {'online': 160}" in (run / "train.log").read_text()  # rank 0's 20 iterations × 8 envs


@pytest.mark.parametrize(("override", "named"), [
    ("cotrain.real_dataset=demos", "cotrain"), ("twin.refit_every=5 twin.file=twin.json", "twin.refit_every")])
def test_sections_that_assume_one_process_are_refused_by_name(override: str, named: str) -> None:
    cfg = resolve_train_config("reach", "sac", overrides=override.split())
    with pytest.raises(ConfigError, match=rf"run.distributed=ddp does not combine with {re.escape(named)} \("):
        prepare_rank(cfg, DataParallel(0, 2, 0), None)


@pytest.mark.integration
def test_the_cli_refuses_ddp_with_hil_before_starting_any_rank(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).with_name("robot-rl"))
    out = subprocess.run([exe, "train", "--task", "reach", "--algo", "sac", "run.distributed=ddp",
                          "run.nproc_per_node=2", "loop.hil={}"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "run.distributed=ddp does not combine with loop.hil (one operator's teleop device" in out.stderr
    assert "torch.distributed.run" not in out.stderr and not (tmp_path / "runs").exists()
