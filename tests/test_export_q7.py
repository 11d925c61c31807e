"""The q7 (8-bit fixed-point) C export: formats and tables by hand, the int32 accumulator's guarantees, every layer
kind against torch within its computed bound (odd sizes included), whole MLP and pixel actors (the benchmark's
`pixels32`), the size check, no float in the Cortex-M0+ forward pass, and the firmware's camera variant under QEMU.
"""

import math
import re

import numpy as np
import pytest
import torch
from test_export import _policy
from test_export_conv import LAYERS, _camera_graph, _images, _pixel_sac, _pixel_spec
from test_export_fixed import NEEDS_ARM, NEEDS_QEMU, TOL, _run
from torch import nn

from robot_rl.export import export_actor
from robot_rl.export.c_fixed import generate_fixed_c, generate_q15_c
from robot_rl.export.c_vision import size_main
from robot_rl.export.fixed import (
    ACC32_BIAS,
    ACC32_MAX_SHIFT,
    build_plan,
    make_layernorm,
    make_linear,
    quantize,
)
from robot_rl.export.fixed_bound import fixed_error_bound
from robot_rl.export.fixed_formats import Q7, frac_bits, lut_apply, lut_error, lut_table
from robot_rl.export.int8_full import calibrate
from robot_rl.export.run_export import LoadedActor, random_observations
from robot_rl.export.toolchain import build_vision_harness, cross_compile, qemu_cost, write_sources
from robot_rl.export.vision import CameraBranch, LayerNormNode, extract_camera, extract_graph, nodes_from_modules
from robot_rl.policies.flow.model import SpatialSoftmaxCamera
from robot_rl.policies.modules.cnn import ConvEncoder

# Compiles the generated C and runs it (docs/testing.md's tiers).
pytestmark = pytest.mark.integration


def _q7(graph, images, state, name="pol"):
    """Plan (calibrated on these observations) and source; test_export_fixed's ``_run`` runs it (int16 I/O)."""
    absmax = np.abs(state).max(axis=0) if state is not None else None
    plan = build_plan(graph, calibrate(graph, images, state), absmax, Q7)
    return plan, generate_fixed_c(plan, name)


# ---- numbers by hand -------------------------------------------------------------------------------------


def test_int8_formats_and_tables_by_hand():
    # 127 / 3 = 42.3 -> 2^5 = 32: Q5 (range +-3.97); 1.0 -> Q6; 0.3 -> Q8; an all-zero tensor -> Q7.
    assert [frac_bits(v, qmax=127) for v in (3.0, 1.0, 0.3, 0.0)] == [5, 6, 8, 7]
    assert quantize(np.array([0.5, -0.5, 1.25, 9.0, -9.0]), 5, 127).tolist() == [16, -16, 40, 127, -128]
    # One entry per int8 input, no interpolation: entry k is tanh((k - 128) / 32) in Q7 (tanh(4) 127.9 saturates at
    # 127, tanh(-4) rounds to -128).
    table = lut_table("tanh", 5, 7, Q7)
    assert len(table) == 256 and table[128] == 0 and table[255] == 127 and table[0] == -128
    assert table[128 + 16] == round(math.tanh(0.5) * 128)
    q = np.arange(-128, 128)
    assert lut_apply(table, q, Q7).tolist() == table.tolist()
    # Every input is a table entry: the error is the output rounding, half an LSB (2^-8).
    assert 0.4 * 2.0**-7 < lut_error("tanh", table, 5, 7, Q7) <= 0.5 * 2.0**-7


def test_int32_accumulator_stays_in_range():
    g = np.random.default_rng(0)
    # A row of tiny weights and a large bias: its weight format is lowered until the bias fits 2^28 at the
    # accumulator's scale, and no shift exceeds 29 (a 2^28 rounding constant).
    w = np.stack([g.normal(size=9) * 1e-6, g.normal(size=9)])
    q = make_linear(w, np.array([50.0, 0.1]), 3, np.array([-60.0, 60.0]), False, width=Q7)
    assert np.abs(q.bias).max() <= ACC32_BIAS and q.shift.max() <= ACC32_MAX_SHIFT and q.shift.min() >= 0
    assert np.abs(q.weight).max() <= 127 and q.qmax == 127
    # The worst sum of products must fit 2^30: 127 * 128 * n, at most 66,052 inputs (with the image's 2u - 255,
    # 127 * 255 * n: 33,155).
    with pytest.raises(ValueError, match="q7 variant cannot take a layer with 66053 inputs"):
        make_linear(np.ones((1, 66053)), np.zeros(1), 0, np.array([-1.0, 1.0]), False, width=Q7)
    with pytest.raises(ValueError, match="at most 33155"):
        make_linear(np.ones((1, 34000)), np.zeros(1), 0, np.array([-1.0, 1.0]), False, width=Q7, x_max=255)
    node = LayerNormNode(np.ones(40000, np.float32), np.zeros(40000, np.float32), 1e-5)
    with pytest.raises(ValueError, match="q7 variant cannot take a LayerNorm over 40000 values"):
        make_layernorm(node, 4, np.array([-1.0, 1.0]), 40000, 0, 1, Q7)


