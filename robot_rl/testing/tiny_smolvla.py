"""A tiny SmolVLA checkpoint built offline, for tests and the docs' dry run of the LeRobot base path.

SmolVLA builds its VLM from ``AutoConfig.from_pretrained(vlm_model_name)`` and its processor from the
same name, so a local directory holding a small SmolVLM config, a word-level tokenizer and the image
processor stands in for ``HuggingFaceTB/SmolVLM2-500M-Video-Instruct`` without a download. The
checkpoint is randomly initialised (lerobot's ``load_vlm_weights=False``), then saved the way a
trained one is (``save_pretrained`` of the policy and of its pre/post-processors), so loading it
exercises exactly the path a user's fine-tuned SmolVLA takes.

Needs ``lerobot`` and ``transformers`` (``bash scripts/install-lerobot.sh VENV``).
"""

from __future__ import annotations

from pathlib import Path

import torch


def _tokenizer(words: list[str]):  # noqa: ANN202 - transformers type, imported lazily
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                "<video>"] + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(words)) + ["\n"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # SmolVLA reads fake_image_token_id / global_image_token_id off the tokenizer.
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", additional_special_tokens=specials[2:],
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                              "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"})


def build_tiny_smolvla(out: Path | str, cameras: dict[str, tuple[int, int]], state_dim: int, action_dim: int,
                       chunk_size: int, words: list[str], seed: int = 0, image_side: int = 32, patch_size: int = 8,
                       vision_width: int = 32, train_whole_vla: bool = False) -> Path:
    """Write a random tiny SmolVLA checkpoint to ``out`` and return its directory.

    ``cameras``: ``{name: (height, width)}`` → input features ``observation.images.<name>``; the state and
    action features are ``observation.state [state_dim]`` and ``action [action_dim]``; ``words`` make up
    the tokenizer's vocabulary (the instructions it will be given). Normalisation stats are identity
    (mean 0, std 1), so actions come out as the model produces them. ``image_side``: the side (px, a multiple
    of ``2 * patch_size``) the VLM sees its images at, cut into ``patch_size`` patches embedded ``vision_width``
    wide (a 2× pixel shuffle then makes ``(image_side / patch_size / 2)²`` image tokens); ``train_whole_vla``:
    the checkpoint's config lets the vision tower and the VLM train too (SmolVLA's defaults train the action
    expert alone, over a pretrained VLM, which a random one is not).
    """
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from transformers import SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    out = Path(out)
    vlm_dir = out / "vlm"
    tok = _tokenizer(words)
    side = image_side
    if side % (2 * patch_size):
        raise ValueError(f"image_side must be a multiple of 2 * patch_size = {2 * patch_size} (patches, then a 2x "
                         f"pixel shuffle), got {side}")
    vlm = SmolVLMConfig(
        text_config={"model_type": "llama", "vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 512, "pad_token_id": 0},
        vision_config={"hidden_size": vision_width, "intermediate_size": 2 * vision_width, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": side, "patch_size": patch_size},
        scale_factor=2, image_token_id=tok.convert_tokens_to_ids("<image>"))
    vlm.save_pretrained(vlm_dir)
    tokens = (side // patch_size // 2) ** 2
    SmolVLMProcessor(SmolVLMImageProcessor(size={"longest_edge": side}, max_image_size={"longest_edge": side}), tok,
                     video_processor=SmolVLMVideoProcessor(), image_seq_len=tokens).save_pretrained(vlm_dir)

    torch.manual_seed(seed)
    inputs = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, h, w)) for c, (h, w) in cameras.items()}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (state_dim,))
    cfg = SmolVLAConfig(vlm_model_name=str(vlm_dir), load_vlm_weights=False, num_vlm_layers=2, chunk_size=chunk_size,
                        n_action_steps=chunk_size, resize_imgs_with_padding=(side, side), num_steps=4,
                        max_state_dim=max(8, state_dim), max_action_dim=max(8, action_dim), tokenizer_max_length=16,
                        input_features=inputs, freeze_vision_encoder=not train_whole_vla,
                        train_expert_only=not train_whole_vla,
                        output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))}, device="cpu",
                        push_to_hub=False)
    policy = SmolVLAPolicy(cfg)
    stats = {"observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim)},
             "action": {"mean": torch.zeros(action_dim), "std": torch.ones(action_dim)}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out
