"""Policy export: C (float32, int8) against torch for many architectures and a trained run, ONNX parity,
Cortex-M sizes (when arm-none-eabi-gcc is installed), and clear errors for what C cannot express."""

import json
import math
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from robot_rl.cli import main
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.export import ExportVerificationError, UnsupportedArchitectureError, export_actor, extract_mlp, generate_c
from robot_rl.export.graph import DenseLayer, MLPGraph
from robot_rl.export.quantize import int8_error_bound, quantize_rows
from robot_rl.export.run_export import random_observations, torch_actions
from robot_rl.export.toolchain import arm_available, build_host_harness, cross_compile, write_sources
from robot_rl.policies.ppo import PPOPolicy
from robot_rl.policies.sac import SACConfig, SACPolicy

N_OBS = 1000


def _spec(obs_dim, act_shape=(2,), low=-1.0, high=1.0):
    return EnvSpec({"state": ArraySpec((obs_dim,))}, ArraySpec(act_shape, low=low, high=high))


def _perturb(policy, seed):
    """Non-trivial normaliser statistics (updates only fill them during training)."""
    g = torch.Generator().manual_seed(seed)
    for m in policy.modules():
        if hasattr(m, "update") and hasattr(m, "var"):
            m.update(torch.randn(256, m.mean.numel(), generator=g) * 3.0 + 2.0)
    return policy.eval()


# (algo, obs_dim, hidden, activation, normalise, action shape, bounds)
ARCHS = [
    ("sac", 12, (64, 64), "relu", True, (2,), (-1.0, 1.0)),
    ("sac", 3, (17,), "relu", False, (4,), (-2.5, 0.5)),
    ("sac", 30, (48, 32, 24), "relu", True, (3, 2), (-1.0, 1.0)),  # action chunk [H, A]
    ("ppo", 9, (32, 32, 32), "elu", True, (3,), (-1.0, 1.0)),
    ("ppo", 21, (40, 20), "tanh", False, (2,), (None, None)),  # unbounded: no clamp
    ("ppo", 6, (64, 16), "silu", True, (5,), (-0.3, 0.3)),
    ("ppo", 5, (8,), "gelu", True, (1,), (-1.0, 1.0)),
]


def _policy(algo, obs_dim, hidden, act, norm, act_shape, bounds, seed):
    torch.manual_seed(seed)
    spec = _spec(obs_dim, act_shape, *bounds)
    if algo == "sac":
        pol = SACPolicy(spec, SACConfig(actor_hidden=hidden, normalize_obs=norm))
    else:
        pol = PPOPolicy(spec, hidden, act, 1.0, norm)
    return _perturb(pol, seed), spec


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"{a[0]}-{a[1]}-{'x'.join(map(str, a[2]))}-{a[3]}")
@pytest.mark.integration
def test_c_matches_torch_for_random_architectures(arch, tmp_path):
    policy, spec = _policy(*arch, seed=len(tmp_path.name))
    obs = random_observations(spec, policy, N_OBS, seed=1)
    want = torch_actions(policy, obs)
    graph = extract_mlp(policy)
    assert graph.act_dim == math.prod(arch[5])
    np.testing.assert_allclose(graph.forward(obs["state"]), want, atol=1e-5)  # the extraction itself
    for variant in ("float32", "int8"):
        src = generate_c(graph, "pol", variant)
        got = build_host_harness(src, tmp_path / variant, graph.obs_dim, graph.act_dim).forward(obs["state"])
        err = np.abs(got.astype(np.float64) - want)
        if variant == "float32":
            assert err.max() <= 1e-5, err.max()
        else:
            bound = int8_error_bound(graph, obs["state"])
            assert (err <= bound + 1e-5).all(), (err / (bound + 1e-5)).max()
            assert err.max() > 0  # int8 really is quantised
        assert np.isfinite(got).all()


