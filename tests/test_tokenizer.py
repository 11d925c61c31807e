"""The one tokenizer: token ids pinned to what both former tokenizers produced.

The expected ids below were computed with the two tokenizers this one replaced (``sims/lang_tokenizer.py``'s
``HashTokenizer.encode`` and ``rewards/text.py``'s ``HashTokenizer.ids``/``batch``) before they were merged,
by calling them on these strings. Env observations, flow policies trained on them and saved process reward
models (which store the seen ids) stay valid only while these numbers hold; a change here is a format change.
"""

from __future__ import annotations

import pytest
import torch

from robot_rl.sims.lang_push import LangPushConfig
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.tokenizer import HashTokenizer, InstructionTooLongError

TEXTS = ["reach the red target", "Push the BLUE block to the left!", "", "  ", "put the cup in the bin",
         "héllo wörld 42"]


def test_reward_model_side_ids_fit_and_bags_are_unchanged() -> None:
    tok = HashTokenizer(1024)  # how rewards/prm.py builds it (buckets=1024)
    assert [tok.ids(t) for t in TEXTS] == [
        [382, 775, 913, 49], [735, 775, 589, 572, 565, 775, 267], [0], [0], [227, 775, 949, 882, 775, 873],
        [706, 81, 412, 123, 216]]
    tok.fit(["reach the red target", "put the cup in the bin"])
    assert sorted(tok.known) == [49, 227, 382, 775, 873, 882, 913, 949]
    assert [tok.is_known(t) for t in TEXTS] == [True, False, False, False, True, False]
    ids, offsets = tok.batch(TEXTS)
    assert ids.tolist() == [382, 775, 913, 49, 0, 775, 0, 0, 0, 775, 0, 0, 0, 227, 775, 949, 882, 775, 873,
                            0, 0, 0, 0, 0]
    assert offsets.tolist() == [0, 4, 11, 12, 13, 19] and ids.dtype == torch.long


def test_task_side_padded_ids_are_unchanged() -> None:
    assert HashTokenizer().encode_batch(TEXTS[:2]).tolist() == [
        [64, 214, 76, 226] + [0] * 12, [21, 214, 85, 89, 247, 214, 51] + [0] * 9]
    assert HashTokenizer(64, 8).encode_batch(TEXTS).tolist() == [
        [19, 4, 58, 19, 0, 0, 0, 0], [15, 4, 58, 5, 10, 4, 27, 0], [0] * 8, [0] * 8, [26, 4, 31, 45, 4, 6, 0, 0],
        [34, 60, 37, 45, 18, 0, 0, 0]]
    char = HashTokenizer(64, 32, mode="char").encode_batch(TEXTS[2:4] + TEXTS[5:])
    assert char.tolist() == [[0] * 32, [24, 24] + [0] * 30,
                             [34, 12, 17, 17, 30, 24, 37, 31, 44, 17, 31, 24, 44, 50] + [0] * 18]
    assert HashTokenizer(64, 32).encode_batch([]).shape == (0, 32)


def test_the_language_tasks_observe_the_same_instruction_ids() -> None:
    reach = LangReachConfig(num_envs=2).make("cpu", 0)
    push = LangPushConfig(num_envs=2).make("cpu", 0)
    assert reach.instruction_tokens.tolist() == [[64, 214, c, 226, 0, 0, 0, 0] for c in (76, 124, 85)]
    sides = (51, 10, 226, 1)  # left, right, top, bottom
    assert push.instruction_tokens.tolist() == [[21, 214, c, 89, 247, 214, s, 0] for c in (76, 85) for s in sides]


def test_bad_settings_and_long_instructions_are_refused() -> None:
    with pytest.raises(ValueError, match="vocab_size >= 2"):
        HashTokenizer(1)
    with pytest.raises(ValueError, match="mode"):
        HashTokenizer(mode="bpe")  # type: ignore[arg-type]
    with pytest.raises(InstructionTooLongError, match="5 word tokens"):
        HashTokenizer(context_length=4).encode("a b c d e")
    assert HashTokenizer(context_length=1).encode("").tolist() == [0]  # an empty text is one padding id
