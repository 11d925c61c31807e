"""The process reward model's text side: a tiny encoder for language goals over :mod:`robot_rl.tokenizer`'s ids."""

from __future__ import annotations

import torch
from torch import nn


class UnseenInstructionError(KeyError):
    """Most words of the instruction were never seen in training, so the model cannot read it."""


class TextEncoder(nn.Module):
    """Mean of word embeddings: ``(ids, offsets)`` from :meth:`HashTokenizer.batch` → ``[B, dim]``."""

    def __init__(self, buckets: int = 1024, dim: int = 32) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.dim = dim

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Embed a batch of tokenised texts."""
        return torch.tanh(self.bag(ids, offsets))