# ---- every layer kind against torch, within the computed bound ---------------------------------------------


def _check_camera_q7(branch, torch_fn, tmp_path, n=24):
    graph = _camera_graph(branch)
    images = _images(branch.image_shape, n)
    with torch.no_grad():
        want = torch_fn(torch.from_numpy(images)).reshape(n, -1).double().numpy()
    plan, src = _q7(graph, [images], None)
    _, got = _run(src, graph, plan, [images], None, tmp_path)
    err = np.abs(got - want)
    bound = fixed_error_bound(plan, [images], None)
    assert (err <= bound + TOL).all(), (err / (bound + TOL)).max()
    code = re.sub(r"/\*.*?\*/", "", src.source, flags=re.DOTALL)
    assert "int16_t pol_q[" not in code and "int8_t pol_q[2]" in code  # int8 maps
    return err.max(), bound.max(), np.abs(want).max()


@pytest.mark.parametrize("case", list(LAYERS))
def test_each_layer_within_its_bound(case, tmp_path):
    """The layer kinds of the float32 C export (1x1 images, stride > kernel, 1 channel, pools without a conv
    before them). When written: errors 0.6-1.6 % of the largest output (int8 maps: half an LSB is 0.4-0.8 % of
    the range), bounds 1-2.2x the error, except after a LayerNorm over 7 values (2.1 on outputs within +-1)."""
    torch.manual_seed(len(case))
    image_shape, make = LAYERS[case]
    modules = make()
    for m in modules:
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight)
            nn.init.normal_(m.bias)
    seq = nn.Sequential(*modules, nn.Flatten()).eval()
    branch = CameraBranch("image.cam", image_shape, nodes_from_modules(seq, case))
    err, bound, peak = _check_camera_q7(branch, lambda im: seq(im.permute(0, 3, 1, 2).float() / 255.0 - 0.5),
                                        tmp_path)
    assert err <= 0.04 * peak, (err, peak)
    if "layernorm" not in case:  # one layer: an informative bound
        assert bound <= 0.03 * peak, (bound, peak)


@pytest.mark.parametrize("gain", [1.0, 10.0])
def test_spatial_softmax_in_q7(gain, tmp_path):
    torch.manual_seed(1)
    cam = SpatialSoftmaxCamera((9, 12, 3), features=6, channels=4, num_layers=2, gain=gain).eval()
    with torch.no_grad():
        cam.log_gain.add_(0.3 * torch.randn_like(cam.log_gain))
    err, _, peak = _check_camera_q7(extract_camera(cam, "image.wrist", (9, 12, 3)), cam, tmp_path)
    assert err <= 0.05 * peak, (err, peak)


def test_drq_encoder_in_q7(tmp_path):
    torch.manual_seed(2)
    enc = ConvEncoder((17, 15, 3), features=9, channels=6, num_layers=3).eval()
    err, _, peak = _check_camera_q7(extract_camera(enc, "image.top", (17, 15, 3)), enc, tmp_path)
    assert err <= 0.05 * peak, (err, peak)


# ---- whole actors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [("sac", 12, (64, 64), "relu", True, (2,), (-1.0, 1.0)),
                                  ("ppo", 9, (32, 32, 32), "elu", True, (3,), (-1.0, 1.0)),
                                  ("ppo", 21, (40, 20), "tanh", False, (2,), (None, None))],
                         ids=lambda a: f"{a[0]}-{a[3]}")
def test_mlp_actor(arch, tmp_path):
    policy, spec = _policy(*arch, seed=0)
    report = export_actor(policy, spec, "c", tmp_path, variants=("q15", "q7"), num_random=500, targets=())
    q15, q7 = report.variants
    assert q7.variant == "q7" and 0 < q7.max_abs_err <= 0.05 and q7.worst_err_over_bound <= 1.0
    assert q7.const_bytes < 0.6 * q15.const_bytes
    header = (tmp_path / "q7" / "policy.h").read_text()
    assert "int policy_forward(const int16_t *state, size_t state_len, int16_t *action, size_t action_len);" in header
    assert "#define POLICY_Q7 1" in header and "void policy_state_to_q7(const float *state, int16_t *q);" in header
    assert "q7 error bound" in (tmp_path / "EXPORT.md").read_text()


