"""TransitionBatch ⇄ wire frames, validated against the run's EnvSpec.

Array names on the wire: ``obs/<key>``, ``next_obs/<key>``, ``action``, ``reward``, ``terminated``,
``truncated``, ``intervened``, ``policy_version``, ``env_index`` and ``extras/<name>``. The spec
check makes a batch whose shapes, dtypes or finiteness disagree with the handshake fail as a
:class:`~robot_rl.transport.codec.WireError` before a tensor is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.transport.codec import (
    DEFAULT_LIMITS,
    Message,
    PackedArrays,
    SpecPlan,
    WireError,
    WireLimits,
    decode,
    encode_packed,
    pack_arrays,
)


def _row_specs() -> dict[str, tuple[str, bool]]:
    # name → (dtype, must be finite); all are [B] vectors.
    return {"reward": ("float32", True), "terminated": ("bool", False), "truncated": ("bool", False),
            "intervened": ("bool", False), "policy_version": ("int64", False), "env_index": ("int64", False)}


_ROW_NAMES = tuple(_row_specs())


def transition_specs(spec: EnvSpec) -> dict[str, ArraySpec]:
    """Per-array specs (without the batch dimension) of a transitions message for ``spec``."""
    out: dict[str, ArraySpec] = {}
    for key, s in spec.observation.items():
        out[f"obs/{key}"] = s
        out[f"next_obs/{key}"] = s
    out["action"] = spec.action
    return out


def transition_arrays(batch: TransitionBatch) -> dict[str, np.ndarray]:
    """The wire arrays of ``batch`` by name (host views; a CUDA batch is copied to the host)."""
    # numpy(force=True): detach, to the host, numpy, in one call (no copy for a CPU tensor).
    arrays: dict[str, np.ndarray] = {f"obs/{key}": v.numpy(force=True) for key, v in batch.obs.items()}
    for key, v in batch.next_obs.items():
        arrays[f"next_obs/{key}"] = v.numpy(force=True)
    arrays["action"] = batch.action.numpy(force=True)
    for name in _ROW_NAMES:
        arrays[name] = getattr(batch, name).numpy(force=True)
    for key, v in batch.extras.items():
        arrays[f"extras/{key}"] = v.numpy(force=True)
    return arrays


def pack_transitions(batch: TransitionBatch, copy_large: bool = False, checksums: bool = True) -> PackedArrays:
    """``batch``'s arrays laid out for the wire: the small ones copied into one frame (see :func:`pack_arrays`)."""
    return pack_arrays(transition_arrays(batch), copy_large, checksums)


def encode_packed_transitions(packed: PackedArrays, session: str, seq: int, actor_id: int) -> list[bytes | memoryview]:
    """Frames of a ``transitions`` message from :func:`pack_transitions` (only the header is built here)."""
    return encode_packed("transitions", session, seq, packed, meta={"actor_id": int(actor_id)})


def encode_transitions(batch: TransitionBatch, session: str) -> list[bytes | memoryview]:
    """Frames of a ``transitions`` message carrying ``batch`` (moved to CPU)."""
    return encode_packed_transitions(pack_transitions(batch), session, batch.seq, batch.actor_id)


class TransitionPlan:
    """What a transitions message for ``spec`` must hold, compiled once (the learner builds it at start)."""

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        specs = transition_specs(spec)
        for name, (dtype, finite) in _row_specs().items():
            specs[name] = ArraySpec((), dtype, finite=finite)
        self.arrays = SpecPlan(specs, batch_dims=1)
        self.obs_names = tuple((k, f"obs/{k}", f"next_obs/{k}") for k in spec.observation)


def decode_transitions(frames: list[Any], spec: EnvSpec, limits: WireLimits = DEFAULT_LIMITS,
                       plan: TransitionPlan | None = None, header: dict[str, Any] | None = None) -> TransitionBatch:
    """Validate frames against ``spec`` and rebuild the batch (CPU tensors); raise WireError otherwise.

    ``plan`` (built from the same ``spec``) and ``header`` (:func:`~robot_rl.transport.codec.unpack_header`
    of ``frames[0]``) save recomputing them per message; every array is checked either way.
    """
    if plan is None or plan.spec is not spec:
        plan = TransitionPlan(spec)
    msg: Message = decode(frames, limits, specs=plan.arrays, header=header)
    if msg.type != "transitions":
        raise WireError("unknown_type", f"expected transitions, got {msg.type}")
    arrays = msg.arrays
    n = arrays["action"].shape[0]
    expected = plan.arrays.expected
    extras: dict[str, torch.Tensor] = {}
    for name, arr in arrays.items():
        # Every array is a [n, ...] batch: the spec'd ones have rank ≥ 1 already (checked in decode).
        if name in expected:
            if arr.shape[0] != n:
                raise WireError("spec_mismatch", f"{name}: batch of {arr.shape[0]}, action has {n}")
            continue
        if not name.startswith("extras/") or arr.ndim < 1 or arr.shape[0] != n:
            raise WireError("spec_mismatch", f"unexpected array {name!r}{list(arr.shape)}")
        extras[name[len("extras/"):]] = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
    actor_id = msg.meta.get("actor_id", 0)
    if type(actor_id) is not int:
        raise WireError("bad_header", "meta.actor_id must be an integer")

    def t(name: str) -> torch.Tensor:
        # Frames received from ZeroMQ are writable buffers this message owns: the tensor shares them
        # (no copy; the storage copies once into the replay). Read-only buffers (bytes) are copied.
        arr = arrays[name]
        return torch.from_numpy(arr if arr.flags.writeable else arr.copy())

    return TransitionBatch(
        obs={k: t(o) for k, o, _ in plan.obs_names}, action=t("action"), reward=t("reward"),
        terminated=t("terminated"), truncated=t("truncated"),
        next_obs={k: t(x) for k, _, x in plan.obs_names}, intervened=t("intervened"),
        policy_version=t("policy_version"), env_index=t("env_index"), extras=extras, actor_id=actor_id,
        seq=msg.seq,
    )
