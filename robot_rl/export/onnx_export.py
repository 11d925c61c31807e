"""ONNX export of the deterministic actor, checked against onnxruntime.

The graph takes the observation arrays as separate named inputs (``state`` float32 ``[N, D]``, each
``image.<camera>`` uint8 ``[N, H, W, C]``), with a dynamic batch axis ``N``, and returns ``action``
``[N, *action_shape]``: the policy's own ``deterministic_action``
(:class:`~robot_rl.core.algorithm.DeterministicActor`), the same numbers ``policy.act(obs, deterministic=True)``
gives, normalisation, CNN, squashing and scaling (SAC) or clamping (PPO) included.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robot_rl.core.algorithm import DeterministicActor
from robot_rl.core.specs import EnvSpec

OPSET = 17


class ArrayActor(nn.Module):
    """The policy's ``deterministic_action`` as a plain ``forward(*arrays)`` (no RNG, no dict input)."""

    policy: DeterministicActor

    def __init__(self, policy: nn.Module, spec: EnvSpec) -> None:
        super().__init__()
        if not isinstance(policy, DeterministicActor):
            raise ValueError(f"ONNX export needs a policy with a deterministic action (robot_rl.core.algorithm."
                             f"DeterministicActor: SAC, PPO), not {type(policy).__name__}")
        self.policy = policy
        self.input_names = (["state"] if "state" in spec.observation else []) + spec.image_keys
        self.action_shape = tuple(spec.action.shape)

    def forward(self, *arrays: torch.Tensor) -> torch.Tensor:
        """Observation arrays in :attr:`input_names` order → action ``[N, *action_shape]``."""
        return self.policy.deterministic_action(dict(zip(self.input_names, arrays))).reshape(-1, *self.action_shape)


@dataclass
class OnnxCheck:
    """onnxruntime against torch on the same observations."""

    num_obs: int
    max_abs_err: float
    batch_sizes: tuple[int, ...]


def export_onnx(policy: nn.Module, spec: EnvSpec, path: Path) -> list[str]:
    """Write the deterministic actor of ``policy`` to ``path``; return the input names."""
    try:
        import onnx  # noqa: F401 - the exporter needs it
    except ImportError:
        raise ImportError("ONNX export needs onnx: pip install 'robot-rl[export]'") from None
    actor = ArrayActor(policy, spec).eval().cpu()
    example = tuple(_example(spec, name, 2) for name in actor.input_names)
    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {name: {0: "batch"} for name in actor.input_names} | {"action": {0: "batch"}}
    # The TorchScript exporter handles the var-positional inputs and dynamic batch in one call, with no
    # console noise; torch marks it deprecated in favour of the torch.export one.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(actor, example, str(path), input_names=actor.input_names, output_names=["action"],
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    return actor.input_names


def _example(spec: EnvSpec, name: str, n: int) -> torch.Tensor:
    s = spec.observation[name]
    if name.startswith("image."):
        return torch.randint(0, 256, (n, *s.shape), dtype=torch.uint8)
    return torch.randn(n, *s.shape)


def check_onnx(path: Path, policy: nn.Module, spec: EnvSpec, obs: dict[str, np.ndarray],
               batch_sizes: tuple[int, ...] = (1, 7, 64)) -> OnnxCheck:
    """Run ``path`` in onnxruntime on ``obs`` (split into several batch sizes) and compare with torch."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError("checking the ONNX export needs onnxruntime: pip install 'robot-rl[export]'") from None
    actor = ArrayActor(policy, spec).eval().cpu()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    n = len(next(iter(obs.values())))
    worst, start, i = 0.0, 0, 0
    while start < n:
        b = batch_sizes[i % len(batch_sizes)]
        feed = {k: np.ascontiguousarray(obs[k][start:start + b]) for k in actor.input_names}
        (got,) = session.run(["action"], feed)
        with torch.no_grad():
            want = actor(*(torch.from_numpy(feed[k]) for k in actor.input_names)).numpy()
        worst = max(worst, float(np.abs(got - want).max()))
        start, i = start + b, i + 1
    return OnnxCheck(n, worst, batch_sizes)
