"""The per-row extras that travel between packages in :attr:`TransitionBatch.extras`, declared once.

A replay writes ``discount`` and an algorithm reads it; an actor writes PPO's ``log_prob`` and the learner
reads it. The key is the contract between the two sides, so it is declared here with its dtype, its shape
per row (after the batch dimension ``B``), and who writes and reads it; code says ``extras[DISCOUNT.name]``,
never the bare string (tests/test_extras_keys.py rejects a string literal of a declared key outside this
module). A key private to one algorithm's own storage needs no declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExtraKey:
    """One shared key of :attr:`TransitionBatch.extras`.

    ``shape`` is the shape of one row, in words (``"[]"`` for a scalar per row); ``writers`` and ``readers``
    are the modules on each side of the contract.
    """

    name: str
    dtype: torch.dtype
    shape: str
    writers: tuple[str, ...]
    readers: tuple[str, ...]
    doc: str


DISCOUNT = ExtraKey(
    "discount", torch.float32, "[]",
    writers=("robot_rl.replay.buffer", "robot_rl.replay.device_ring"),
    readers=("robot_rl.policies.sac", "robot_rl.policies.iql", "robot_rl.policies.fast_offpolicy"),
    doc="γ^m of an n-step row: the bootstrap's discount (absent: the algorithm's own γ)")
MC_RETURN = ExtraKey(
    "mc_return", torch.float32, "[]",
    writers=("robot_rl.replay.buffer", "robot_rl.data.offline"),
    readers=("robot_rl.policies.offline_rl", "robot_rl.loop.runner"),
    doc="the discounted return-to-go of the row's episode, NaN while the episode runs (Cal-QL)")
LOG_PROB = ExtraKey(
    "log_prob", torch.float32, "[]",
    writers=("robot_rl.policies.ppo", "robot_rl.policies.flow.model", "robot_rl.policies.flow.lerobot_flow_ppo"),
    readers=("robot_rl.policies.ppo", "robot_rl.policies.flow.ppo"),
    doc="log π(u|s) of the acting sample (PPO's old log-probability)")
RAW_ACTION = ExtraKey(
    "raw_action", torch.float32, "[*action_shape]",
    writers=("robot_rl.policies.ppo",), readers=("robot_rl.policies.ppo",),
    doc="the unclamped Gaussian sample u, before the clamp to the action bounds")
MEAN = ExtraKey(
    "mean", torch.float32, "[*action_shape]",
    writers=("robot_rl.policies.ppo",), readers=("robot_rl.policies.ppo",),
    doc="the acting Gaussian's mean μ (for PPO's KL)")
CHAIN = ExtraKey(
    "chain", torch.float32, "[K + 1, H, A]",
    writers=("robot_rl.policies.flow.model", "robot_rl.policies.flow.lerobot_flow_ppo"),
    readers=("robot_rl.policies.flow.ppo",),
    doc="the denoising chain of a flow policy's stochastic action chunk (flow PPO re-scores it)")
ELEMENT_LOG_PROB = ExtraKey(
    "element_log_prob", torch.float32, "[K, H, A]",
    writers=("robot_rl.policies.flow.model", "robot_rl.policies.flow.lerobot_flow_ppo"),
    readers=("robot_rl.policies.flow.ppo",),
    doc="log N(x_{k+1}; μ_k(x_k), σ_k²) of each denoising step and chunk element of the acting chain: flow PPO's "
        "behaviour log-probabilities for rows acted by older weights (asynchronous actors)")
GUIDED = ExtraKey(
    "guided", torch.bool, "[]",
    writers=("robot_rl.loop.actor",), readers=(),
    doc="a JSRL guide policy chose this row's action (robot_rl.loop.jsrl)")
ACTION_MASK = ExtraKey(
    "action_mask", torch.float32, "[H]",
    writers=("robot_rl.policies.flow.qchunk_data",), readers=("robot_rl.policies.flow.qchunk",),
    doc="per-step weight of a demo action chunk, 0 past the episode's end")
ACTION_PAD = ExtraKey(
    "action_pad", torch.bool, "[H]",
    writers=("robot_rl.replay.buffer",), readers=(),
    doc="the steps of a sampled action chunk past the episode's end (padding, not actions)")

SHARED_EXTRAS: tuple[ExtraKey, ...] = (DISCOUNT, MC_RETURN, LOG_PROB, RAW_ACTION, MEAN, CHAIN, ELEMENT_LOG_PROB,
                                       GUIDED, ACTION_MASK, ACTION_PAD)
"""Every declared key (names are unique)."""
