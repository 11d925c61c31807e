"""The q15 (fixed-point) C export: numbers by hand, every layer kind against torch within its computed bound
(odd sizes included), whole MLP and pixel actors, the size check, no float in the Cortex-M0+ forward pass, the
firmware's camera variant under QEMU, and the CLI."""

import ctypes
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_export import _policy
from test_export_conv import LAYERS, _camera_graph, _images, _pixel_sac, _pixel_spec
from torch import nn

from robot_rl.cli import main
from robot_rl.export import export_actor
from robot_rl.export.c_codegen import CSources
from robot_rl.export.c_fixed import generate_q15_c, hwc_order
from robot_rl.export.c_vision import generate_vision_c, size_main
from robot_rl.export.fixed import (
    build_plan,
    exp2_rel_error,
    exp2_table,
    frac_bits,
    lut_apply,
    lut_error,
    lut_table,
    make_layernorm,
    quantize,
    state_fixed,
)
from robot_rl.export.fixed_bound import q15_error_bound
from robot_rl.export.graph import DenseLayer, MLPGraph
from robot_rl.export.int8_full import as_vision, calibrate
from robot_rl.export.run_export import random_observations
from robot_rl.export.toolchain import (
    arm_available,
    build_vision_harness,
    cross_compile,
    qemu_available,
    qemu_cost,
    write_sources,
)
from robot_rl.export.vision import (
    CameraBranch,
    LayerNormNode,
    VisionGraph,
    extract_camera,
    extract_graph,
    nodes_from_modules,
)
from robot_rl.policies.flow.model import SpatialSoftmaxCamera
from robot_rl.policies.modules.cnn import ConvEncoder

# Compiles the generated C and runs it (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

TOL = 1e-5
NEEDS_ARM = pytest.mark.skipif(not arm_available(), reason="arm-none-eabi-gcc not installed (apt-get install "
                                                           "gcc-arm-none-eabi libnewlib-arm-none-eabi)")
NEEDS_QEMU = pytest.mark.skipif(not qemu_available(), reason="needs arm-none-eabi-gcc, cmake and qemu-system-arm "
                                "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi cmake qemu-system-arm)")


def _q15(graph, images, state, name="pol"):
    """Plan (calibrated on these observations), source, and the plan's action for them."""
    plan = build_plan(graph, calibrate(graph, images, state), np.abs(state).max(axis=0) if state is not None else None)
    return plan, generate_q15_c(plan, name)


def _run(src: CSources, graph, plan, images, state, build: Path):
    lib = build_vision_harness(src, build, [math.prod(c.image_shape) for c in graph.cameras], graph.state_dim,
                               graph.act_dim)
    q_state = quantize(state, plan.state.frac[None, :]) if state is not None else None
    return lib, lib.forward(images, q_state).astype(np.float64) * 2.0**-plan.f_act


# ---- numbers by hand -------------------------------------------------------------------------------------


def test_formats_and_tables_by_hand():
    # 32767 / 3 = 10922.3 -> 2^13 = 8192 is the largest power of two: Q13 (range +-4); 1.0 -> Q14; 0.3 -> Q16.
    assert (frac_bits(3.0), frac_bits(1.0), frac_bits(0.3), frac_bits(0.0), frac_bits(1e9)) == (13, 14, 16, 15, 0)
    assert quantize(np.array([0.5, -0.5, 1.25, 100.0, -100.0]), 13).tolist() == [4096, -4096, 10240, 32767, -32768]
    # tanh table, Q12 in -> Q15 out: entry k is tanh((128 k - 32768) / 4096); at those inputs the lookup is exact.
    table = lut_table("tanh", 12, 15)
    assert table[256] == 0 and table[0] == round(math.tanh(-8.0) * 32768) and len(table) == 513
    assert lut_apply(table, np.array([-32768, 0, 128])).tolist() == [table[0], 0, table[257]]
    # Halfway between entries 256 and 257 the interpolation is their mean, rounded.
    assert lut_apply(table, np.array([64]))[0] == (table[257] + 1) // 2
    # Linear interpolation over h = 128/4096 errs by at most h^2/8 * max|tanh''| (4/(3 sqrt 3)); 2 roundings of 1/2 LSB.
    h = 128 / 4096
    assert 0.8 * h**2 / 8 * 4 / (3 * math.sqrt(3)) < lut_error("tanh", table, 12, 15) \
        <= h**2 / 8 * 4 / (3 * math.sqrt(3)) + 2.0**-15
    t = exp2_table()
    assert t[0] == 2**30 and t[256] == 2**29 and t[128] == round(2**29.5)
    assert exp2_rel_error() < 2e-5


