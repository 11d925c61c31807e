"""A tokenizer shipped with the toolkit (nothing downloaded) and a tiny text encoder for language goals."""

from __future__ import annotations

import re
import zlib

import torch
from torch import nn


class UnseenInstructionError(KeyError):
    """Most words of the instruction were never seen in training, so the model cannot read it."""


class HashTokenizer:
    """Lower-cased words hashed (CRC32) into ``buckets`` ids; remembers the ids seen in training.

    Hashing needs no vocabulary file and never fails on a new word; ``known`` tells whether the
    model ever saw a word, so an instruction made only of new words can be refused or answered by the
    documented fallback instead of read as noise.
    """

    def __init__(self, buckets: int = 1024, known: set[int] | None = None) -> None:
        self.buckets = buckets
        self.known: set[int] = set(known or ())

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text`` (one per word; an empty text gives id 0)."""
        words = re.findall(r"[a-z0-9]+", text.lower())
        return [1 + zlib.crc32(w.encode()) % (self.buckets - 1) for w in words] or [0]

    def fit(self, texts: list[str]) -> None:
        """Remember every id of ``texts`` as seen."""
        for t in texts:
            self.known.update(self.ids(t))

    def is_known(self, text: str) -> bool:
        """Whether at least half the words of ``text`` were seen in training.

        Half, not one: filler words (``the``, ``to``) occur in every goal, so one known word says
        nothing about whether the model can read the instruction.
        """
        ids = self.ids(text)
        return 2 * sum(i in self.known for i in ids) >= len(ids)

    def batch(self, texts: list[str], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, offsets)`` for :class:`torch.nn.EmbeddingBag`; unseen words map to id 0."""
        flat: list[int] = []
        offsets: list[int] = []
        for t in texts:
            offsets.append(len(flat))
            ids = [i if i in self.known else 0 for i in self.ids(t)]
            flat += ids
        return torch.tensor(flat, dtype=torch.long, device=device), torch.tensor(offsets, dtype=torch.long,
                                                                                  device=device)


class TextEncoder(nn.Module):
    """Mean of word embeddings: ``(ids, offsets)`` → ``[B, dim]``."""

    def __init__(self, buckets: int = 1024, dim: int = 32) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.dim = dim

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Embed a batch of tokenised texts."""
        return torch.tanh(self.bag(ids, offsets))
