"""A VLM process-reward backend: a local vision-language model prompted for progress and done.

For users with a GPU and a model on disk (e.g. a LLaVA / Qwen-VL style checkpoint): nothing is
downloaded (``local_files_only=True``). ``transformers`` is imported when the backend is built
(``pip install 'robot-rl[vlm]'``).

Per pair of frames the model sees both images and the goal and is asked:

- progress: ``prompt_progress``, answered by greedy generation; the first number in the answer is
  clamped into [-1, 1]; an answer with no number scores 0 and is counted in ``unparsed``;
- done: ``prompt_done``; the probability is ``softmax(logit("yes"), logit("no"))[0]`` of the next
  token, so it needs no generation.

Same interface as :class:`~robot_rl.rewards.prm.ProcessRewardModel`: ``model(obs_t, obs_k, goals)``
→ ``(delta [N], done [N])``, batched (one generate and one forward per call).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError

_NUMBER = re.compile(r"[-+]?\d*\.?\d+")


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ImportError("the VLM reward backend needs transformers: pip install 'robot-rl[vlm]'") from None
    return transformers


class VLMProgressModel:
    """A local vision-language model as a process reward model (see the module docstring)."""

    prompt_progress = ("{image} {image} goal : {goal} . progress from first to second image ? answer a number "
                       "between -1 and 1 :")
    prompt_done = "{image} goal : {goal} . is the task done ? answer yes or no :"

    def __init__(self, path: Path | str, camera: str | None = None, device: str = "cpu",
                 max_new_tokens: int = 6) -> None:
        tf = _require_transformers()
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no local model directory (the VLM backend never downloads)")
        self.processor = tf.AutoProcessor.from_pretrained(path, local_files_only=True)
        self.model = tf.AutoModelForImageTextToText.from_pretrained(path, local_files_only=True).to(device).eval()
        self.tokenizer = self.processor.tokenizer
        self.tokenizer.padding_side = "left"  # generation continues from the right edge
        self.image_token = getattr(self.processor, "image_token", "<image>")
        self.camera, self.device, self.max_new_tokens = camera, device, max_new_tokens
        ids = [self.tokenizer.convert_tokens_to_ids(t) for t in ("yes", "no")]
        if any(i is None or i == self.tokenizer.unk_token_id for i in ids):
            raise ConfigError(f"{path}: the tokenizer has no single 'yes'/'no' tokens for the done probability")
        self.yes_no = ids
        self.unparsed = 0

    def _images(self, obs: dict[str, torch.Tensor]) -> np.ndarray:
        key = self.camera or sorted(k for k in obs if k.startswith("image."))[0]
        if key not in obs:
            raise ConfigError(f"the VLM backend reads {key!r}; got {sorted(obs)}")
        return obs[key].detach().cpu().numpy()

    @torch.no_grad()
    def __call__(self, obs_t: dict[str, torch.Tensor], obs_k: dict[str, torch.Tensor],
                 goals: list[str] | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Progress delta ``[N]`` in [-1, 1] and done probability ``[N]`` for ``N`` frame pairs."""
        a, b = self._images(obs_t), self._images(obs_k)
        n = a.shape[0]
        goals = [goals] * n if isinstance(goals, str) else list(goals)
        if len(goals) != n:
            raise ValueError(f"{len(goals)} goals for {n} frame pairs")
        texts = [self.prompt_progress.format(image=self.image_token, goal=g) for g in goals]
        inputs = self.processor(images=[[a[i], b[i]] for i in range(n)], text=texts, return_tensors="pt",
                                padding=True).to(self.device)
        out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        answers = self.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        delta = torch.tensor([self._parse(t) for t in answers], dtype=torch.float32)
        texts = [self.prompt_done.format(image=self.image_token, goal=g) for g in goals]
        inputs = self.processor(images=[[b[i]] for i in range(n)], text=texts, return_tensors="pt",
                                padding=True).to(self.device)
        logits = self.model(**inputs).logits[:, -1, self.yes_no].float()
        done = torch.softmax(logits, dim=-1)[:, 0].cpu()
        return delta, done

    def _parse(self, answer: str) -> float:
        m = _NUMBER.search(answer)
        if m is None:
            self.unparsed += 1
            return 0.0
        return float(np.clip(float(m.group()), -1.0, 1.0))
