"""Array specs: the shapes, dtypes and bounds that envs, policies and the wire agree on.

Observation keys follow one convention:

- ``state``: float32 ``[D]`` proprioception / object state;
- ``image.<camera>``: uint8 ``[H, W, C]`` (HWC, 0..255), one key per camera;
- ``language``: int64 ``[L]`` token ids.

An action is one float32 array ``[A]``, or an action chunk ``[horizon, A]`` for chunking policies.
Shapes in a spec exclude the batch dimension. Specs serialise to plain dicts so that they can travel in
a handshake; two peers that disagree fail at connect time with :class:`SpecMismatchError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from robot_rl.core.errors import UserError

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


class SpecMismatchError(ValueError, UserError):
    """Two specs (or a spec and an array) disagree; the message says where."""


def torch_dtype(name: str) -> torch.dtype:
    """Map a dtype name (``"float32"``) to the torch dtype."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise SpecMismatchError(f"unknown dtype {name!r}; valid: {', '.join(_DTYPES)}") from None


@dataclass(frozen=True)
class ArraySpec:
    """One named array without its batch dimension.

    ``low``/``high`` are scalar bounds (``None`` = unbounded). ``finite`` asks validators to reject
    NaN/inf, which is the default for every float array.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None
    finite: bool = True

    def __post_init__(self) -> None:
        torch_dtype(self.dtype)
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if any(s <= 0 for s in self.shape):
            raise SpecMismatchError(f"shape {self.shape} has a non-positive dimension")

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of this array."""
        return torch_dtype(self.dtype)

    @property
    def is_float(self) -> bool:
        """Whether the dtype is a floating-point type."""
        return self.torch_dtype.is_floating_point

    def check(self, name: str, x: torch.Tensor, batch_dims: int = 1) -> None:
        """Raise :class:`SpecMismatchError` unless ``x`` is ``[*batch, *shape]`` of this dtype (finite if asked)."""
        if tuple(x.shape[batch_dims:]) != self.shape or x.dim() != batch_dims + len(self.shape):
            raise SpecMismatchError(
                f"{name}: expected shape [*{batch_dims} batch dims, {', '.join(map(str, self.shape))}], "
                f"got {list(x.shape)}"
            )
        if x.dtype != self.torch_dtype:
            raise SpecMismatchError(f"{name}: expected dtype {self.dtype}, got {x.dtype}")
        if self.finite and self.is_float and not bool(torch.isfinite(x).all()):
            raise SpecMismatchError(f"{name}: contains NaN or inf")

    def zeros(self, *batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """A zero tensor ``[*batch, *shape]`` of this spec."""
        return torch.zeros(*batch, *self.shape, dtype=self.torch_dtype, device=device)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form for handshakes and run files."""
        return {"shape": list(self.shape), "dtype": self.dtype, "low": self.low, "high": self.high,
                "finite": self.finite}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArraySpec:
        """Inverse of :meth:`to_dict`; rejects unknown keys."""
        unknown = set(d) - {"shape", "dtype", "low", "high", "finite"}
        if unknown:
            raise SpecMismatchError(f"unknown ArraySpec keys {sorted(unknown)}")
        return cls(shape=tuple(d["shape"]), dtype=d.get("dtype", "float32"), low=d.get("low"),
                   high=d.get("high"), finite=d.get("finite", True))


@dataclass(frozen=True)
class EnvSpec:
    """What an environment produces and accepts: named observation arrays and one action array."""

    observation: dict[str, ArraySpec]
    action: ArraySpec
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.observation:
            if not (key == "state" or key == "language" or key.startswith("image.")):
                raise SpecMismatchError(
                    f"observation key {key!r}: use 'state', 'language' or 'image.<camera>'"
                )
            if key.startswith("image.") and (self.observation[key].dtype != "uint8"
                                             or len(self.observation[key].shape) != 3):
                raise SpecMismatchError(f"{key}: images are uint8 [H, W, C]")
        if len(self.action.shape) not in (1, 2) or not self.action.is_float:
            raise SpecMismatchError("action must be float [A] or an action chunk [horizon, A]")

    @property
    def image_keys(self) -> list[str]:
        """Observation keys holding camera images."""
        return sorted(k for k in self.observation if k.startswith("image."))

    def select(self, keys: list[str] | tuple[str, ...], what: str = "the env") -> EnvSpec:
        """The spec with only the observation ``keys`` (in that order); the action and extras unchanged.

        For a policy that sees part of what is observed (a reward model reads the cameras, the policy the state).
        """
        missing = [k for k in keys if k not in self.observation]
        if missing or not keys:
            raise ValueError(f"cannot keep {missing or 'no keys'}: {what} observes {sorted(self.observation)}")
        return EnvSpec(observation={k: self.observation[k] for k in keys}, action=self.action,
                       extras=dict(self.extras))

    @property
    def action_dim(self) -> int:
        """Size of the last action axis."""
        return self.action.shape[-1]

    def check_obs(self, obs: dict[str, torch.Tensor], batch_dims: int = 1) -> None:
        """Validate a batched observation dict against this spec."""
        missing = set(self.observation) - set(obs)
        extra = set(obs) - set(self.observation)
        if missing or extra:
            raise SpecMismatchError(f"observation keys differ: missing {sorted(missing)}, extra {sorted(extra)}")
        for key, spec in self.observation.items():
            spec.check(f"observation[{key!r}]", obs[key], batch_dims)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form for handshakes and run files."""
        return {"observation": {k: v.to_dict() for k, v in self.observation.items()},
                "action": self.action.to_dict(), "extras": dict(self.extras)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(observation={k: ArraySpec.from_dict(v) for k, v in d["observation"].items()},
                   action=ArraySpec.from_dict(d["action"]), extras=dict(d.get("extras", {})))

    def assert_compatible(self, other: EnvSpec, what: str = "peer") -> None:
        """Raise with a readable diff if ``other`` differs in any array's shape or dtype."""
        problems = []
        for key in sorted(set(self.observation) | set(other.observation)):
            a, b = self.observation.get(key), other.observation.get(key)
            if a is None or b is None:
                problems.append(f"observation[{key!r}] present on only one side")
            elif (a.shape, a.dtype) != (b.shape, b.dtype):
                problems.append(f"observation[{key!r}]: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        if (self.action.shape, self.action.dtype) != (other.action.shape, other.action.dtype):
            problems.append(f"action: {list(self.action.shape)} vs {list(other.action.shape)}")
        if problems:
            raise SpecMismatchError(f"spec mismatch with {what}: " + "; ".join(problems))
