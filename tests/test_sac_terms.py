"""SAC's loss terms (robot_rl/policies/sac_terms.py): the update with every term on gives the numbers of the update
before the terms were split out, the flat keys and ``algo.loss_terms`` build the same terms, a registered term is
called at both points without an edit of sac.py, and the offline-only terms end with the offline phase."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from robot_rl.config_io import apply_overrides, parse_override, to_dict
from robot_rl.core.registry import UnknownNameError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.cotrain.aux import AuxLoss
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet
from robot_rl.policies.sac import SACAlgorithm, SACConfig
from robot_rl.policies.sac_terms import (
    SAC_LOSS_TERMS,
    BCWarmupConfig,
    CQLConfig,
    ExtensionLoss,
    SACLossTerm,
    SACLossTermConfig,
)

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
STATS = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "temperature_loss")
SETTINGS: dict[str, Any] = {"actor_hidden": (16,), "critic_hidden": (16,), "batch_size": 8, "num_critics": 3,
                            "num_critics_sampled": 2, "backup_entropy": False}
EVERY_TERM: dict[str, Any] = {"cql_alpha": 1.0, "cql_samples": 3, "calql": True, "actor_bc_updates": 2}


def _batch(seed: int, n: int = 8) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)

    def obs() -> Obs:
        return {"state": torch.randn(n, 3, generator=g)}

    mc = torch.randn(n, generator=g)
    mc[::4] = float("nan")  # rows whose episode has not ended: Cal-QL does not clamp them
    return TransitionBatch(obs=obs(), action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                           terminated=torch.rand(n, generator=g) < 0.25, truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs=obs(), intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n),
                           extras={"mc_return": mc, "discount": 0.99 ** torch.randint(1, 4, (n,), generator=g).float()})


def _run(cotrain: bool = True, updates: int = 4, **kw: Any) -> tuple[SACAlgorithm, list[dict[str, float]]]:
    """Two updates of the BC warm-up, then two that maximise Q; CQL with Cal-QL's clamp and co-training throughout."""
    algo = SACConfig(**{**SETTINGS, **kw}).build(SPEC, "cpu", seed=7)
    if cotrain:
        g = torch.Generator().manual_seed(11)
        real = DemoSet({"state": torch.randn(16, 3, generator=g)}, torch.rand(16, 2, generator=g) * 2 - 1)
        algo.aux_hook = AuxLoss(CotrainConfig(weight=0.5, batch_size=8), real, lambda: algo.num_updates, seed=3)
    return algo, [algo.update(_batch(i)) for i in range(updates)]


# What main's SAC.update gave for _run(**EVERY_TERM) before CQL / Cal-QL, the BC warm-up and co-training's loss became
# loss terms (commit 78a080c), one row per update in the order of STATS; then Σθ and Σθ² of each network, and log α.
# The refactor reproduced them (and eight more settings: pixels, a ResNet trunk, bf16, each term alone) bit for bit.
BEFORE_STATS = [
    [2.9685864448547363, 0.7675992250442505, 1.0, -2.446896553039551, 0.16015607118606567, -0.0],
    [3.0122227668762207, 0.7563937306404114, 1.0, -2.7012479305267334, 0.16751010715961456, -0.0],
    [3.7413933277130127, 2.15579891204834, 1.0, -2.3631339073181152, 0.19156712293624878, -0.0],
    [4.29716682434082, 2.530151844024658, 1.0001916885375977, -2.685621976852417, 0.1511879712343216,
     -0.0001313953980570659],
]
BEFORE_PARAMS = {"actor": (0.3244527578353882, 7.292417526245117), "critic": (-1.0266507863998413, 20.595081329345703),
                 "critic_target": (-1.0054454803466797, 20.607086181640625)}
BEFORE_LOG_ALPHA = 0.00041917129419744015


def _close(got: float, want: float) -> bool:
    return got == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_every_term_on_gives_the_numbers_of_the_update_before_the_terms() -> None:
    algo, stats = _run(**EVERY_TERM)
    for update, (got, want) in enumerate(zip(stats, BEFORE_STATS)):
        for key, value in zip(STATS, want):
            assert _close(got[key], value), (update, key, got[key], value)
    for name, (total, squares) in BEFORE_PARAMS.items():
        flat = torch.cat([p.detach().flatten() for p in getattr(algo, name).parameters()])
        assert _close(float(flat.sum()), total) and _close(float(flat.square().sum()), squares), name
    assert _close(float(algo.log_alpha.detach()), BEFORE_LOG_ALPHA)


@pytest.mark.parametrize("off", ["cql", "calql", "bc_warmup", "cotrain"])
def test_each_term_moves_those_numbers(off: str) -> None:
    # Otherwise the numbers above would not check that term.
    kw = {**EVERY_TERM, **{"cql": {"cql_alpha": 0.0, "calql": False}, "calql": {"calql": False},
                           "bc_warmup": {"actor_bc_updates": 0}, "cotrain": {}}[off]}
    _, stats = _run(cotrain=off != "cotrain", **kw)
    assert not all(_close(s[k], v) for s, want in zip(stats, BEFORE_STATS) for k, v in zip(STATS, want))


