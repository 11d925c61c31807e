"""The toolkit's one tokenizer: hashed words (or characters), nothing downloaded.

Both sides of language use it: the language tasks encode their instructions with it (``sims/lang_reach.py``,
``sims/lang_push.py``: fixed-length ``int64`` ids in the observation) and the process reward model reads
its goals with it (``rewards/prm.py``: a bag of word ids, with the ids seen in training remembered). It
sits at the top of the package and imports nothing from it, so sims, rewards and policies may all use it.

Token ids are ``int64`` in ``[0, vocab_size)``; ``0`` is padding (and the id of an empty text). A word
(lower-cased, split on anything that is not a letter or digit) maps to ``1 + crc32(word) mod (vocab_size − 1)``;
in ``char`` mode each character does. crc32, not Python's ``hash``, so ids are the same in every process (the
env and the policy may live on different machines) and saved models keep reading their texts. Collisions are
possible but harmless for the small instruction sets of the built-in tasks; the tests check that those sets
are collision-free, and ``tests/test_tokenizer.py`` pins the ids.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Literal

import torch

_WORD = re.compile(r"[a-z0-9]+")


class InstructionTooLongError(ValueError):
    """An instruction has more tokens than the language context holds."""


@dataclass
class HashTokenizer:
    """Text → hashed token ids: padded ``int64 [context_length]`` (:meth:`encode`) or a bag (:meth:`batch`)."""

    vocab_size: int = 256
    """Number of token ids (0 = padding)."""
    context_length: int = 16
    """Tokens per instruction for :meth:`encode`; a longer instruction is an error, never silently cut."""
    mode: Literal["word", "char"] = "word"
    """``word``: one token per word; ``char``: one token per character."""
    known: set[int] = field(default_factory=set, compare=False, repr=False)
    """Ids seen in training (:meth:`fit`): a model that learned from them can tell a text it cannot read
    (:meth:`is_known`) instead of reading it as noise."""

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

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text``, one per piece, unpadded; an empty text gives ``[0]``."""
        return [1 + zlib.crc32(p.encode("utf-8")) % (self.vocab_size - 1) for p in self.pieces(text)] or [0]

    def encode(self, text: str) -> torch.Tensor:
        """``int64 [context_length]`` ids of ``text``; raises :class:`InstructionTooLongError` if it does not fit."""
        ids = self.ids(text)
        if len(ids) > self.context_length:
            raise InstructionTooLongError(
                f"instruction {text!r} has {len(ids)} {self.mode} tokens, more than the language context of "
                f"{self.context_length}; shorten it or raise context_length")
        out = torch.zeros(self.context_length, dtype=torch.int64)
        out[:len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return out

    def encode_batch(self, texts: list[str]) -> torch.Tensor:
        """``int64 [len(texts), context_length]``."""
        return torch.stack([self.encode(t) for t in texts]) if texts else torch.zeros(
            0, self.context_length, dtype=torch.int64)

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
        """``(ids, offsets)`` for :class:`torch.nn.EmbeddingBag`: every text's ids, unseen ones mapped to 0."""
        flat: list[int] = []
        offsets: list[int] = []
        for t in texts:
            offsets.append(len(flat))
            flat += [i if i in self.known else 0 for i in self.ids(t)]
        return (torch.tensor(flat, dtype=torch.long, device=device),
                torch.tensor(offsets, dtype=torch.long, device=device))