@pytest.mark.integration
def test_c_forward_by_hand(tmp_path):
    # obs (1, 2) → normalised ((1−1)/1, (2−0)/0.5 = 4 → clipped to 3) = (0, 3)
    # hidden = relu([[1, −1], [0.5, 2]]·(0, 3) + (0.25, −1)) = relu(−2.75, 5) = (0, 5)
    # out = tanh(0.1·0 + 0.2·5 − 0.5)·2 + 1 = tanh(0.5)·2 + 1
    graph = MLPGraph(2, [DenseLayer(np.array([[1, -1], [0.5, 2]], np.float32), np.array([0.25, -1], np.float32),
                                    "relu"),
                         DenseLayer(np.array([[0.1, 0.2]], np.float32), np.array([-0.5], np.float32), "identity")],
                     "tanh_scale", np.array([2.0], np.float32), np.array([1.0], np.float32),
                     norm_mean=np.array([1.0, 0.0], np.float32), norm_std=np.array([1.0, 0.5], np.float32),
                     norm_clip=3.0)
    got = build_host_harness(generate_c(graph, "hand", "float32"), tmp_path, 2, 1).forward(np.array([[1.0, 2.0]]))
    assert got[0, 0] == pytest.approx(math.tanh(0.5) * 2 + 1, abs=1e-6)


def test_int8_quantisation_per_channel():
    w = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [10.0, 5.0, -2.5]], np.float32)
    q, scale = quantize_rows(w)
    assert q.dtype == np.int8 and q[0].tolist() == [64, -127, 32] and q[2].tolist() == [127, 64, -32]
    assert scale.tolist() == pytest.approx([1 / 127, 1.0, 10 / 127])
    assert (np.abs(w - q * scale[:, None]) <= scale[:, None] / 2 + 1e-7).all()


def test_generated_c_is_dependency_free_and_const():
    policy, _ = _policy("ppo", 4, (8, 8), "elu", True, (2,), (-1.0, 1.0), seed=0)
    for variant in ("float32", "int8"):
        src = generate_c(extract_mlp(policy), "ctl", variant)
        includes = [line for line in src.source.splitlines() if line.startswith("#include")]
        assert includes == ['#include "ctl.h"', "#include <math.h>"]
        assert "malloc" not in src.source and "void ctl_forward(const float *obs, float *action);" in src.header
        assert "static const float ctl_b0[8]" in src.source
        assert ("static const signed char ctl_w0[32]" if variant == "int8" else "static const float ctl_w0[32]") \
            in src.source
    with pytest.raises(ValueError, match="C identifier"):
        generate_c(extract_mlp(policy), "9lives")


@pytest.mark.integration
def test_verification_catches_a_wrong_export(tmp_path):
    policy, spec = _policy("sac", 6, (16,), "relu", True, (2,), (-1.0, 1.0), seed=3)
    graph = extract_mlp(policy)
    graph.layers[-1].bias = graph.layers[-1].bias + 1e-3  # what a wrong extraction would look like
    with pytest.raises(ExportVerificationError, match="float32 C differs"):
        export_actor(policy, spec, "c", tmp_path, variants=("float32",), num_random=100, graph=graph)


@pytest.mark.parametrize("arch", ARCHS[:2] + ARCHS[3:5], ids=lambda a: f"{a[0]}-{a[1]}")
def test_export_reads_the_policys_own_deterministic_action(arch):
    from robot_rl.core.algorithm import DeterministicActor, MLPActor

    policy, spec = _policy(*arch, seed=2)
    assert isinstance(policy, DeterministicActor) and isinstance(policy, MLPActor)
    obs = {k: torch.from_numpy(v) for k, v in random_observations(spec, policy, 64, seed=3).items()}
    with torch.no_grad():
        assert torch.equal(policy.deterministic_action(obs), policy.act(obs, deterministic=True)[0])


# ---- unsupported architectures --------------------------------------------------------------------


def test_c_export_rejects_cnn_and_recurrent_policies(tmp_path):
    spec = EnvSpec({"state": ArraySpec((4,)), "image.front": ArraySpec((24, 24, 3), "uint8")},
                   ArraySpec((2,), low=-1.0, high=1.0))
    cnn = SACPolicy(spec, SACConfig(actor_hidden=(16,), image_channels=4, image_features=8))
    cnn.encoder.cnn.cameras["image_front"].convs.insert(1, nn.BatchNorm2d(4))  # pixel C takes conv chains, not BN
    with pytest.raises(UnsupportedArchitectureError) as e:
        export_actor(cnn, spec, "c", tmp_path, num_random=10)
    msg = str(e.value)
    assert "BatchNorm2d" in msg and "MLP actors" in msg and "Conv2d" in msg and "--format onnx" in msg
    with pytest.raises(UnsupportedArchitectureError, match="CNN image encoder"):
        extract_mlp(cnn)

    class RecurrentPolicy(SACPolicy):
        def __init__(self):
            super().__init__(_spec(4), SACConfig(actor_hidden=(8,)))
            self.memory = nn.GRU(4, 8)

    with pytest.raises(UnsupportedArchitectureError, match=r"recurrent layer \(GRU.*--format onnx"):
        extract_mlp(RecurrentPolicy())
    layer_norm = _policy("sac", 4, (8,), "relu", False, (2,), (-1.0, 1.0), seed=0)[0]
    layer_norm.trunk.insert(1, nn.LayerNorm(8))
    with pytest.raises(UnsupportedArchitectureError, match="LayerNorm"):
        extract_mlp(layer_norm)


