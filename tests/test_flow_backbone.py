"""Pretrained camera backbones from a local weights file: ResNet-18 (torchvision names) and the conv stack."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.policies.flow.backbone import BackboneWeightsError, ResNet18
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.sft import load_flow_policy, save_flow_policy

TINY = dict(hidden=16, expert_layers=1, image_features=8, cnn_channels=4, cnn_layers=2, state_features=8,
            lang_features=8, horizon=2, num_steps=2)


def two_camera_spec(size: int = 32) -> EnvSpec:
    img = ArraySpec((size, size, 3), "uint8", low=0, high=255)
    return EnvSpec({"image.front": img, "image.wrist": img, "state": ArraySpec((3,), "float32")},
                   ArraySpec((2,), "float32", low=-1.0, high=1.0))


def test_resnet18_loads_a_saved_state_dict_into_every_camera(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = ResNet18()
    state = source.state_dict()
    # A torchvision-style file: classifier head included, wrapped in a checkpoint with DataParallel prefixes.
    saved = {f"module.{k}": v for k, v in state.items()}
    saved["module.fc.weight"], saved["module.fc.bias"] = torch.zeros(1000, 512), torch.zeros(1000)
    torch.save({"state_dict": saved}, tmp_path / "resnet18.pth")
    cfg = FlowVLAConfig(camera_encoder="resnet18", pretrained_path=str(tmp_path / "resnet18.pth"),
                        freeze_backbone=True, **TINY)
    policy = FlowVLAPolicy(two_camera_spec(), cfg)
    backbones = policy.encoder.backbones()
    assert len(backbones) == 2
    for b in backbones:
        for k, v in b.state_dict().items():
            torch.testing.assert_close(v, state[k], rtol=0, atol=0)
        assert not any(p.requires_grad for p in b.parameters())
    policy.train()
    assert all(not b.training for b in backbones)  # frozen BatchNorm statistics
    obs = {"image.front": torch.randint(0, 255, (3, 32, 32, 3), dtype=torch.uint8),
           "image.wrist": torch.randint(0, 255, (3, 32, 32, 3), dtype=torch.uint8), "state": torch.zeros(3, 3)}
    chunk, _ = policy.act(obs, deterministic=True)
    assert chunk.shape == (3, 2, 2)
    # Checkpoints carry the backbone: loading one needs no weights file any more.
    save_flow_policy(tmp_path / "run", policy, two_camera_spec(), 1)
    (tmp_path / "resnet18.pth").unlink()
    loaded, _ = load_flow_policy(tmp_path / "run")
    torch.testing.assert_close(loaded.act(obs, deterministic=True)[0], chunk)


def test_spatial_softmax_conv_stack_loads_from_a_file_too(tmp_path: Path) -> None:
    donor = FlowVLAPolicy(two_camera_spec(), FlowVLAConfig(**TINY))
    convs = donor.encoder.backbones()[0]
    torch.save(convs.state_dict(), tmp_path / "convs.pt")
    policy = FlowVLAPolicy(two_camera_spec(), FlowVLAConfig(pretrained_path=str(tmp_path / "convs.pt"), **TINY))
    for b in policy.encoder.backbones():
        for k, v in b.state_dict().items():
            torch.testing.assert_close(v, convs.state_dict()[k])


def test_missing_file_and_mismatched_keys_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        FlowVLAPolicy(two_camera_spec(), FlowVLAConfig(camera_encoder="resnet18",
                                                       pretrained_path=str(tmp_path / "none.pth"), **TINY))
    state = ResNet18().state_dict()
    del state["layer4.1.bn2.weight"]
    state["head.extra"] = torch.zeros(3)
    state["conv1.weight"] = torch.zeros(64, 1, 7, 7)
    torch.save(state, tmp_path / "bad.pth")
    with pytest.raises(BackboneWeightsError, match=r"missing \['layer4.1.bn2.weight'\].*head.extra.*conv1.weight"):
        FlowVLAPolicy(two_camera_spec(), FlowVLAConfig(camera_encoder="resnet18",
                                                       pretrained_path=str(tmp_path / "bad.pth"), **TINY))
    torch.save([1, 2], tmp_path / "list.pth")
    with pytest.raises(BackboneWeightsError, match="no state dict"):
        FlowVLAPolicy(two_camera_spec(), FlowVLAConfig(camera_encoder="resnet18",
                                                       pretrained_path=str(tmp_path / "list.pth"), **TINY))
    with pytest.raises(ValueError, match="pretrained_path needs"):
        FlowVLAConfig(camera_encoder="conv", pretrained_path="x.pt").validate()