def test_pixel_actor_and_its_size_check(tmp_path):
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec)
    report = export_actor(policy, spec, "c", tmp_path, variants=("q15", "q7"), num_random=200, targets=())
    q15, q7 = report.variants
    assert 0 < q7.max_abs_err <= 0.1 and q7.worst_err_over_bound <= 1.0
    assert q7.const_bytes < 0.6 * q15.const_bytes and q7.workspace_bytes < 0.6 * q15.workspace_bytes
    code = re.sub(r"/\*.*?\*/", "", (tmp_path / "q7" / "policy.c").read_text(), flags=re.DOTALL)
    assert "#include <math.h>" not in code and "float" not in code.split("void policy_action_from_q7")[0]
    assert "int64_t acc" not in code and "int32_t acc" in code  # 32-bit accumulators
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 1, seed=0)
    plan, src = _q7(graph, [obs["image.top"]], obs["state"])
    lib, got = _run(src, graph, plan, [obs["image.top"]], obs["state"], tmp_path / "lib")
    image, state = obs["image.top"][0], quantize(obs["state"][0], plan.state.frac).astype(np.int16)
    action = np.full(2, 7, np.int16)
    assert lib.call([image], state, action) == 0 and action.tolist() == (got[0] * 2**plan.f_act).round().tolist()
    action[:] = 7
    assert lib.call([np.zeros((16, 15, 3), np.uint8)], state, action) == -1  # one column short
    for sizes in ([769, 4, 2], [767, 4, 2], [768, 3, 2], [768, 4, 3]):
        assert lib.call([image], state, action, sizes=sizes) == -1, sizes
    assert lib.call([None], state, action) == -2 and (action == 7).all()
    with pytest.raises(ValueError, match="takes a q15 plan, not q7"):
        generate_q15_c(plan, "pol")


def test_whole_pixels32_actor(tmp_path):
    """The benchmark's `pixels32` (reach_pixels 32x32 RGB + 4 joints, DrQ encoder with 8 channels and 32 features,
    actor 64x64), exported as `robot-rl export` does on random and recorded observations. When written: q7 error
    0.011 against q15's 6e-5 (int8_full, measured in the benchmark: 0.0066), at 53 % of q15's flash."""
    from robot_rl.policies.sac import SACConfig, SACPolicy
    from robot_rl.sims.reach_pixels import ReachPixelsConfig

    torch.manual_seed(0)
    task = ReachPixelsConfig(image_size=32)
    env = task.make("cpu", 0, num_envs=1)
    spec = env.spec
    env.close()
    policy = SACPolicy(spec, SACConfig(image_channels=8, image_features=32, actor_hidden=(64, 64))).eval()
    loaded = LoadedActor(policy, spec, tmp_path, tmp_path / "(random init)", task)
    report = export_actor(policy, spec, "c", tmp_path, variants=("q15", "q7"), num_random=60, num_recorded=60,
                          loaded=loaded, targets=())
    q15, q7 = report.variants
    assert report.num_recorded == 60 and "image.top 32x32x3 uint8 -> conv3x3/2:8" in report.architecture
    assert 0 < q7.max_abs_err <= 0.05 and q7.worst_err_over_bound <= 1.0, (q7.max_abs_err, q15.max_abs_err)
    assert q7.const_bytes < 0.55 * q15.const_bytes and q7.workspace_bytes < 0.55 * q15.workspace_bytes


# ---- Cortex-M (skip without the toolchain) ----------------------------------------------------------------


@NEEDS_ARM
def test_no_soft_float_in_the_cortex_m0plus_forward_pass(tmp_path):
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec)
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 32, seed=0)
    _, src = _q7(graph, [obs["image.top"]], obs["state"], name="p")
    size = cross_compile(src, "cortex-m0plus", tmp_path, 0, 2, main_source=size_main(graph, "p", "int16_t"))
    # Only the documented float boundary helpers call soft-float routines; the forward pass and its kernels none.
    assert set(size.float_calls) == {"p_state_to_q7", "p_action_from_q7"}, size.float_calls
    assert all(r.startswith("__aeabi_") for calls in size.float_calls.values() for r in calls)
    assert size.rodata >= 0.99 * src.weight_bytes and size.bss >= src.workspace_bytes


@NEEDS_QEMU
def test_firmware_camera_variant_runs_the_q7_policy(tmp_path):
    """examples/firmware with POLICY_API=checked on the ARMv6-M build: the same action bits as the host."""
    spec = _pixel_spec({"image.top": (16, 16, 3)})
    policy = _pixel_sac(spec, seed=5)
    graph = extract_graph(policy, spec)
    obs = random_observations(spec, policy, 32, seed=0)
    _, src = _q7(graph, [obs["image.top"]], obs["state"], name="policy")
    write_sources(src, tmp_path / "src")
    cost = qemu_cost(tmp_path / "src", "cortex-m0plus", tmp_path, checked_api=True, reps=2)
    frame = ((37 * np.arange(768) + 11) % 256).astype(np.uint8).reshape(1, 16, 16, 3)  # bench_qemu.c's inputs
    state = np.array([[1000 * ((7 * i) % 11 - 5) for i in range(4)]], np.int16)
    lib = build_vision_harness(src, tmp_path / "host", [768], 4, 2)
    assert cost.action == lib.forward([frame], state).astype(np.uint16).tolist()[0]
    assert 1000 < cost.instructions < 2_000_000 and 0 < cost.stack < 1024
