"""A built-in tokenizer for language instructions: hashed words or characters, nothing downloaded.

Token ids are ``int64`` in ``[0, vocab_size)``; ``0`` is padding. A word (lower-cased, split on anything
that is not a letter or digit) maps to ``1 + crc32(word) mod (vocab_size − 1)``; in ``char`` mode each
character does. crc32, not Python's ``hash``, so ids are the same in every process (the env and the
policy may live on different machines). Collisions are possible but harmless for the small
instruction sets of the built-in tasks; the tests check that those sets are collision-free.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Literal

import torch

_WORD = re.compile(r"[a-z0-9]+")


class InstructionTooLongError(ValueError):
    """An instruction has more tokens than the language context holds."""


@dataclass(frozen=True)
class HashTokenizer:
    """Instruction text → ``int64 [context_length]`` token ids, right-padded with 0."""

    vocab_size: int = 256
    """Number of token ids (0 = padding)."""
    context_length: int = 16
    """Tokens per instruction; a longer instruction is an error, never silently cut."""
    mode: Literal["word", "char"] = "word"
    """``word``: one token per word; ``char``: one token per character."""

    def __post_init__(self) -> None:
        if self.vocab_size < 2 or self.context_length < 1:
            raise ValueError(f"need vocab_size >= 2 and context_length >= 1, got {self.vocab_size}, "
                             f"{self.context_length}")
        if self.mode not in ("word", "char"):
            raise ValueError(f"tokenizer mode must be 'word' or 'char', got {self.mode!r}")

    def pieces(self, text: str) -> list[str]:
        """The words (or characters) of ``text`` that become tokens."""
        text = text.lower()
        return _WORD.findall(text) if self.mode == "word" else list(text)

    def encode(self, text: str) -> torch.Tensor:
        """``int64 [context_length]`` ids of ``text``; raises :class:`InstructionTooLongError` if it does not fit."""
        pieces = self.pieces(text)
        if len(pieces) > self.context_length:
            raise InstructionTooLongError(
                f"instruction {text!r} has {len(pieces)} {self.mode} tokens, more than the language context of "
                f"{self.context_length}; shorten it or raise context_length")
        ids = torch.zeros(self.context_length, dtype=torch.int64)
        for i, piece in enumerate(pieces):
            ids[i] = 1 + zlib.crc32(piece.encode("utf-8")) % (self.vocab_size - 1)
        return ids

    def encode_batch(self, texts: list[str]) -> torch.Tensor:
        """``int64 [len(texts), context_length]``."""
        return torch.stack([self.encode(t) for t in texts]) if texts else torch.zeros(
            0, self.context_length, dtype=torch.int64)
