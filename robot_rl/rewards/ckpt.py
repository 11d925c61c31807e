"""Reward-model checkpoint directories: ``model.pt`` (a state dict) + ``meta.json``, written atomically."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.config import ConfigError
from robot_rl.durable import commit_file

FORMAT = "robot_rl.reward_model"


def _write(path: Path, data: bytes) -> None:
    commit_file(path, [data])  # temp → fsync → rename → fsync dir


def save_model_dir(out: Path | str, kind: str, state: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write ``out/model.pt`` then ``out/meta.json`` (the meta last: it marks the directory complete)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in state.items()}, buf)
    _write(out / "model.pt", buf.getvalue())
    _write(out / "meta.json", json.dumps({"format": FORMAT, "kind": kind, **meta}, indent=2).encode())
    return out


def load_model_dir(path: Path | str, kind: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read a directory written by :func:`save_model_dir`; ``ValueError`` if it holds another kind."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not a reward model directory (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != FORMAT or meta.get("kind") != kind:
        raise ConfigError(f"{path} holds a {meta.get('kind', 'unknown')!r} model, expected {kind!r}")
    state = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
    return state, meta
