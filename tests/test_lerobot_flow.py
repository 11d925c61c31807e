"""DSRL on a LeRobot flow VLA: a tiny SmolVLA built offline, loaded the way a user's checkpoint is.

Runs where lerobot and transformers are installed (CI's `.venv-lerobot` step); skips elsewhere.
"""

from pathlib import Path

import pytest
import torch

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from robot_rl.core.config import ALGOS, ensure_registered
from robot_rl.policies.flow.dsrl import DSRLConfig, LatentNoiseEnv
from robot_rl.policies.flow.lerobot_base import (
    ObservationMismatchError,
    lerobot_policy_type,
    load_lerobot_flow_policy,
)
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

WORDS = "reach the red green blue target".split()


def test_noise_to_chunk_is_deterministic_and_reads_the_instruction(smolvla_dir: Path) -> None:
    assert lerobot_policy_type(smolvla_dir) == "smolvla"
    env = LangReachConfig(num_envs=3, chunk_horizon=8).make("cpu", 0)
    policy = load_lerobot_flow_policy(smolvla_dir, env)
    obs = env.reset(seed=0)
    noise = torch.randn(3, 8, 2, generator=torch.Generator().manual_seed(0))
    a1, a2 = policy.sample(obs, noise), policy.sample(obs, noise.clone())
    assert a1.shape == (3, 8, 2)
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    assert not torch.allclose(a1, policy.sample(obs, -noise))
    # The instruction is an input: the same scene told a different colour gives another chunk.
    other = dict(obs)
    other["language"] = env.instruction_tokens[(env.target_index + 1) % len(env.instructions)]
    assert not torch.allclose(a1, policy.sample(other, noise))
    feats = policy.encoder(obs)
    assert feats.shape == (3, policy.encoder.out_dim) and bool(torch.isfinite(feats).all())
    bad = dict(obs)
    bad["language"] = torch.zeros_like(obs["language"])
    with pytest.raises(ValueError, match="not one of the env's 3 instructions"):
        policy.sample(bad, noise)
    with pytest.raises(ValueError, match=r"noise must be \[3, 8, 2\]"):
        policy.sample(obs, torch.zeros(3, 4, 2))


def test_dsrl_task_wraps_the_lerobot_checkpoint_and_sac_acts_in_its_noise_space(smolvla_dir: Path) -> None:
    env = DSRLConfig(num_envs=2, init_from=str(smolvla_dir), base_task="lang_reach").make("cpu", 0)
    assert isinstance(env, LatentNoiseEnv) and env.spec.action.shape == (8, 2)
    obs = env.reset(seed=0)
    ensure_registered()
    sac = ALGOS.get("sac")().build(env.spec, "cpu", 0)
    action, _ = sac.make_policy().act(obs)
    result = env.step(action)
    assert result.obs["state"].shape == obs["state"].shape
    assert result.reward.shape == (2,) and bool(torch.isfinite(result.reward).all())
    with pytest.raises(ValueError, match=r"task\.base_task"):
        DSRLConfig(init_from=str(smolvla_dir)).make("cpu", 0)


def test_a_mismatched_env_lists_every_difference(tmp_path: Path) -> None:
    ckpt = build_tiny_smolvla(tmp_path / "front", {"front": (48, 48)}, state_dim=7, action_dim=3, chunk_size=8,
                              words=WORDS)
    env = LangReachConfig(num_envs=2, chunk_horizon=8).make("cpu", 0)
    with pytest.raises(ObservationMismatchError) as err:
        load_lerobot_flow_policy(ckpt, env)
    text = str(err.value)
    assert "camera 'front'" in text and "state: env [6] vs checkpoint [7]" in text and "action size: env 2" in text
    flat = LangReachConfig(num_envs=2).make("cpu", 0)  # one action per step, not a chunk
    with pytest.raises(ObservationMismatchError, match="chunk_horizon"):
        load_lerobot_flow_policy(ckpt, flat)
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        load_lerobot_flow_policy(tmp_path / "nothing", env)


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