def test_the_flat_keys_and_loss_terms_build_the_same_terms() -> None:
    flat, flat_stats = _run(**EVERY_TERM)
    terms = (CQLConfig(alpha=1.0, samples=3, calql=True), BCWarmupConfig(updates=2))
    listed, listed_stats = _run(loss_terms=terms)
    assert flat_stats == listed_stats
    assert [type(t) for t in flat.terms] == [type(t) for t in listed.terms]
    assert isinstance(flat.terms[-1], ExtensionLoss)  # the attached extension's term comes last
    assert flat.state_dict().keys() == listed.state_dict().keys()  # terms keep no state: checkpoints are as before


def test_loss_terms_from_overrides_and_their_errors() -> None:
    # The algo section's own engine: `robot-rl train algo.loss_terms=[...]` applies these to SACConfig.
    cfg = apply_overrides(SACConfig(), dict([parse_override(
        "loss_terms=[{type: cql, alpha: 2.0, calql: true}, {type: bc_warmup, updates: 5}]")]))
    assert cfg.loss_terms == (CQLConfig(alpha=2.0, calql=True), BCWarmupConfig(updates=5))
    assert to_dict(cfg)["loss_terms"][0] == {"type": "cql", "alpha": 2.0, "samples": 10, "calql": True}
    with pytest.raises(UnknownNameError, match=r"unknown SAC loss term 'cq'.*cql"):
        apply_overrides(SACConfig(), {"loss_terms": [{"type": "cq"}]})
    with pytest.raises(ValueError, match="given twice"):
        SACConfig(cql_alpha=1.0, loss_terms=(CQLConfig(),)).validate()
    with pytest.raises(ValueError, match="samples >= 1"):
        SACConfig(loss_terms=(CQLConfig(samples=0),)).validate()


@pytest.mark.parametrize("flat", [True, False])
def test_finish_offline_drops_the_offline_terms_and_keeps_the_rest(flat: bool) -> None:
    cql = {"cql_alpha": 1.0, "calql": True} if flat else {"loss_terms": (CQLConfig(calql=True),)}
    algo = SACConfig(**SETTINGS, actor_bc_updates=1, **cql).build(SPEC, "cpu", seed=0)
    assert sorted(type(t).__name__ for t in algo.terms) == ["BCWarmup", "CQL", "ExtensionLoss"]
    algo.finish_offline()
    assert algo.cfg.cql_alpha == 0.0 and not algo.cfg.calql and algo.cfg.loss_terms == ()
    assert [type(t).__name__ for t in algo.terms] == ["BCWarmup", "ExtensionLoss"]
    algo.update(_batch(0))  # online rows need no Monte-Carlo return now


@pytest.mark.parametrize("calql", [True, False])
def test_calql_in_loss_terms_makes_the_replay_track_returns(calql: bool) -> None:
    storage = SACConfig(loss_terms=(CQLConfig(calql=calql),), buffer_size=16).build(SPEC, "cpu", 0).make_storage(1)
    storage.add(_batch(0))
    assert ("mc_return" in storage.sample(4).extras) == calql


# ---- a term of one's own ----------------------------------------------------------------------------------------


@SAC_LOSS_TERMS.register("test_sac_terms.q_and_mean_penalty")
@dataclass
class _PenaltyConfig(SACLossTermConfig):
    """A test term: ``weight·mean Q²`` on the critic, ``weight·mean μ²`` on the actor, and a record of its calls."""

    weight: float = 0.1

    def build(self) -> SACLossTerm:
        return _Penalty(self.weight)


class _Penalty(SACLossTerm):
    calls: list[str]

    def __init__(self, weight: float) -> None:
        self.weight, self.calls = weight, []

    def inputs(self, learner: SACAlgorithm, batch: TransitionBatch, action: torch.Tensor) -> Any:
        self.calls.append("inputs")
        return learner.draw(torch.rand, (len(batch),))  # its own random numbers, from the learner's generator

    def critic_loss(self, learner: SACAlgorithm, obs: Obs, features: torch.Tensor, q: torch.Tensor,
                    inputs: Any) -> torch.Tensor:
        self.calls.append("critic")
        assert q.shape == (3, 8) and inputs.shape == (8,)
        return self.weight * q.square().mean()

    def actor_loss(self, learner: SACAlgorithm, features: torch.Tensor, inputs: Any) -> torch.Tensor:
        self.calls.append("actor")
        return self.weight * learner.actor.gaussian(features)[0].square().mean()


def test_a_registered_term_is_called_at_both_points_without_an_edit_of_sac() -> None:
    cfg = apply_overrides(SACConfig(**SETTINGS),
                          {"loss_terms": [{"type": "test_sac_terms.q_and_mean_penalty", "weight": 10.0}]})
    algo = cfg.build(SPEC, "cpu", seed=7)
    term = algo.terms[0]
    assert isinstance(term, _Penalty)
    with_term = algo.update(_batch(0))
    assert term.calls == ["inputs", "critic", "actor"]
    without = SACConfig(**SETTINGS).build(SPEC, "cpu", seed=7).update(_batch(0))
    assert with_term["critic_loss"] > without["critic_loss"]  # the penalty is in L_Q
