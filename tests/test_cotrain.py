"""Sim–real co-training (robot_rl/cotrain): λ schedule, alignment errors, the aux-loss hook, λ = 0 == plain
RL bit for bit, stage-1 SFT, and a tiny end-to-end run through `robot-rl train`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import ALGOS, ensure_registered
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.cotrain.align import AlignmentError, alignment_problems, assert_aligned, rename_cameras
from robot_rl.cotrain.aux import AuxLoss, supervised_loss
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet, episodes_to_demoset
from robot_rl.cotrain.sft import warm_start
from robot_rl.data.episode import Episode
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.replay.rollout import RolloutStorage

STATE = EnvSpec({"state": ArraySpec((6,), "float32")}, ArraySpec((2,), "float32", -1.0, 1.0))
CHUNK = EnvSpec({"state": ArraySpec((6,), "float32")}, ArraySpec((4, 2), "float32", -1.0, 1.0))


def _episodes(spec: EnvSpec, n: int, t: int, seed: int) -> list[Episode]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        obs = {k: rng.normal(size=(t, *s.shape)).astype(s.dtype) for k, s in spec.observation.items()}
        x = obs["state"] if "state" in obs else rng.normal(size=(t, 4))
        action = np.tanh(x[:, :2] - x[:, 2:4]).astype(np.float32)  # a learnable map
        f = np.zeros(t, bool)
        out.append(Episode(obs=obs, action=action, reward=np.zeros(t, np.float32), terminated=f.copy(),
                           truncated=np.r_[f[:-1], True], intervened=f.copy(), success=f.copy(),
                           final_obs={k: v[-1] for k, v in obs.items()}))
    return out


def _small(name: str, **kw: object) -> object:
    ensure_registered()
    cfg = ALGOS.get(name)()
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def _ppo(seed: int = 0) -> object:
    return _small("ppo", actor_hidden=(32,), critic_hidden=(32,), rollout_length=4, num_epochs=2,
                  num_minibatches=2).build(STATE, "cpu", seed)  # type: ignore[attr-defined]


def _sac(seed: int = 0) -> object:
    return _small("sac", actor_hidden=(32,), critic_hidden=(32,), batch_size=16).build(  # type: ignore[attr-defined]
        STATE, "cpu", seed)


def _rollout(algo: object, num_envs: int = 4, seed: int = 1) -> RolloutStorage:
    g = torch.Generator().manual_seed(seed)
    storage: RolloutStorage = algo.make_storage(num_envs)  # type: ignore[attr-defined]
    policy = algo.make_policy()  # type: ignore[attr-defined]
    obs = {"state": torch.randn(num_envs, 6, generator=g)}
    for _ in range(storage.length):
        action, extras = policy.act(obs)
        nxt = {"state": torch.randn(num_envs, 6, generator=g)}
        z = torch.zeros(num_envs, dtype=torch.bool)
        storage.add(TransitionBatch(obs=obs, action=action, reward=torch.randn(num_envs, generator=g),
                                    terminated=z, truncated=z, next_obs=nxt, intervened=z,
                                    policy_version=torch.zeros(num_envs, dtype=torch.int64),
                                    env_index=torch.arange(num_envs), extras=extras))
        obs = nxt
    return storage


def _sac_batch(seed: int = 2, n: int = 16) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)
    z = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs={"state": torch.randn(n, 6, generator=g)}, action=torch.rand(n, 2, generator=g) * 2 - 1,
                           reward=torch.randn(n, generator=g), terminated=z, truncated=z,
                           next_obs={"state": torch.randn(n, 6, generator=g)}, intervened=z,
                           policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n))


class SpyDemoSet(DemoSet):
    """Counts the rows the hook draws (from the real demos: the only data it is given)."""

    drawn = 0

    def sample(self, n: int, generator: torch.Generator) -> tuple[dict[str, torch.Tensor], torch.Tensor,
                                                                  torch.Tensor | None]:
        self.drawn += n
        return super().sample(n, generator)


def _real(spec: EnvSpec = STATE, n: int = 3) -> SpyDemoSet:
    d = episodes_to_demoset(_episodes(spec, n, 10, 0), spec, "cpu")
    return SpyDemoSet(d.obs, d.action, d.mask, d.episodes)


# ---- config ---------------------------------------------------------------------------------


def test_weight_schedules_by_hand() -> None:
    c = CotrainConfig(weight=0.4, final_weight=0.1, decay_updates=100, schedule="linear")
    assert [c.weight_at(t) for t in (0, 50, 100, 500)] == pytest.approx([0.4, 0.25, 0.1, 0.1])
    c.schedule = "cosine"
    assert [c.weight_at(t) for t in (0, 50, 100)] == pytest.approx([0.4, 0.25, 0.1])
    assert c.weight_at(25) == pytest.approx(0.1 + 0.3 * 0.5 * (1 + math.cos(math.pi / 4)))
    c.schedule = "constant"
    assert c.weight_at(10_000) == 0.4
    with pytest.raises(ValueError, match="sft_real_fraction"):
        CotrainConfig(sft_real_fraction=1.5)


def test_cli_config_keys() -> None:
    from robot_rl.cli import dotted_flags

    argv = dotted_flags(["train", "--cotrain.real-dataset", "/data/real", "--task", "reach", "--cotrain.weight=0.1"])
    assert argv == ["train", "--task", "reach", "cotrain.real_dataset=/data/real", "cotrain.weight=0.1"]
    cfg = resolve_train_config("reach", "ppo", None, [*argv[3:], "cotrain.schedule=cosine"])
    assert cfg.cotrain.real_dataset == Path("/data/real") and cfg.cotrain.weight == 0.1
    assert cfg.cotrain.enabled and cfg.cotrain.schedule == "cosine"
    assert not resolve_train_config("reach", "ppo").cotrain.enabled


# ---- alignment --------------------------------------------------------------------------------


def test_alignment_lists_every_difference() -> None:
    sim = EnvSpec({"state": ArraySpec((16,), "float32"), "image.front": ArraySpec((64, 64, 3), "uint8"),
                   "image.wrist": ArraySpec((64, 64, 3), "uint8")}, ArraySpec((7,), "float32", -1.0, 1.0))
    real = EnvSpec({"state": ArraySpec((14,), "float32"), "image.front": ArraySpec((96, 128, 3), "uint8"),
                    "image.hand": ArraySpec((64, 64, 3), "uint8"), "language": ArraySpec((8,), "int64")},
                   ArraySpec((6,), "float32", -2.0, 2.0))
    problems = alignment_problems(sim, real)
    text = "\n".join(problems)
    assert "camera names differ" in text and "only in sim: ['wrist']" in text and "only in real: ['hand']" in text
    assert "camera 'front': image size sim 64×64×3 vs real 96×128×3" in text
    assert "observation 'state': sim float32[16] vs real float32[14]" in text
    assert "observation 'language' is only in the real data" in text
    assert "action: sim float32[7] vs real float32[6]" in text
    assert "action bound low" in text and "action bound high" in text
    with pytest.raises(AlignmentError, match=r"7 differences") as err:
        assert_aligned(sim, real)
    assert str(err.value).count("\n  - ") == 7
    assert_aligned(sim, sim)


def test_camera_map_renames_real_cameras() -> None:
    sim = EnvSpec({"image.wrist": ArraySpec((8, 8, 3), "uint8")}, ArraySpec((2,), "float32"))
    real = EnvSpec({"image.hand": ArraySpec((8, 8, 3), "uint8")}, ArraySpec((2,), "float32"))
    ep = _episodes(real, 1, 3, 0)[0]
    spec, (ep2,) = rename_cameras(real, [ep], {"hand": "wrist"})
    assert_aligned(sim, spec)
    assert set(ep2.obs) == {"image.wrist"} and ep2.final_obs is not None and set(ep2.final_obs) == {"image.wrist"}
    with pytest.raises(AlignmentError, match="does not have"):
        rename_cameras(real, [ep], {"elbow": "wrist"})


# ---- the hook ---------------------------------------------------------------------------------


def test_aux_loss_is_lambda_times_bc_on_real_rows() -> None:
    algo = _ppo()
    real = _real()
    hook = AuxLoss(CotrainConfig(weight=0.3, batch_size=8), real, lambda: 0, seed=5)
    got = hook(algo)
    assert got is not None and real.drawn == 8
    obs, action, _ = real.sample(8, torch.Generator().manual_seed(5))
    from robot_rl.policies.ppo import gaussian_log_prob

    p = algo.policy  # type: ignore[attr-defined]
    by_hand = -gaussian_log_prob(action, p.actor(p.normalize(obs["state"])), p.log_std()).mean()
    torch.testing.assert_close(got, 0.3 * by_hand)
    assert hook.pop_stats()["cotrain/aux_loss"] == pytest.approx(float(by_hand.detach()), rel=1e-5)


@pytest.mark.parametrize("algo_name", ["ppo", "sac"])
def test_learners_call_the_hook_once_per_actor_step_with_real_batches(algo_name: str) -> None:
    algo = _ppo() if algo_name == "ppo" else _sac()
    real = _real()
    hook = AuxLoss(CotrainConfig(weight=0.5, batch_size=8), real, lambda: 0, seed=1)
    algo.aux_hook = hook  # type: ignore[attr-defined]
    if algo_name == "ppo":
        algo.update(_rollout(algo))  # type: ignore[attr-defined]
        assert hook.calls == 2 * 2  # num_epochs × num_minibatches
    else:
        algo.update(_sac_batch())  # type: ignore[attr-defined]
        assert hook.calls == 1
    assert real.drawn == 8 * hook.calls  # every aux row came from the real demonstrations


def _params(algo: object) -> dict[str, torch.Tensor]:
    sd = algo.state_dict()  # type: ignore[attr-defined]
    out = {}
    for part in ("policy", "critic", "actor"):
        out.update({f"{part}.{k}": v for k, v in sd.get(part, {}).items()})
    return out


@pytest.mark.parametrize("algo_name", ["ppo", "sac"])
def test_lambda_zero_is_plain_rl_bit_for_bit(algo_name: str) -> None:
    def run(weight: float | None) -> dict[str, torch.Tensor]:
        algo = _ppo() if algo_name == "ppo" else _sac()
        if weight is not None:
            algo.aux_hook = AuxLoss(CotrainConfig(weight=weight, batch_size=8), _real(), lambda: 0, seed=3)  # type: ignore[attr-defined]
        for i in range(3):
            if algo_name == "ppo":
                algo.update(_rollout(algo, seed=i))  # type: ignore[attr-defined]
            else:
                algo.update(_sac_batch(seed=i))  # type: ignore[attr-defined]
        return _params(algo)

    plain, zero, some = run(None), run(0.0), run(1.0)
    assert plain.keys() == zero.keys()
    assert all(torch.equal(plain[k], zero[k]) for k in plain)
    assert any(not torch.equal(plain[k], some[k]) for k in plain)


def test_decayed_lambda_skips_the_real_batch() -> None:
    step = {"t": 0}
    real = _real()
    hook = AuxLoss(CotrainConfig(weight=1.0, schedule="linear", decay_updates=10), real, lambda: step["t"], seed=0)
    assert hook(_ppo()) is not None
    step["t"] = 10
    assert hook(_ppo()) is None and real.drawn == 256


def test_flow_policy_aux_is_flow_matching() -> None:
    ensure_registered()
    from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy

    torch.manual_seed(0)
    flow = FlowVLAPolicy(CHUNK, FlowVLAConfig(horizon=4, hidden=32, state_features=16))
    real = episodes_to_demoset(_episodes(CHUNK, 2, 9, 0), CHUNK, "cpu")
    assert real.action.shape[1:] == (4, 2) and real.mask is not None  # per-step actions → target chunks
    obs, action, mask = real.rows(torch.arange(6))
    got = supervised_loss(flow, obs, action, mask, torch.Generator().manual_seed(4))
    want = flow.flow_matching_loss(obs, action, mask, torch.Generator().manual_seed(4))
    torch.testing.assert_close(got, want)


def test_flow_ppo_calls_the_hook() -> None:
    ensure_registered()
    from robot_rl.policies.flow.model import FlowVLAConfig

    cfg = _small("flow_ppo", policy=FlowVLAConfig(horizon=4, hidden=32, state_features=16, num_steps=2),
                 critic_hidden=(16,), rollout_length=2, num_epochs=1, num_minibatches=2)
    algo = cfg.build(CHUNK, "cpu", 0)  # type: ignore[attr-defined]
    real = episodes_to_demoset(_episodes(CHUNK, 2, 9, 0), CHUNK, "cpu")
    real = SpyDemoSet(real.obs, real.action, real.mask, real.episodes)
    algo.aux_hook = hook = AuxLoss(CotrainConfig(weight=0.1, batch_size=4), real, lambda: 0, seed=0)
    storage = algo.make_storage(2)
    policy = algo.make_policy()
    obs = {"state": torch.randn(2, 6)}
    z = torch.zeros(2, dtype=torch.bool)
    for _ in range(2):
        action, extras = policy.act(obs)
        storage.add(TransitionBatch(obs=obs, action=action, reward=torch.ones(2), terminated=z, truncated=z,
                                    next_obs=obs, intervened=z, policy_version=torch.zeros(2, dtype=torch.int64),
                                    env_index=torch.arange(2), extras=extras))
    algo.update(storage)
    assert hook.calls == 2 and real.drawn == 8


def _small_algos() -> dict[str, tuple[EnvSpec, dict[str, object]]]:
    """A config small enough for one quick update, per registered algorithm: ``name -> (spec, fields)``."""
    from robot_rl.policies.flow.model import FlowVLAConfig

    flow = FlowVLAConfig(horizon=4, hidden=16, state_features=8, num_steps=2)
    return {"sac": (STATE, {"actor_hidden": (16,), "critic_hidden": (16,), "batch_size": 8}),
            "iql": (STATE, {"actor_hidden": (16,), "critic_hidden": (16,), "batch_size": 8}),
            # policy_frequency 1: with FastTD3's default 2, one update never reaches the actor step and its hook.
            "fasttd3": (STATE, {"actor_hidden": (16,), "critic_hidden": (16,), "batch_size": 8, "num_atoms": 11,
                                "policy_frequency": 1}),
            "fastsac": (STATE, {"actor_hidden": (16,), "critic_hidden": (16,), "batch_size": 8, "num_atoms": 11}),
            "ppo": (STATE, {"actor_hidden": (16,), "critic_hidden": (16,), "rollout_length": 2, "num_epochs": 1,
                            "num_minibatches": 1}),
            "flow_ppo": (CHUNK, {"policy": flow, "critic_hidden": (16,), "rollout_length": 2, "num_epochs": 1,
                                 "num_minibatches": 1}),
            "hiors": (CHUNK, {"policy": flow, "rollout_length": 2, "min_buffer": 1, "updates_per_rollout": 2,
                              "batch_size": 4}),
            "flow_qc": (CHUNK, {"policy": flow, "critic_hidden": (16,), "num_samples": 2, "batch_size": 4})}


def _one_update(algo: object, spec: EnvSpec) -> None:
    """One ``update`` on random transitions: a sampled minibatch (off-policy) or a full rollout (on-policy)."""
    from robot_rl.core.algorithm import OffPolicyAlgorithm, OnPolicyAlgorithm

    g = torch.Generator().manual_seed(0)
    n = 4
    obs = {k: torch.randn(n, *s.shape, generator=g) for k, s in spec.observation.items()}
    ones = torch.ones(n, dtype=torch.bool)  # every step ends a successful episode (hiors accepts them)

    def batch(action: torch.Tensor, extras: dict[str, torch.Tensor]) -> TransitionBatch:
        return TransitionBatch(obs=obs, action=action, reward=torch.ones(n), terminated=ones, truncated=~ones,
                               next_obs=obs, intervened=~ones, policy_version=torch.zeros(n, dtype=torch.int64),
                               env_index=torch.arange(n), extras=extras)

    if isinstance(algo, OffPolicyAlgorithm):
        algo.update(batch(torch.rand(n, *spec.action.shape, generator=g) * 2 - 1, {}))
        return
    assert isinstance(algo, OnPolicyAlgorithm)
    storage, policy = algo.make_storage(n), algo.make_policy()
    while not storage.is_full():  # type: ignore[attr-defined]
        storage.add(batch(*policy.act(obs)))
    algo.update(storage)


@pytest.mark.parametrize("name", ALGOS.names())
def test_every_algorithm_adds_the_aux_hook_or_refuses_cotraining(name: str) -> None:
    from robot_rl.core.algorithm import SupervisedLoss

    small = _small_algos()
    assert name in small, f"add a small {name!r} config to _small_algos so that its aux hook is tested"
    spec, fields = small[name]
    algo = _small(name, **fields).build(spec, "cpu", 0)  # type: ignore[attr-defined]
    real = _real(spec)
    hook = AuxLoss(CotrainConfig(weight=0.5, batch_size=4), real, lambda: 0, seed=0)
    if not isinstance(algo, SupervisedLoss):
        with pytest.raises(TypeError, match="co-training needs an algorithm with a supervised loss"):
            hook(algo)
        return
    calls: list[object] = []

    def spy(a: object) -> torch.Tensor | None:
        calls.append(a)
        return hook(a)

    algo.aux_hook = spy
    _one_update(algo, spec)
    assert calls and all(a is algo for a in calls), f"{name}.update never called its aux hook"
    assert real.drawn == 4 * len(calls)


def test_an_algorithm_without_a_supervised_loss_is_refused() -> None:
    from robot_rl.core.algorithm import SupervisedLoss
    from robot_rl.policies.flow.lerobot_flow_ppo import LeRobotFlowPPOAlgorithm

    # flow_ppo on a LeRobot SmolVLA (built from a checkpoint, so not in the sweep above) has no supervised loss.
    lerobot = object.__new__(LeRobotFlowPPOAlgorithm)
    assert not isinstance(lerobot, SupervisedLoss)
    with pytest.raises(TypeError, match="LeRobotFlowPPOAlgorithm has none"):
        AuxLoss(CotrainConfig(batch_size=4), _real(CHUNK), lambda: 0, seed=0)(lerobot)
    with pytest.raises(TypeError, match="co-training needs"):
        warm_start(lerobot, _real(CHUNK), None, CotrainConfig(sft_steps=1), seed=0)


# ---- stage 1 ----------------------------------------------------------------------------------


def test_sft_mixes_real_and_sim_at_the_ratio_and_learns() -> None:
    algo = _sac()
    real, sim = _real(), _real(n=4)
    cfg = CotrainConfig(sft_steps=60, sft_batch_size=20, sft_real_fraction=0.25, sft_lr=3e-3)
    losses = warm_start(algo, real, sim, cfg, seed=0)
    assert real.drawn == 60 * 5 and sim.drawn == 60 * 15
    assert losses[-1] < losses[0]
    # SAC's target encoder and PPO's normaliser follow stage 1.
    ppo = _ppo()
    warm_start(ppo, _real(), None, CotrainConfig(sft_steps=2), seed=0)
    assert float(ppo.policy.normalizer.count) == len(_real())  # type: ignore[attr-defined]


# ---- end to end -------------------------------------------------------------------------------


def _store(path: Path, spec: EnvSpec, episodes: list[Episode]) -> Path:
    store = EpisodeStore.create(path, spec)
    for ep in episodes:
        store.append(ep)
    return path


def test_tiny_cotraining_run_through_the_cli(tmp_path: Path) -> None:
    from robot_rl.cli import main

    ensure_registered()
    spec = resolve_train_config("reach", "ppo").task.make("cpu", 0, num_envs=1).spec
    real = _store(tmp_path / "real", spec, _episodes(spec, 4, 12, 1))
    sim = _store(tmp_path / "sim", spec, _episodes(spec, 4, 12, 2))
    rc = main(["train", "--task", "reach", "--algo", "ppo", "--cotrain.real-dataset", str(real),
               "--cotrain.weight", "0.1", f"--cotrain.sim-dataset={sim}", "cotrain.sft_steps=5",
               "cotrain.holdout_fraction=0.25", "cotrain.batch_size=16", "task.num_envs=8",
               "algo.rollout_length=4", "algo.actor_hidden=[32]", "algo.critic_hidden=[32]",
               "loop.total_env_steps=96", "loop.eval_episodes=4", "loop.eval_num_envs=4",
               "loop.log_every_s=0", "loop.success_threshold=null", "run.progress=false",
               f"run.root={tmp_path / 'runs'}", "run.name=ct"])
    assert rc == 0
    lines = (tmp_path / "runs" / "ct" / "cotrain.csv").read_text().splitlines()
    assert lines[0] == "env_steps,updates,lambda,aux_loss,heldout_loss,heldout_action_mse,real_train_loss"
    rows = [r.split(",") for r in lines[1:]]
    assert rows and all(float(r[2]) == 0.1 and r[4] for r in rows)
    assert any(r[3] for r in rows)  # the aux loss was computed during RL


def test_misaligned_real_dataset_fails_before_training(tmp_path: Path) -> None:
    from robot_rl.cli import main

    other = EnvSpec({"state": ArraySpec((5,), "float32")}, ArraySpec((2,), "float32", -1.0, 1.0))
    real = _store(tmp_path / "real", other, _episodes(other, 1, 4, 0))
    rc = main(["train", "--task", "reach", "--algo", "ppo", "--cotrain.real-dataset", str(real),
               "run.progress=false", f"run.root={tmp_path / 'runs'}", "task.num_envs=2"])
    assert rc == 2


@pytest.mark.sim
def test_shifted_reach_is_real_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    from robot_rl.core.config import TASKS
    from robot_rl.cotrain.data import load_aligned_episodes
    from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos

    ensure_registered()
    sim = TASKS.get("mujoco/reach")().make("cpu", 0, num_envs=2)
    real = TASKS.get("mujoco/reach_shifted")().make("cpu", 0, num_envs=2)
    ps, pr = sim.get_params(), real.get_params()
    assert torch.allclose(pr["actuator_gain"], ps["actuator_gain"] * 0.35)
    assert torch.allclose(pr["dof_damping"], ps["dof_damping"] * 4.0)
    assert not np.allclose(sim.model.cam_pos, real.model.cam_pos)  # type: ignore[attr-defined]
    n_ok = record_demos(real, tmp_path / "real", 2, ScriptedReachDemonstrator(noise=0.1), seed=1)
    assert 0 <= n_ok <= 2
    eps = load_aligned_episodes(tmp_path / "real", sim.spec)  # the stand-in's demos align with the sim
    assert len(eps) == 2


def test_flow_ppo_stage1_moves_the_kl_reference_to_the_sft_policy() -> None:
    ensure_registered()
    from robot_rl.policies.flow.model import FlowVLAConfig

    cfg = _small("flow_ppo", policy=FlowVLAConfig(horizon=4, hidden=32, state_features=16, num_steps=2),
                 critic_hidden=(16,), freeze_encoder=True)
    algo = cfg.build(CHUNK, "cpu", 0)  # type: ignore[attr-defined]
    before = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    real = episodes_to_demoset(_episodes(CHUNK, 2, 9, 0), CHUNK, "cpu")
    warm_start(algo, real, None, CotrainConfig(sft_steps=3, sft_batch_size=8), seed=0)
    after = algo.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in after if k.startswith("encoder."))  # encoder trained
    assert all(torch.equal(v, after[k]) for k, v in algo.reference.state_dict().items())
    assert not any(p.requires_grad for p in algo.policy.encoder.parameters())  # freeze_encoder restored for RL
