"""load_policy: a run's policy built alone (no critic, no optimiser) acts exactly as the learner's copy did."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from robot_rl.checkpoint import CheckpointError, save_checkpoint
from robot_rl.config_io import to_dict
from robot_rl.core.algorithm import Algorithm
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError, ensure_registered
from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.policy_io import load_policy

STATE = EnvSpec({"state": ArraySpec((6,), "float32")}, ArraySpec((2,), "float32", -1.0, 1.0))
CHUNK = EnvSpec({"state": ArraySpec((6,), "float32")}, ArraySpec((4, 2), "float32", -1.0, 1.0))


def _config(name: str) -> tuple[AlgoConfig, EnvSpec]:
    ensure_registered()
    from robot_rl.policies.flow.model import FlowVLAConfig

    flow = FlowVLAConfig(horizon=4, hidden=16, state_features=8, num_steps=2)
    fields: dict[str, tuple[dict[str, object], EnvSpec]] = {
        "sac": ({"actor_hidden": (16,), "critic_hidden": (16,), "normalize_obs": True}, STATE),
        "ppo": ({"actor_hidden": (16,), "critic_hidden": (16,)}, STATE),
        "flow_ppo": ({"policy": flow, "critic_hidden": (16,)}, CHUNK),
        "hiors": ({"policy": flow}, CHUNK),
    }
    kw, spec = fields[name]
    return ALGOS.get(name)(**kw), spec


def _trained(cfg: AlgoConfig, spec: EnvSpec, seed: int = 0) -> Algorithm:
    """The learner with weights (and normaliser statistics) moved away from their initial values."""
    algo = cfg.build(spec, "cpu", seed)
    g = torch.Generator().manual_seed(seed + 1)
    weights = {k: v + 0.1 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
               for k, v in algo.actor_weights().items()}
    algo.load_actor_weights(weights)
    return algo


def _write_run(run_dir: Path, cfg: AlgoConfig, spec: EnvSpec, algo: Algorithm, actor_weights: bool = True,
               spec_file: bool = True) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"algo": to_dict(cfg)}))
    if spec_file:
        (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    state = {"algo": algo.state_dict(), **({"actor_weights": algo.actor_weights()} if actor_weights else {})}
    save_checkpoint(run_dir, 100, state, {"policy_version": 7})
    return run_dir


def _obs(spec: EnvSpec, n: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {k: torch.randn(n, *s.shape, generator=g) for k, s in spec.observation.items()}


def _old_path(run_dir: Path, cfg: AlgoConfig, spec: EnvSpec) -> torch.nn.Module:
    """How eval/export/record loaded a policy before load_policy: the whole learner, then make_policy."""
    from robot_rl.checkpoint import load_latest

    state, _, _ = load_latest(run_dir)
    algo = cfg.build(spec, "cpu", 123)
    algo.load_state_dict(state["algo"])
    return algo.make_policy()


@pytest.mark.parametrize("name", ["sac", "ppo", "flow_ppo", "hiors"])
def test_load_policy_acts_as_the_learners_copy_and_builds_no_learner(name: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, spec = _config(name)
    run = _write_run(tmp_path / "run", cfg, spec, _trained(cfg, spec))
    old = _old_path(run, cfg, spec)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_policy built a learner part")

    # Neither the algorithm (critics, targets, references) nor any optimiser may be built.
    monkeypatch.setattr(type(cfg), "build", refuse)
    monkeypatch.setattr(torch.optim.Optimizer, "__init__", refuse)
    loaded = load_policy(run)
    assert loaded.version == 7 and loaded.checkpoint.name == "step_000000000100"
    assert type(loaded.policy) is type(old)
    assert sum(p.numel() for p in loaded.policy.parameters()) == sum(p.numel() for p in old.parameters())
    new_state, old_state = loaded.policy.state_dict(), old.state_dict()
    assert new_state.keys() == old_state.keys() and all(torch.equal(new_state[k], old_state[k]) for k in new_state)
    obs = _obs(spec)
    with torch.no_grad():
        assert torch.equal(loaded.policy.act(obs, deterministic=True)[0], old.act(obs, deterministic=True)[0])


def test_load_policy_reads_checkpoints_without_actor_weights(tmp_path: Path) -> None:
    cfg, spec = _config("sac")
    run = _write_run(tmp_path / "run", cfg, spec, _trained(cfg, spec), actor_weights=False)
    obs = _obs(spec)
    with torch.no_grad():
        want = _old_path(run, cfg, spec).act(obs, deterministic=True)[0]
        assert torch.equal(load_policy(run).policy.act(obs, deterministic=True)[0], want)


def test_load_policy_errors_are_clear(tmp_path: Path) -> None:
    cfg, spec = _config("ppo")
    with pytest.raises(ConfigError, match="not a run directory"):
        load_policy(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text(yaml.safe_dump({"algo": to_dict(cfg)}))
    (empty / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_policy(empty)
    (empty / "config.yaml").write_text(yaml.safe_dump({"task": {"type": "reach"}}))
    with pytest.raises(ConfigError, match="no algo section"):
        load_policy(empty)

    run = _write_run(tmp_path / "run", cfg, spec, _trained(cfg, spec))
    other = EnvSpec({"state": ArraySpec((7,), "float32")}, spec.action)
    with pytest.raises(SpecMismatchError, match=r"observation\['state'\]"):
        load_policy(run, other)


def test_a_run_without_spec_file_takes_the_callers_spec(tmp_path: Path) -> None:
    cfg, spec = _config("ppo")
    run = _write_run(tmp_path / "run", cfg, spec, _trained(cfg, spec), spec_file=False)
    with pytest.raises(ConfigError, match=r"no spec\.yaml"):
        load_policy(run)
    loaded = load_policy(run, spec)
    assert loaded.spec is spec
    obs = _obs(spec)
    with torch.no_grad():
        want = _old_path(run, cfg, spec).act(obs, deterministic=True)[0]
        assert torch.equal(loaded.policy.act(obs, deterministic=True)[0], want)


@pytest.mark.parametrize("name", ["sac", "ppo", "flow_ppo", "hiors"])
def test_build_policy_starts_from_the_learners_initial_actor(name: str) -> None:
    # The same seed gives the learner's initial actor weights, and building it leaves the global RNG alone.
    cfg, spec = _config(name)
    before = torch.random.get_rng_state()
    policy = cfg.build_policy(spec, "cpu", seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    learner = cfg.build(spec, "cpu", 5).actor_weights()
    got = policy.state_dict()
    assert got.keys() == learner.keys() and all(torch.equal(got[k], learner[k]) for k in got)
