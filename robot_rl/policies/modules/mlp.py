"""Multi-layer perceptrons."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "elu": nn.ELU, "tanh": nn.Tanh, "gelu": nn.GELU,
                                            "silu": nn.SiLU}


def activation(name: str) -> nn.Module:
    """An activation module by name (``relu``, ``elu``, ``tanh``, ``gelu``, ``silu``)."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; valid: {', '.join(_ACTIVATIONS)}") from None


class MLP(nn.Sequential):
    """``in_dim → hidden… → out_dim``; optional LayerNorm after each hidden Linear (RLPD-style critics)."""

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, act: str = "relu",
                 layer_norm: bool = False, out_gain: float | None = None) -> None:
        layers: list[nn.Module] = []
        last = in_dim
        for width in hidden:
            layers.append(nn.Linear(last, width))
            if layer_norm:
                layers.append(nn.LayerNorm(width))
            layers.append(activation(act))
            last = width
        out = nn.Linear(last, out_dim)
        if out_gain is not None:
            nn.init.orthogonal_(out.weight, gain=out_gain)
            nn.init.zeros_(out.bias)
        layers.append(out)
        super().__init__(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - nn.Sequential forward
        return super().forward(x)
