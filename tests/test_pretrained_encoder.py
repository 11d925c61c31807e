"""Pretrained ResNet trunks: torchvision's names and shapes, load errors, SAC's shared frozen trunk, the classifier.

The torchvision and transformers checks run where those packages are installed (the LeRobot environment);
the rest needs CPU torch only.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch

from robot_rl.cli import main
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.modules.resnet import BackboneWeightsError, ResNet, build_resnet, load_backbone
from robot_rl.policies.sac import SACAlgorithm, SACConfig
from robot_rl.rewards.classifier import ClassifierConfig, SuccessClassifier, train_classifier
from robot_rl.rewards.demos import reach_pixel_demos

SPEC = EnvSpec({"state": ArraySpec((3,)), "image.front": ArraySpec((32, 32, 3), "uint8"),
                "image.wrist": ArraySpec((40, 32, 3), "uint8")}, ArraySpec((2,), "float32", -1.0, 1.0))
TINY = {"actor_hidden": (32,), "critic_hidden": (32,), "batch_size": 8, "image_features": 16,
        "image_encoder": "resnet10", "image_spatial_embeddings": 4}


def _bn(prefix: str) -> list[str]:
    return [f"{prefix}.{n}" for n in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]


def torchvision_keys(blocks: int) -> list[str]:
    """``torchvision.models.resnet`` state-dict keys without ``fc``, in order, written out from its layout."""
    keys = ["conv1.weight", *_bn("bn1")]
    for stage in range(1, 5):
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            keys += [f"{p}.conv1.weight", *_bn(f"{p}.bn1"), f"{p}.conv2.weight", *_bn(f"{p}.bn2")]
            if stage > 1 and b == 0:
                keys += [f"{p}.downsample.0.weight", *_bn(f"{p}.downsample.1")]
    return keys


def randomised(arch: str, seed: int) -> ResNet:
    """A trunk with random weights *and* BatchNorm statistics (so a load that skipped them would show)."""
    torch.manual_seed(seed)
    net = build_resnet(arch)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.normal_()
    return net


def random_batch(spec: EnvSpec, n: int, seed: int) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)

    def obs() -> dict[str, torch.Tensor]:
        return {k: (torch.randint(0, 256, (n, *s.shape), generator=g, dtype=torch.uint8) if s.dtype == "uint8"
                    else torch.randn(n, *s.shape, generator=g)) for k, s in spec.observation.items()}

    return TransitionBatch(obs=obs(), action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                           terminated=torch.rand(n, generator=g) < 0.2, truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs=obs(), intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n))


# ---- the trunk ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "blocks", "params"), [("resnet10", 1, 4_905_792), ("resnet18", 2, 11_176_512)])
def test_resnet_has_torchvisions_names_and_the_documented_shapes(arch: str, blocks: int, params: int) -> None:
    net = build_resnet(arch).eval()
    assert list(net.state_dict()) == torchvision_keys(blocks)
    assert sum(p.numel() for p in net.parameters()) == params  # torchvision's resnet18 minus fc: 11,176,512
    with torch.no_grad():
        out = net(torch.zeros(2, 3, 96, 70))
    assert out.shape == (2, 512, *ResNet.map_size(96, 70)) == (2, 512, 3, 3)
    with pytest.raises(ValueError, match=r"known: \['resnet10', 'resnet18'\]"):
        build_resnet("resnet34")


def test_torchvision_resnet18_state_dict_loads_and_computes_the_same_maps(tmp_path: Path) -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    tv = torchvision.models.resnet18().eval()
    for m in tv.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    torch.save(tv.state_dict(), tmp_path / "r18.pt")  # what the docs tell users to run: fc included
    ours = load_backbone(tmp_path / "r18.pt", "resnet18").eval()
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), torch.nn.Sequential(*list(tv.children())[:-2])(x), rtol=0, atol=0)
    ten = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1])
    assert {k: v.shape for k, v in ten.state_dict().items() if not k.startswith("fc.")} == \
        {k: v.shape for k, v in build_resnet("resnet10").state_dict().items()}


def _transformers_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our (torchvision) names → a ``transformers`` ResNetForImageClassification's, as its state dict has them."""
    out = {}
    for k, v in state.items():
        parts = k.split(".")
        if parts[0] in ("conv1", "bn1"):
            kind = "convolution" if parts[0] == "conv1" else "normalization"
            out[f"resnet.embedder.embedder.{kind}.{'.'.join(parts[1:])}"] = v
            continue
        stage, block, module = int(parts[0][5:]) - 1, parts[1], parts[2]
        if module == "downsample":
            kind, leaf = ("convolution" if parts[3] == "0" else "normalization"), parts[4:]
            out[f"resnet.encoder.stages.{stage}.layers.{block}.shortcut.{kind}.{'.'.join(leaf)}"] = v
        else:
            layer = "0" if module[-1] == "1" else "1"
            kind = "convolution" if module.startswith("conv") else "normalization"
            out[f"resnet.encoder.stages.{stage}.layers.{block}.layer.{layer}.{kind}.{'.'.join(parts[3:])}"] = v
    return out | {"classifier.1.weight": torch.zeros(10, 512), "classifier.1.bias": torch.zeros(10)}


