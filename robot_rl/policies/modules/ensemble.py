"""A batched ensemble of MLPs (SAC's Q-ensemble, REDQ-style): one batched matmul per layer for all members."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class EnsembleMLP(nn.Module):
    """E independent MLPs run as one: ``[B, in]`` (shared) or ``[E, B, in]`` → ``[E, B, out]``.

    Weights are stacked ``[E, in, out]`` so each layer is one batched matmul for the whole ensemble.
    Each member is initialised like ``nn.Linear`` (uniform ±1/√in), independently.
    """

    def __init__(self, num: int, in_dim: int, hidden: Sequence[int], out_dim: int, layer_norm: bool) -> None:
        super().__init__()
        dims = [in_dim, *hidden, out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.ln_weights = nn.ParameterList()
        self.ln_biases = nn.ParameterList()
        for d_in, d_out in itertools.pairwise(dims):
            bound = 1.0 / math.sqrt(d_in)
            self.weights.append(nn.Parameter(torch.empty(num, d_in, d_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num, 1, d_out).uniform_(-bound, bound)))
        if layer_norm:
            for width in hidden:
                self.ln_weights.append(nn.Parameter(torch.ones(num, 1, width)))
                self.ln_biases.append(nn.Parameter(torch.zeros(num, 1, width)))
        self.layer_norm = layer_norm

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Evaluate every member; ``detach_params`` blocks gradients into the weights (actor loss)."""

        def p(t: torch.Tensor) -> torch.Tensor:
            return t.detach() if detach_params else t

        last = len(self.weights) - 1
        if x.dim() == 2:  # one input shared by every member
            x = x.expand(self.weights[0].shape[0], -1, -1)
        for i in range(last):
            # baddbmm rather than matmul + bias: under bf16 autocast the bias is cast too, so the
            # activations stay bf16 instead of being promoted back to float32 at every layer.
            x = torch.baddbmm(p(self.biases[i]), x, p(self.weights[i]))
            if self.layer_norm:
                x = F.layer_norm(x, x.shape[-1:]) * p(self.ln_weights[i]) + p(self.ln_biases[i])
            x = F.relu(x)
        # The output layer runs in float32 even under bf16 autocast: Q-values of a few hundred need
        # more than bf16's 8 mantissa bits to resolve TD errors of order 1.
        with torch.autocast(device_type=x.device.type, enabled=False):
            x, w, b = x.float(), p(self.weights[last]), p(self.biases[last])
            if w.shape[-1] == 1:  # a matrix-vector bmm is a slow path on CPU; multiply-and-sum is not
                return (x * w.transpose(1, 2)).sum(dim=-1, keepdim=True) + b
            return torch.baddbmm(b, x, w)
