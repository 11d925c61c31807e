"""Observation dict → one flat feature vector, for MLP heads.

``state`` passes through (optionally normalised by running statistics); each ``image.<camera>`` goes
through a :class:`~robot_rl.policies.modules.cnn.MultiCameraEncoder`, or, given ``map_shapes``, arrives
already turned into a feature map by a shared pretrained trunk
(:class:`~robot_rl.policies.modules.pretrained.CameraTrunk`) and goes through this encoder's own
:class:`~robot_rl.policies.modules.pretrained.SpatialEmbeddingCameras` head. Output:
``[N, state_dim + cameras · image_features]`` (image features first, then state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.policies.modules.cnn import MultiCameraEncoder
from robot_rl.policies.modules.normalizer import RunningNormalizer
from robot_rl.policies.modules.pretrained import SpatialEmbeddingCameras


class ObsEncoder(nn.Module):
    """Encode an observation dict to ``[N, out_dim]`` features."""

    def __init__(self, spec: EnvSpec, normalize_state: bool = False, image_features: int = 50,
                 channels: int = 32, num_layers: int = 4, map_shapes: Mapping[str, Sequence[int]] | None = None,
                 spatial_embeddings: int = 8, normalizer: RunningNormalizer | None = None, conv_stride: int = 1
                 ) -> None:
        """Build the encoder for ``spec``.

        ``map_shapes``: ``{camera: (C, h, w)}`` of a trunk's feature maps (cameras then arrive as maps);
        ``normalizer``: share another encoder's running statistics instead of keeping its own; ``conv_stride``:
        the CNN's stride after its first layer (:class:`~robot_rl.policies.modules.cnn.ConvEncoder`).
        """
        super().__init__()
        unsupported = [k for k in spec.observation if k != "state" and not k.startswith("image.")]
        if unsupported:
            raise ValueError(f"ObsEncoder handles 'state' and 'image.<camera>' keys, not {unsupported}")
        state = spec.observation.get("state")
        if state is not None and len(state.shape) != 1:
            raise ValueError(f"'state' must be a vector [D], got shape {list(state.shape)}")
        self.state_dim = state.shape[0] if state is not None else 0
        if normalizer is None and normalize_state and self.state_dim:
            normalizer = RunningNormalizer(self.state_dim)
        self.normalizer = normalizer
        image_shapes = {k: spec.observation[k].shape for k in spec.image_keys}
        self.cnn: MultiCameraEncoder | SpatialEmbeddingCameras | None = None
        if image_shapes and map_shapes is not None:
            self.cnn = SpatialEmbeddingCameras(map_shapes, image_features, spatial_embeddings)
        elif image_shapes:
            self.cnn = MultiCameraEncoder(image_shapes, image_features, channels, num_layers, conv_stride)
        self.out_dim = self.state_dim + (self.cnn.out_dim if self.cnn is not None else 0)
        if self.out_dim == 0:
            raise ValueError("the observation spec has neither 'state' nor images")

    @property
    def image_keys(self) -> list[str]:
        """Camera keys this encoder reads (empty for state-only specs)."""
        return self.cnn.keys if self.cnn is not None else []

    @torch.no_grad()
    def update_normalizer(self, obs: Obs) -> None:
        """Fold ``obs["state"]`` into the running statistics (no-op without a normaliser)."""
        if self.normalizer is not None:
            self.normalizer.update(obs["state"])

    def forward(self, obs: Obs) -> torch.Tensor:
        """``{key: [N, ...]}`` → ``[N, out_dim]`` float32 (cameras as images, or as maps with ``map_shapes``)."""
        parts = []
        if self.cnn is not None:
            parts.append(self.cnn({k: obs[k] for k in self.cnn.keys}))
        if self.state_dim:
            state = obs["state"].float()
            parts.append(self.normalizer(state) if self.normalizer is not None else state)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