def test_state_normaliser_in_integers_by_hand(tmp_path):
    zeros = np.zeros(2, np.float32)
    head = MLPGraph(2, [DenseLayer(np.eye(2, dtype=np.float32), zeros, "identity")], "identity", zeros, zeros)
    graph = VisionGraph([], 2, head, np.array([1.0, 0.0], np.float32), np.array([0.5, 2.0], np.float32), 3.0)
    state = np.array([[1.25, 1.0], [10.0, -1.0]])
    plan, src = _q15(graph, [], state)
    assert plan.state is not None
    # z = clip((s - mu) / sd, +-3) = (0.5, 0.5) and (3 [clipped from 18], -0.5), in the features' format.
    z = state_fixed(plan.state, state) * 2.0**-plan.f_feat
    np.testing.assert_allclose(z, [[0.5, 0.5], [3.0, -0.5]], atol=2.0**-plan.f_feat)
    _, got = _run(src, graph, plan, [], state, tmp_path)  # the identity head: the C output is z
    np.testing.assert_allclose(got, [[0.5, 0.5], [3.0, -0.5]], atol=2.0 ** -min(plan.f_feat, plan.f_act))


# ---- every layer kind against torch, within the computed bound ---------------------------------------------


def _check_camera_q15(branch, torch_fn, tmp_path, n=24):
    graph = _camera_graph(branch)
    images = _images(branch.image_shape, n)
    with torch.no_grad():
        want = torch_fn(torch.from_numpy(images)).reshape(n, -1).double().numpy()
    plan, src = _q15(graph, [images], None)
    _, got = _run(src, graph, plan, [images], None, tmp_path)
    err = np.abs(got - want)
    bound = q15_error_bound(plan, [images], None)
    assert (err <= bound + TOL).all(), (err / (bound + TOL)).max()
    return err.max(), bound.max(), np.abs(want).max()


@pytest.mark.parametrize("case", list(LAYERS))
def test_each_layer_within_its_bound(case, tmp_path):
    """The layer kinds of the float32 C export (1x1 images, stride > kernel, 1 channel, pools without a conv
    before them). When written: errors 1.5e-5-2.2e-4 (<= 0.022 % of the largest output), bounds 1.4-50x that."""
    torch.manual_seed(len(case))
    image_shape, make = LAYERS[case]
    modules = make()
    for m in modules:
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight)
            nn.init.normal_(m.bias)
    seq = nn.Sequential(*modules, nn.Flatten()).eval()
    branch = CameraBranch("image.cam", image_shape, nodes_from_modules(seq, case))
    err, bound, peak = _check_camera_q15(branch, lambda im: seq(im.permute(0, 3, 1, 2).float() / 255.0 - 0.5),
                                         tmp_path)
    assert err <= 1e-3 * peak and bound <= 0.01 * peak, (err, bound, peak)  # one layer: an informative bound


@pytest.mark.parametrize("gain", [1.0, 10.0])
def test_spatial_softmax_in_fixed_point(gain, tmp_path):
    torch.manual_seed(1)
    cam = SpatialSoftmaxCamera((9, 12, 3), features=6, channels=4, num_layers=2, gain=gain).eval()
    with torch.no_grad():
        cam.log_gain.add_(0.3 * torch.randn_like(cam.log_gain))
    err, bound, peak = _check_camera_q15(extract_camera(cam, "image.wrist", (9, 12, 3)), cam, tmp_path)
    assert err <= 1e-3 * peak and bound <= 0.05 * peak, (err, bound, peak)


def test_drq_encoder_in_fixed_point(tmp_path):
    torch.manual_seed(2)
    enc = ConvEncoder((17, 15, 3), features=9, channels=6, num_layers=3).eval()
    err, _, peak = _check_camera_q15(extract_camera(enc, "image.top", (17, 15, 3)), enc, tmp_path)
    assert err <= 1e-3 * peak, (err, peak)


