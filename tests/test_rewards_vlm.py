"""VLM reward backend on a tiny randomly initialised LLaVA saved to a local directory (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


def _tiny_llava(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    words = ["<unk>", "<pad>", "<s>", "</s>", "<image>", *(
        "goal progress from first to second image answer a number between -1 and 1 is the task done yes no "
        "or reach green target 0 0.5 . : ?").split()]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", additional_special_tokens=["<image>"])
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=32, patch_size=8, projection_dim=16)
    text = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text,
                                              image_token_index=vocab["<image>"])).save_pretrained(path)
    LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                      crop_size={"height": 32, "width": 32}),
                   tokenizer=fast, patch_size=8, vision_feature_select_strategy="default",
                   num_additional_image_tokens=1).save_pretrained(path)


def test_vlm_backend_scores_batches_in_range(tmp_path: Path) -> None:
    from robot_rl.rewards.vlm import VLMProgressModel

    _tiny_llava(tmp_path / "llava")
    model = VLMProgressModel(tmp_path / "llava")
    frames = {"image.top": torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8)}
    delta, done = model(frames, frames, ["reach green target"] * 3)
    assert delta.shape == done.shape == (3,)
    assert bool(((delta >= -1) & (delta <= 1)).all() and ((done >= 0) & (done <= 1)).all())
    assert model._parse("progress 0.7 ") == 0.7 and model._parse("5") == 1.0
    unparsed = model.unparsed
    assert model._parse("yes") == 0.0 and model.unparsed == unparsed + 1
    with pytest.raises(FileNotFoundError, match="never downloads"):
        VLMProgressModel(tmp_path / "missing")