# ---- ONNX -------------------------------------------------------------------------------------------


def test_onnx_parity_mixed_image_state_dynamic_batch(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    spec = EnvSpec({"state": ArraySpec((5,)), "image.front": ArraySpec((24, 24, 3), "uint8"),
                    "image.wrist": ArraySpec((20, 20, 1), "uint8")}, ArraySpec((3,), low=-2.0, high=1.0))
    torch.manual_seed(0)
    policy = _perturb(SACPolicy(spec, SACConfig(actor_hidden=(32,), normalize_obs=True, image_channels=4,
                                                image_features=8)), 0)
    report = export_actor(policy, spec, "onnx", tmp_path, name="pix", num_random=N_OBS)
    assert report.onnx is not None and report.onnx["max_abs_err"] <= 1e-5
    assert report.onnx["inputs"] == ["state", "image.front", "image.wrist"]
    session = ort.InferenceSession(str(tmp_path / "pix.onnx"))
    assert [i.shape[0] for i in session.get_inputs()] == ["batch"] * 3
    obs = random_observations(spec, policy, 3, seed=5)
    (got,) = session.run(None, obs)
    np.testing.assert_allclose(got, torch_actions(policy, obs), atol=1e-5)
    assert (got >= -2.0).all() and (got <= 1.0).all()


# ---- a policy trained by `robot-rl train` -----------------------------------------------------------------

TINY = ["loop.total_env_steps=300", "loop.eval_every_env_steps=300", "loop.eval_episodes=4", "run.progress=false",
        "task.num_envs=4", "algo.learning_starts=64", "algo.batch_size=32", "algo.actor_hidden=[32,32]",
        "algo.critic_hidden=[32,32]", "algo.normalize_obs=true"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "--name", "reach", f"run.root={root}", *TINY]) == 0
    return root / "reach"


@pytest.mark.integration
def test_export_trained_run_to_c(trained_run, tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["export", str(trained_run), "--format", "c", "--out", str(out), "--name", "reach_policy"]) == 0
    assert "max abs err" in capsys.readouterr().out
    report = json.loads((out / "export.json").read_text())
    assert report["num_random"] == N_OBS and report["num_recorded"] == N_OBS
    assert report["architecture"] == "normalised state 12 -> 32 relu -> 32 relu -> 2 -> tanh_scale"
    f32, i8 = report["variants"]
    assert f32["max_abs_err"] <= 1e-5 and i8["worst_err_over_bound"] <= 1.0
    assert i8["const_bytes"] < 0.4 * f32["const_bytes"]
    for variant in ("float32", "int8"):
        assert (out / variant / "reach_policy.h").is_file() and (out / variant / "reach_policy.c").is_file()
    if arm_available():
        for v in (f32, i8):
            for target in ("cortex-m4f", "cortex-m7"):
                size = v["targets"][target]
                assert size["rodata"] >= 0.99 * v["const_bytes"] and size["bss"] >= v["workspace_bytes"]
                assert 0 < size["stack"] < 512 and size["ram"] == size["data"] + size["bss"] + size["stack"]
        assert i8["targets"]["cortex-m4f"]["flash"] < 0.5 * f32["targets"]["cortex-m4f"]["flash"]


