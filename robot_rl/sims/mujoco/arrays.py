"""The few array operations the task math needs that torch and numpy spell differently.

The controller, the rewards and the observations are written once against the API that torch
tensors and numpy arrays share: slicing, arithmetic, ``.clip`` (numpy's method costs less than
``np.clip``), ``.mT``, ``xp.concat(..., axis=)``, ``xp.tanh``, ``xp.linalg.vector_norm(..., axis=)``.
They run in torch on the MJX backend (float32, on the env's device) and in numpy on the CPU backend
(float64, on the host): a numpy op on a small array costs about 1 µs against 3–10 µs for a torch op,
and the CPU backend's state is float64 numpy already, so its per-step math costs a fraction of the
torch version's and needs no conversion. ``namespace`` picks the module from an array; the helpers
cover what differs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: A torch tensor or a numpy array (the type of every field of a ``Readout``).
Array = Any


def namespace(x: Array) -> Any:
    """``numpy`` for a numpy array, else ``torch``: the module whose functions take ``x``."""
    return np if isinstance(x, np.ndarray) else torch


def add_scaled(x: Array, y: Array, alpha: float) -> Array:
    """``x + alpha · y`` (torch: one fused ``torch.add``, as the torch-only code computed it)."""
    if isinstance(x, np.ndarray):
        return x + alpha * y
    return torch.add(x, y, alpha=alpha)


def solve(a: Array, b: Array) -> Array:
    """Batched ``a⁻¹ b`` (``a [N, n, n]``, ``b [N, n, k]``) without a singularity check.

    torch's ``solve_ex`` skips the check that ``solve`` would sync the device for; callers pass
    matrices that are positive definite by construction.
    """
    if isinstance(a, np.ndarray):
        return np.linalg.solve(a, b)
    return torch.linalg.solve_ex(a, b)[0]


def as_float32(x: Array) -> Array:
    """``x`` as float32 (a copy unless it is float32 already)."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float32, copy=False)
    return x.float()


def concat_float32(parts: list[Array]) -> Array:
    """``parts`` joined along the last axis, as a new float32 array (numpy casts while copying)."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=-1, dtype=np.float32)
    return torch.cat(parts, dim=-1).float()


def fill_where_(x: Array, mask: Array, value: float) -> None:
    """Set ``x`` to ``value`` where ``mask`` holds, in place."""
    if isinstance(x, np.ndarray):
        np.putmask(x, mask, value)
    else:
        x.masked_fill_(mask, value)


def to_torch(x: Array, device: torch.device) -> torch.Tensor:
    """``x`` as a torch tensor on ``device`` (a numpy array is shared on the CPU, not copied)."""
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(x)
        # .to() is a no-op on the CPU but costs as much as from_numpy itself.
        return t if device.type == "cpu" else t.to(device)
    return x


def to_numpy(x: Array) -> np.ndarray:
    """``x`` as a host numpy array (a torch tensor is moved to the CPU first)."""
    if isinstance(x, np.ndarray):
        return x
    return x.detach().cpu().numpy()
