"""Data-parallel Q-chunking (``--algo flow_qc run.distributed=ddp``): two gloo ranks on half a batch each, demo rows
included, take the step one process takes on the whole batch (the chunk critics, the flow's weighted flow-matching
step, with a frozen and with a trained encoder; QC-FQL's one-step policy), and stay bit-for-bit equal."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gloo_ranks import assert_bit_equal, assert_close_floats, join, leave, leaves

from robot_rl.core.data_parallel import SupportsDataParallel
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import Episode
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.qchunk import FlowQCAlgorithm, FlowQCConfig
from robot_rl.policies.flow.qchunk_data import ChunkTransitions, chunk_transitions
from robot_rl.sims.lang_reach import LangReachConfig

TINY = dict(hidden=16, expert_layers=1, image_features=4, cnn_channels=4, cnn_layers=1, state_features=4,
            lang_features=4)
H, B, UPDATES = 4, 8, 3  # chunk horizon, rows per rank per update (half of them demo rows), updates
VARIANTS: dict[str, dict[str, Any]] = {"frozen-encoder": {"freeze_encoder": True},
                                       "trained-encoder": {"freeze_encoder": False},
                                       "fql": {"freeze_encoder": True, "actor": "fql", "fql_hidden": (16,)}}


def _spec() -> EnvSpec:
    return LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 0).spec


def _episodes(spec: EnvSpec, seed: int, count: int) -> list[Episode]:
    """``count`` random 7-step episodes (camera, language, state; rewards, a success at the end of the odd ones)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        t = 7
        obs = {k: (rng.integers(0, 256, (t, *v.shape)).astype(np.uint8) if k.startswith("image.")
                   else rng.integers(0, 3, (t, *v.shape)).astype(np.int64) if k == "language"
                   else rng.normal(size=(t, *v.shape)).astype(np.float32)) for k, v in spec.observation.items()}
        end = np.zeros(t, bool)
        end[-1] = True
        out.append(Episode(obs, rng.uniform(-1, 1, (t, 2)).astype(np.float32), rng.normal(size=t).astype(np.float32),
                           end & bool(i % 2), end & (not i % 2), np.zeros(t, bool), end & bool(i % 2), None))
    return out


def _algo(spec: EnvSpec, variant: dict[str, Any], batch_size: int, demos: ChunkTransitions) -> FlowQCAlgorithm:
    cfg = FlowQCConfig(policy=FlowVLAConfig(horizon=H, num_steps=2, **TINY), critic_hidden=(16,), num_samples=3,
                       batch_size=batch_size, demo_ratio=0.5, bc_weight=0.5, **variant)
    algo = cfg.build(spec, "cpu", seed=0)
    algo.demos = demos  # the demo rows every update mixes in (what algo.demos=PATH loads)
    return algo


def _online(data: ChunkTransitions, update: int, rows: torch.Tensor) -> TransitionBatch:
    """Update ``update``'s sampled rows of both ranks (2·B), cut to ``rows``; every third one intervened."""
    g = torch.Generator().manual_seed(100 + update)
    batch = data.batch(torch.randint(0, len(data), (2 * B,), generator=g), "cpu")
    batch.intervened[::3] = True
    return batch.index(rows)


def _rows(rank: int, ranks: int) -> torch.Tensor:
    """The sampled rows rank ``rank`` of ``ranks`` (1 or 2) updates on.

    An update keeps its batch's first half and puts demo rows in the tail, so each rank's first half is its share of
    the whole batch's first half: together the ranks keep the rows one process keeps.
    """
    half = B // 2
    kept = torch.arange(rank * half * (2 // ranks), (rank + 1) * half * (2 // ranks))
    return torch.cat([kept, kept + B])


def _train(variant: dict[str, Any], rows: torch.Tensor, dp: Any = None) -> dict[str, Any]:
    spec = _spec()
    online, demos = (chunk_transitions(_episodes(spec, s, 6), spec, H, H) for s in (1, 2))
    algo = _algo(spec, variant, len(rows), demos)
    if dp is not None:
        algo.enable_data_parallel(dp)
    grads: dict[str, torch.Tensor] = {}
    for u in range(UPDATES):
        algo.update(_online(online, u, rows))
        if u == 0:
            named = {**{f"critic.{k}": p for k, p in algo.actor.critic.named_parameters()},
                     **{f"flow.{k}": p for k, p in algo.actor.flow.named_parameters()},
                     **{f"onestep.{k}": p for k, p in (algo.actor.onestep or torch.nn.Module()).named_parameters()}}
            grads = {k: p.grad.clone() for k, p in named.items() if p.grad is not None}
    return {"grads": grads, "state": leaves(algo.state_dict())}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    dp = join(rank, world, port)
    results = {name: _train(variant, _rows(rank, world), dp) for name, variant in VARIANTS.items()}
    torch.save(results, f"{out}.{rank}")
    leave(dp)


GLOO_RANKS = _rank



def test_flow_qc_supports_data_parallel() -> None:
    spec = _spec()
    assert isinstance(_algo(spec, VARIANTS["fql"], B, chunk_transitions(_episodes(spec, 2, 2), spec, H, H)),
                      SupportsDataParallel)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_two_gloo_ranks_take_one_process_s_step_on_both_batches(two_ranks: list[dict[str, Any]], variant: str) -> None:
    single = _train(VARIANTS[variant], _rows(0, 1))
    ddp = two_ranks[0][variant]
    assert ddp["grads"].keys() == single["grads"].keys()
    assert any(k.startswith("critic.") for k in single["grads"])
    assert any(k.startswith("flow.") and not k.startswith("flow.encoder.") for k in single["grads"])  # flow step ran
    assert any(k.startswith("flow.encoder.") for k in single["grads"]) == (variant == "trained-encoder")
    assert any(k.startswith("onestep.") for k in single["grads"]) == (variant == "fql")  # the one-step step ran
    for k, ref in single["grads"].items():
        torch.testing.assert_close(ddp["grads"][k], ref, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"gradient {k}: {m}")
    # Adam divides by the gradient's running RMS: where a gradient is ~0 (a conv bias of a random CNN), summation-
    # order noise of 1e-7 in it moves the weight by up to ~lr·1e-1 after 3 steps (seen: 4e-6 at lr 1e-4).
    assert_close_floats(ddp["state"], single["state"], atol=2e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.integration
def test_ranks_stay_bit_for_bit_equal(two_ranks: list[dict[str, Any]], variant: str) -> None:
    assert_bit_equal(two_ranks[0][variant]["state"], two_ranks[1][variant]["state"])