@pytest.mark.integration
def test_int8_full_is_calibrated_on_the_recorded_observations(trained_run, tmp_path, capsys):
    """Random observations lie outside what the task visits: int8_full's ranges come from the recorded ones."""
    from robot_rl.export.c_int8 import generate_int8_c
    from robot_rl.export.int8_full import as_vision, calibrate
    from robot_rl.export.run_export import load_actor, recorded_observations

    out = tmp_path / "c"
    assert main(["export", str(trained_run), "--format", "c", "--out", str(out), "--variants", "int8_full",
                 "--num-random", "100", "--num-recorded", "100"]) == 0
    loaded = load_actor(trained_run)
    graph = as_vision(extract_mlp(loaded.policy))
    recorded = recorded_observations(loaded, 100, seed=0)["state"]
    want = generate_int8_c(graph, calibrate(graph, [], recorded), "policy", origin=str(loaded.checkpoint))
    assert (out / "int8_full" / "policy.c").read_text() == want.source
    (v,) = json.loads((out / "export.json").read_text())["variants"]
    assert v["max_abs_err"] == v["max_abs_err_recorded"] < v["max_abs_err_random"]
    assert "(outside the calibrated ranges)" in capsys.readouterr().out


def test_export_trained_run_to_onnx(trained_run, tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "onnx"
    assert main(["export", str(trained_run), "--format", "onnx", "--out", str(out)]) == 0
    report = json.loads((out / "export.json").read_text())
    assert report["onnx"]["max_abs_err"] <= 1e-5 and (out / "policy.onnx").stat().st_size > 1000


def test_export_verb_errors(trained_run, tmp_path, capsys):
    assert main(["export", "/nonexistent/run", "--out", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["export", str(trained_run), "--format", "c", "--name", "bad-name", "--out", str(tmp_path)]) == 2
    assert "C identifier" in capsys.readouterr().err


def test_export_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in ("RUN_DIR", "--format", "--out", "--name", "--variants", "--num-recorded"):
        assert opt in out


# ---- Cortex-M (skips without arm-none-eabi-gcc) ----------------------------------------------------------


@pytest.mark.skipif(not arm_available(), reason="arm-none-eabi-gcc not installed (apt-get install gcc-arm-none-eabi)")
@pytest.mark.integration
def test_cortex_m_sizes_for_a_3x256_mlp(tmp_path):
    policy, _ = _policy("ppo", 48, (256, 256, 256), "elu", True, (12,), (-1.0, 1.0), seed=0)
    graph = extract_mlp(policy)
    params = graph.num_params()
    sizes = {v: cross_compile(generate_c(graph, "big", v), "cortex-m4f", tmp_path / v, 48, 12) for v in
             ("float32", "int8")}
    assert sizes["float32"].rodata >= 4 * params and sizes["int8"].rodata < 1.3 * params
    assert sizes["float32"].bss == 2 * 256 * 4 and sizes["float32"].stack < 256
    assert "expm1f" in sizes["float32"].external_calls and sizes["float32"].libm_flash > 0


@pytest.mark.skipif(not (arm_available() and shutil.which("qemu-system-arm") and shutil.which("cmake")),
                    reason="needs arm-none-eabi-gcc, cmake and qemu-system-arm (apt-get install gcc-arm-none-eabi "
                           "libnewlib-arm-none-eabi cmake qemu-system-arm, or scripts/install-system-deps.sh)")
@pytest.mark.integration
def test_firmware_runs_under_qemu_and_matches_host(tmp_path):
    policy, _ = _policy("ppo", 7, (16, 16), "elu", True, (3,), (-1.0, 1.0), seed=2)
    graph = extract_mlp(policy)
    src = generate_c(graph, "policy", "float32")
    write_sources(src, tmp_path / "src")
    fw = Path(__file__).resolve().parents[1] / "examples" / "firmware"
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(fw), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={fw}/cmake/arm-none-eabi.cmake",
                    f"-DPOLICY_DIR={tmp_path / 'src'}", "-DBOARD=mps2_an386"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    proc = subprocess.run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-icount", "shift=0", "-semihosting",
                           "-kernel", str(build / "policy_fw.elf")], capture_output=True, text=True, timeout=60)
    fields = dict(kv.split("=", 1) for kv in (proc.stdout + proc.stderr).split() if "=" in kv)
    on_m4 = np.array([struct.unpack("<f", struct.pack("<I", int(h, 16)))[0] for h in fields["action"].split(",")])
    obs = np.array([[0.25 * ((i * 7) % 11 - 5) for i in range(7)]], np.float32)  # bench_qemu.c's observation
    np.testing.assert_allclose(on_m4, torch_actions(policy, {"state": obs})[0], atol=1e-5)
    assert 16 * 16 < int(fields["insn_per_forward"]) < 100 * graph.num_params()
    assert 0 < int(fields["stack_bytes"]) < 256