def test_hwc_order_and_layernorm_refusal():
    # (C, H, W) = (2, 1, 3): HWC position p = (w * C + c) holds CHW index c * 3 + w.
    assert hwc_order((2, 1, 3)).tolist() == [0, 3, 1, 4, 2, 5]
    node = LayerNormNode(np.ones(40000, np.float32), np.zeros(40000, np.float32), 1e-5)
    with pytest.raises(ValueError, match="q15 variant cannot take a LayerNorm over 40000 values"):
        make_layernorm(node, 12, np.array([-1.0, 1.0]), 40000, 0, 1)


# ---- whole actors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [("sac", 12, (64, 64), "relu", True, (2,), (-1.0, 1.0)),
                                  ("ppo", 9, (32, 32, 32), "elu", True, (3,), (-1.0, 1.0)),
                                  ("ppo", 6, (64, 16), "silu", True, (5,), (-0.3, 0.3)),
                                  ("ppo", 21, (40, 20), "tanh", False, (2,), (None, None)),
                                  ("ppo", 5, (8,), "gelu", True, (1,), (-1.0, 1.0))],
                         ids=lambda a: f"{a[0]}-{a[3]}")
def test_mlp_actor(arch, tmp_path):
    """Errors of 1.2e-4-2.9e-4 when written (int8_full: 0.012-0.034 on the same policies)."""
    policy, spec = _policy(*arch, seed=0)
    report = export_actor(policy, spec, "c", tmp_path, variants=("q15",), num_random=500, targets=())
    (q,) = report.variants
    assert q.variant == "q15" and 0 < q.max_abs_err <= 1e-3 and q.worst_err_over_bound <= 1.0
    header = (tmp_path / "q15" / "policy.h").read_text()
    assert "int policy_forward(const int16_t *state, size_t state_len, int16_t *action, size_t action_len);" in header
    assert "#define POLICY_STATE_FRAC_BITS_INIT {" in header
    assert "q15 error bound" in (tmp_path / "EXPORT.md").read_text()


def test_pixel_actor_and_its_size_check(tmp_path):
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec)
    report = export_actor(policy, spec, "c", tmp_path, variants=("float32", "q15"), num_random=200, targets=())
    f32, q = report.variants
    assert 0 < q.max_abs_err <= 1e-3 and q.worst_err_over_bound <= 1.0 and q.bound_max is not None
    # float32 maps are HWC too now (no float copy of the image): q15's int16 maps take exactly half its RAM.
    assert q.const_bytes < 0.75 * f32.const_bytes and q.workspace_bytes <= 0.5 * f32.workspace_bytes
    code = re.sub(r"/\*.*?\*/", "", (tmp_path / "q15" / "policy.c").read_text(), flags=re.DOTALL)
    assert "#include <math.h>" not in code and "float" not in code.split("void policy_action_from_q15")[0]
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 1, seed=0)
    plan, src = _q15(graph, [obs["image.top"]], obs["state"])
    lib, got = _run(src, graph, plan, [obs["image.top"]], obs["state"], tmp_path / "lib")
    image, state = obs["image.top"][0], quantize(obs["state"][0], plan.state.frac).astype(np.int16)
    action = np.full(2, 7, np.int16)
    assert lib.call([image], state, action) == 0 and action.tolist() == (got[0] * 2**plan.f_act).round().tolist()
    action[:] = 7
    assert lib.call([np.zeros((16, 15, 3), np.uint8)], state, action) == -1  # one column short
    for sizes in ([769, 4, 2], [768, 3, 2], [768, 4, 3]):
        assert lib.call([image], state, action, sizes=sizes) == -1, sizes
    assert lib.call([None], state, action) == -2 and (action == 7).all()