def test_a_transformers_resnet_state_dict_is_renamed_on_load(tmp_path: Path) -> None:
    source = randomised("resnet10", 1)
    torch.save(_transformers_names(source.state_dict()), tmp_path / "hf.pt")
    loaded = load_backbone(tmp_path / "hf.pt", "resnet10")
    for k, v in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_the_rename_matches_transformers_own_resnet(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(depths=[1, 1, 1, 1], hidden_sizes=[64, 128, 256, 512], layer_type="basic",
                                    embedding_size=64)
    hf = transformers.ResNetModel(cfg).eval()
    torch.save(hf.state_dict(), tmp_path / "hf.pt")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(load_backbone(tmp_path / "hf.pt", "resnet10").eval()(x),
                                   hf(pixel_values=x).last_hidden_state, rtol=0, atol=0)


def test_load_errors_name_the_file_the_keys_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_backbone(tmp_path / "none.pt", "resnet18")
    torch.save(build_resnet("resnet18").state_dict(), tmp_path / "r18.pt")
    with pytest.raises(BackboneWeightsError, match=r"\[2, 2, 2, 2\] blocks per stage \(resnet18\), not resnet10.*"
                                                   r"choose resnet18"):
        load_backbone(tmp_path / "r18.pt", "resnet10")
    # SAC's actor weights hold the trunk under a prefix: the error says so, and lists the keys.
    actor = SACConfig(**TINY).build_policy(SPEC, "cpu")
    torch.save(actor.state_dict(), tmp_path / "actor.pt")
    with pytest.raises(BackboneWeightsError, match=r"missing \['bn1.bias'.*unexpected \['action_bias'.*"
                                                   r"trunk under 'backbone.resnet.'"):
        load_backbone(tmp_path / "actor.pt", "resnet10")
    # The small CNN's file (the classifier's default --backbone) is not a ResNet.
    from robot_rl.rewards.nets import CameraEncoder

    torch.save(CameraEncoder({"image.top": (16, 16, 3)}).state_dict(), tmp_path / "cnn.pt")
    with pytest.raises(BackboneWeightsError, match="small-CNN encoder"):
        load_backbone(tmp_path / "cnn.pt", "resnet10")
    state = build_resnet("resnet10").state_dict()
    state["conv1.weight"] = torch.zeros(64, 1, 7, 7)  # a grey-image trunk
    torch.save(state, tmp_path / "grey.pt")
    with pytest.raises(BackboneWeightsError, match=r"shape mismatch \['conv1.weight'\]"):
        load_backbone(tmp_path / "grey.pt", "resnet10")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(BackboneWeightsError, match="no state dict"):
        load_backbone(tmp_path / "list.pt", "resnet10")


# ---- SAC ---------------------------------------------------------------------------------------------------------


def test_sac_config_refuses_impossible_encoder_settings() -> None:
    with pytest.raises(ValueError, match="image_backbone needs image_encoder"):
        SACConfig(image_backbone="r18.pt").build(SPEC, "cpu", 0)
    with pytest.raises(ValueError, match=r"image_encoder must be one of \['cnn', 'resnet10', 'resnet18'\]"):
        SACConfig(image_encoder="vit").build(SPEC, "cpu", 0)  # type: ignore[arg-type]
    grey = EnvSpec({"image.top": ArraySpec((32, 32, 1), "uint8")}, SPEC.action)
    with pytest.raises(ValueError, match="needs RGB images"):
        SACConfig(**TINY).build(grey, "cpu", 0)


def test_sac_shares_one_frozen_trunk_computed_once_per_update_and_trains_the_heads() -> None:
    algo = SACConfig(**TINY).build(SPEC, "cpu", 0)
    trunk = algo.actor.backbone
    assert trunk is not None
    # One trunk: the critic and its target have their own heads but no ResNet weights of their own.
    assert algo.critic.encoder is not None and algo.critic_target.encoder is not None
    assert not [k for k in [*algo.critic.state_dict(), *algo.critic_target.state_dict()] if "resnet" in k]
    optimised = {id(p) for o in (algo.actor_optim, algo.critic_optim) for g in o.param_groups for p in g["params"]}
    assert all(not p.requires_grad and id(p) not in optimised for p in trunk.parameters())
    algo.actor.train()
    assert not any(m.training for m in trunk.resnet.modules())  # BatchNorm on its stored statistics
    calls = []
    trunk.resnet.register_forward_hook(lambda *_: calls.append(1))
    frozen = {k: v.clone() for k, v in trunk.state_dict().items()}

    def head(module: torch.nn.Module) -> torch.Tensor:
        return module.cnn.cameras["image_front"].kernel.detach().clone()

    actor0, critic0, target0 = head(algo.actor.encoder), head(algo.critic.encoder), head(algo.critic_target.encoder)
    stats = algo.update(random_batch(SPEC, 8, 0))
    assert all(math.isfinite(v) for v in stats.values())
    assert len(calls) == 4  # obs and next_obs of 2 cameras, for actor, critic and target critic together
    actor1, critic1, target1 = head(algo.actor.encoder), head(algo.critic.encoder), head(algo.critic_target.encoder)
    assert not torch.equal(actor1, actor0) and not torch.equal(critic1, critic0)
    torch.testing.assert_close(target1, target0 + algo.cfg.tau * (critic1 - target0))
    for i in range(1, 3):
        algo.update(random_batch(SPEC, 8, i))
    assert all(torch.equal(v, frozen[k]) for k, v in trunk.state_dict().items())  # BatchNorm statistics too
    assert all(p.grad is None for p in trunk.parameters())


def test_an_unfrozen_trunk_is_fine_tuned_by_the_critic_only() -> None:
    algo = SACConfig(**TINY, freeze_backbone=False).build(SPEC, "cpu", 0)
    trunk = algo.actor.backbone
    assert trunk is not None
    critic_params = {id(p) for g in algo.critic_optim.param_groups for p in g["params"]}
    actor_params = {id(p) for g in algo.actor_optim.param_groups for p in g["params"]}
    assert all(id(p) in critic_params and id(p) not in actor_params for p in trunk.parameters())
    conv, mean = trunk.resnet.conv1.weight.detach().clone(), trunk.resnet.bn1.running_mean.clone()
    published = algo.actor_weights()["backbone.resnet.conv1.weight"]
    algo.update(random_batch(SPEC, 8, 0))
    assert torch.equal(published, conv)  # a trunk that trains is published as a copy, like the rest
    assert not torch.equal(trunk.resnet.conv1.weight, conv) and torch.equal(trunk.resnet.bn1.running_mean, mean)


def test_bf16_autocast_keeps_the_trunk_fixed_and_in_float32_on_a_cpu() -> None:
    # On a CPU the trunk runs in float32 under bf16 autocast: oneDNN's bf16 convolution gave NaN maps for some
    # trunks built after others in one process (3 of 40 in a loop here, and this test in CI's order), the heads
    # still run in bf16.
    algo = SACConfig(**TINY, amp_bf16=True).build(SPEC, "cpu", 0)
    assert algo.actor.backbone is not None
    conv = algo.actor.backbone.resnet.conv1.weight.clone()
    batch = random_batch(SPEC, 8, 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        maps = algo.actor.backbone({k: batch.obs[k] for k in ("image.front", "image.wrist")})
    assert maps["image.front"].dtype == torch.float32
    stats = algo.update(batch)
    assert all(math.isfinite(v) for v in stats.values())
    assert torch.equal(algo.actor.backbone.resnet.conv1.weight, conv) and conv.dtype == torch.float32


def test_sac_checkpoint_holds_the_trunk_once_and_round_trips(tmp_path: Path) -> None:
    torch.save(randomised("resnet10", 2).state_dict(), tmp_path / "r10.pt")
    cfg = SACConfig(**TINY, image_backbone=str(tmp_path / "r10.pt"), normalize_obs=True)
    algo = cfg.build(SPEC, "cpu", 0)
    assert algo.actor.backbone is not None
    for k, v in randomised("resnet10", 2).state_dict().items():
        assert torch.equal(algo.actor.backbone.resnet.state_dict()[k], v), k
    algo.update(random_batch(SPEC, 8, 0))
    state = algo.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    trunk_bytes = sum(v.numel() * v.element_size() for v in algo.actor.backbone.state_dict().values())
    assert trunk_bytes < buf.tell() < 1.2 * trunk_bytes  # the trunk is stored once (the heads are small here)
    # What the run loop checkpoints: the learner's state and the actor weights, the frozen trunk still once.
    both = io.BytesIO()
    torch.save({"algo": state, "actor_weights": algo.actor_weights()}, both)
    assert both.tell() < 1.2 * trunk_bytes
    # The targets share the live normaliser rather than a stale copy of it.
    assert algo.critic_target.encoder.normalizer is algo.actor.encoder.normalizer is not None
    (tmp_path / "r10.pt").unlink()  # a resume needs no weights file: the checkpoint holds the trunk
    other = SACConfig(**TINY, normalize_obs=True).build(SPEC, "cpu", seed=1)
    other.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    batch = random_batch(SPEC, 8, 1)
    assert algo.update(batch) == other.update(batch)
    for name in ("actor", "critic", "critic_target"):
        a, b = getattr(algo, name).state_dict(), getattr(other, name).state_dict()
        assert all(torch.equal(v, b[k]) for k, v in a.items()), name


def test_actor_weights_carry_the_trunk_and_load_into_a_policy_built_without_the_file(tmp_path: Path) -> None:
    algo = SACConfig(**TINY).build(SPEC, "cpu", 0)
    algo.update(random_batch(SPEC, 8, 0))
    weights = algo.actor_weights()
    assert any(k.startswith("backbone.resnet.layer4.") for k in weights)
    # An actor process builds the policy from the config; the file named there need not exist on its machine.
    policy = SACConfig(**TINY, image_backbone=str(tmp_path / "absent.pt")).build_policy(SPEC, "cpu", seed=5)
    policy.load_actor_weights(weights)
    obs = random_batch(SPEC, 3, 7).obs
    torch.testing.assert_close(policy.deterministic_action(obs), algo.actor.deterministic_action(obs))
    assert policy.mlp_parts() is None  # the C exporter's MLP path does not apply to pixel policies


def test_a_resnet18_actors_weights_pass_the_wire_codec_and_onnx_export_traces_the_trunk(tmp_path: Path) -> None:
    from robot_rl.transport.codec import decode, encode
    from robot_rl.transport.zmq_common import weights_arrays

    policy = SACConfig(**{**TINY, "image_encoder": "resnet18"}).build_policy(SPEC, "cpu")
    weights = policy.state_dict()
    message = decode(encode("weights", "s", 1, weights_arrays(weights)))  # default limits: 256 arrays, 512 MB each
    assert len(message.arrays) == len(weights) < 256
    ort = pytest.importorskip("onnxruntime")
    from robot_rl.export import export_actor

    policy = SACConfig(**TINY).build_policy(SPEC, "cpu")
    report = export_actor(policy, SPEC, "onnx", tmp_path, name="r10", num_random=4)
    assert report.onnx is not None and report.onnx["max_abs_err"] <= 1e-4
    assert ort.InferenceSession(str(tmp_path / "r10.onnx")) is not None


# ---- the success classifier ---------------------------------------------------------------------------------------


def test_classifier_with_a_frozen_resnet_trunk_trains_saves_and_loads(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    eps = reach_pixel_demos(8, image_size=32, wrist_size=24, seed=1)
    torch.save(randomised("resnet10", 3).state_dict(), tmp_path / "r10.pt")
    cfg = ClassifierConfig(steps=3, features=8, encoder="resnet10", backbone=tmp_path / "r10.pt")
    rep = train_classifier(eps, tmp_path / "clf", cfg)
    trunk = rep.model.encoder.trunk
    assert all(torch.equal(trunk.resnet.state_dict()[k], v) for k, v in randomised("resnet10", 3).state_dict().items())
    assert all(not p.requires_grad for p in trunk.parameters())
    assert any(p.requires_grad for p in rep.model.encoder.heads.parameters())
    assert json.loads((tmp_path / "clf" / "meta.json").read_text())["encoder"] == "resnet10"
    (tmp_path / "r10.pt").unlink()  # the model directory holds the trunk
    loaded = SuccessClassifier.load(tmp_path / "clf")
    obs = {k: torch.from_numpy(v[:5]) for k, v in eps[0].obs.items()}
    assert torch.equal(loaded.probability(obs), rep.model.probability(obs))

    store = EpisodeStore.create(tmp_path / "demos", spec_of(eps[0]), fps=20, task=eps[0].task)
    for ep in eps:
        store.append(ep)
    torch.save(build_resnet("resnet10").state_dict(), tmp_path / "r10.pt")
    args = ["reward", "train-classifier", str(tmp_path / "demos"), "--out", str(tmp_path / "cli"), "--steps", "2",
            "--encoder", "resnet10", "--backbone", str(tmp_path / "r10.pt")]
    assert main(args) == 0
    assert SuccessClassifier.load(tmp_path / "cli").encoder_kind == "resnet10"
    capsys.readouterr()
    assert main([*args[:-3], "resnet18", "--backbone", str(tmp_path / "r10.pt")]) == 2
    assert "choose resnet10" in capsys.readouterr().err


def test_small_cnn_stays_the_default_everywhere() -> None:
    assert SACConfig().image_encoder == "cnn" and ClassifierConfig().encoder == "cnn"
    algo = SACConfig(actor_hidden=(16,), critic_hidden=(16,), image_channels=4, image_features=8).build(SPEC, "cpu", 0)
    assert algo.actor.backbone is None and algo.critic.encoder is None and algo.encoder_target is not None
    assert isinstance(algo, SACAlgorithm)


# ---- it learns -------------------------------------------------------------------------------------------------


def _scenes(n: int, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Grey images with a red square in the left or the right half; the side as −1 / +1."""
    side = torch.randint(0, 2, (n,), generator=g)
    images = torch.full((n, size, size, 3), 40, dtype=torch.uint8)
    for i in range(n):
        y = int(torch.randint(4, size - 16, (1,), generator=g))
        x = int(torch.randint(2, size // 2 - 14, (1,), generator=g)) + (size // 2 if side[i] else 0)
        images[i, y:y + 12, x:x + 12] = torch.tensor([230, 60, 60], dtype=torch.uint8)
    return images, side.float() * 2 - 1


@pytest.mark.slow
def test_sac_on_a_frozen_random_resnet10_learns_where_the_object_is() -> None:
    # A one-step task from pixels (reward = side · action): the trunk is random and fixed, so whatever is learnt
    # is learnt by the heads through the shared maps: the critic's head by the TD loss, the actor's by L_π.
    size, g = 48, torch.Generator().manual_seed(0)
    spec = EnvSpec({"image.top": ArraySpec((size, size, 3), "uint8")}, ArraySpec((1,), "float32", -1.0, 1.0))
    images, side = _scenes(1024, size, g)
    action = torch.rand(1024, 1, generator=g) * 2 - 1
    algo = SACConfig(image_encoder="resnet10", actor_hidden=(64,), critic_hidden=(64,), batch_size=32,
                     image_features=32, image_spatial_embeddings=4, image_shift_pad=2, init_temperature=0.05,
                     critic_lr=1e-3, actor_lr=1e-3).build(spec, "cpu", 0)
    test_images, test_side = _scenes(256, size, torch.Generator().manual_seed(1))
    done, no, version = torch.ones(32, dtype=torch.bool), torch.zeros(32, dtype=torch.bool), torch.zeros(32).long()
    accuracy, updates = 0.0, 0
    while accuracy < 0.95 and updates < 200:  # 125 here (the critic tells the sides apart first)
        for _ in range(25):
            i = torch.randint(0, 1024, (32,), generator=g)
            obs = {"image.top": images[i]}
            algo.update(TransitionBatch(obs=obs, action=action[i], reward=side[i] * action[i, 0], terminated=done,
                                        truncated=no, next_obs=obs, intervened=no, policy_version=version,
                                        env_index=torch.arange(32)))
        updates += 25
        chosen = algo.actor.deterministic_action({"image.top": test_images})[:, 0].sign()
        accuracy = float((chosen == test_side).float().mean())
    assert accuracy >= 0.95, f"{accuracy:.2f} of held-out images answered right after {updates} updates"