def test_float_conversion_helpers_match_the_export(tmp_path):
    policy, spec = _policy("sac", 3, (8,), "relu", True, (2,), (-1.0, 1.0), seed=1)
    graph = extract_graph(policy, spec)
    assert isinstance(graph, MLPGraph)
    state = np.array([[0.1, -7.5, 3.25], [np.nan, 1e9, -1e9]], np.float32)
    plan, src = _q15(as_vision(graph), [], state[:1])
    lib, _ = _run(src, plan.graph, plan, [], state[:1], tmp_path)
    q = np.zeros(3, np.int16)
    lib.lib.pol_state_to_q15(ctypes.c_void_p(state[0].ctypes.data), ctypes.c_void_p(q.ctypes.data))
    assert q.tolist() == quantize(state[0], plan.state.frac).tolist()
    lib.lib.pol_state_to_q15(ctypes.c_void_p(state[1].ctypes.data), ctypes.c_void_p(q.ctypes.data))
    assert q.tolist() == [0, 32767, -32768]  # NaN -> 0, saturated
    a = np.array([16384, -3], np.int16)
    out = np.zeros(2, np.float32)
    lib.lib.pol_action_from_q15(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    assert out.tolist() == [16384 * 2.0**-plan.f_act, -3 * 2.0**-plan.f_act]


# ---- Cortex-M (skip without the toolchain) ----------------------------------------------------------------


@NEEDS_ARM
def test_no_soft_float_in_the_cortex_m0plus_forward_pass(tmp_path):
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec)
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 32, seed=0)
    _, src = _q15(graph, [obs["image.top"]], obs["state"], name="p")
    size = cross_compile(src, "cortex-m0plus", tmp_path, 0, 2, main_source=size_main(graph, "p", "int16_t"))
    # Only the documented float boundary helpers call soft-float routines; the forward pass and its kernels none.
    assert set(size.float_calls) == {"p_state_to_q15", "p_action_from_q15"}, size.float_calls
    assert all(r.startswith("__aeabi_") for calls in size.float_calls.values() for r in calls)
    f32 = cross_compile(generate_vision_c(graph, "p"), "cortex-m0plus", tmp_path / "f32", 0, 2,
                        main_source=size_main(graph, "p"))
    assert any(r.startswith("__aeabi_f") for calls in f32.float_calls.values() for r in calls)  # the check sees them
    assert size.rodata >= 0.99 * src.weight_bytes and size.bss >= src.workspace_bytes


@NEEDS_QEMU
@pytest.mark.parametrize("target", ["cortex-m0plus", "cortex-m7"])
def test_firmware_camera_variant_runs_the_q15_policy(target, tmp_path):
    """examples/firmware with POLICY_API=checked feeds a uint8 HWC frame and the int16 state; same bits as the host."""
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec, seed=5)
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 32, seed=0)
    _, src = _q15(graph, [obs["image.top"]], obs["state"], name="policy")
    write_sources(src, tmp_path / "src")
    cost = qemu_cost(tmp_path / "src", target, tmp_path, checked_api=True, reps=2)
    frame = ((37 * np.arange(768) + 11) % 256).astype(np.uint8).reshape(1, 16, 16, 3)  # bench_qemu.c's inputs
    state = np.array([[1000 * ((7 * i) % 11 - 5) for i in range(4)]], np.int16)
    lib = build_vision_harness(src, tmp_path / "host", [768], 4, 2)
    assert cost.action == lib.forward([frame], state).astype(np.uint16).tolist()[0]
    assert 1000 < cost.instructions < 2_000_000 and 0 < cost.stack < 1024


# ---- the CLI on a trained run ------------------------------------------------------------------------------


def test_export_verb_writes_q15(tmp_path, capsys):
    root = tmp_path / "runs"
    train = ["loop.total_env_steps=200", "loop.eval_every_env_steps=200", "loop.eval_episodes=2", "run.progress=false",
             "task.num_envs=4", "algo.learning_starts=64", "algo.batch_size=32", "algo.actor_hidden=[32,32]",
             "algo.critic_hidden=[32,32]", "algo.normalize_obs=true"]
    assert main(["train", "--name", "reach", f"run.root={root}", *train]) == 0
    out = tmp_path / "c"
    assert main(["export", str(root / "reach"), "--format", "c", "--out", str(out), "--variants", "float32", "q15",
                 "--num-random", "200", "--num-recorded", "200"]) == 0
    assert "## C, q15" in capsys.readouterr().out
    report = json.loads((out / "export.json").read_text())
    f32, q = report["variants"]
    assert q["variant"] == "q15" and q["max_abs_err"] <= 1e-3 and q["worst_err_over_bound"] <= 1.0
    if arm_available():
        m0 = q["targets"]["cortex-m0plus"]
        assert set(m0["float_calls"]) <= {"policy_state_to_q15", "policy_action_from_q15"}
        assert f32["targets"]["cortex-m0plus"]["float_calls"]  # float32 on an M0+ is soft float
