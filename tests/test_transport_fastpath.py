"""The compiled decode path (SpecPlan, TransitionPlan, a pre-parsed header) rejects what the plain one does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.transport.codec import SpecPlan, WireError, decode, encode, unpack_header
from robot_rl.transport.transition_codec import TransitionPlan, decode_transitions, encode_transitions


def _frames(arr: np.ndarray) -> list[memoryview]:
    return [memoryview(bytearray(bytes(f))) for f in encode("transitions", "s", 0, {"x": arr})]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "inf_and_minus_inf"])
def test_every_nonfinite_value_is_rejected(dtype, bad):
    arr = np.ones((4, 3), dtype=dtype)
    if bad == "inf_and_minus_inf":  # +inf and -inf must not cancel out
        arr[0, 0], arr[3, 2] = np.inf, -np.inf
    else:
        arr[2, 1] = bad
    plan = SpecPlan({"x": ArraySpec((3,), dtype)})
    with pytest.raises(WireError) as e:
        decode(_frames(arr), specs=plan)
    assert e.value.reason == "nonfinite"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_huge_finite_values_are_not_rejected(dtype):
    # Summing these in their own dtype would overflow to inf; they are finite and must pass.
    arr = np.full((1000, 2), np.finfo(dtype).max, dtype=dtype)
    arr[::2] *= -1 if dtype == "float64" else 1
    msg = decode(_frames(arr), specs=SpecPlan({"x": ArraySpec((2,), dtype)}))
    np.testing.assert_array_equal(msg.arrays["x"], arr)


def test_plan_and_dict_specs_reject_the_same_way():
    specs = {"x": ArraySpec((3,)), "y": ArraySpec((2,), "int64", finite=False)}
    ok = encode("transitions", "s", 1, {"x": np.zeros((5, 3), np.float32), "y": np.zeros((5, 2), np.int64)})
    wrong_shape = encode("transitions", "s", 1, {"x": np.zeros((5, 4), np.float32), "y": np.zeros((5, 2), np.int64)})
    wrong_dtype = encode("transitions", "s", 1, {"x": np.zeros((5, 3), np.float64), "y": np.zeros((5, 2), np.int64)})
    missing = encode("transitions", "s", 1, {"x": np.zeros((5, 3), np.float32)})
    for s in (specs, SpecPlan(specs)):
        assert decode(ok, specs=s).seq == 1
        for frames in (wrong_shape, wrong_dtype, missing):
            with pytest.raises(WireError) as e:
                decode(frames, specs=s)
            assert e.value.reason == "spec_mismatch"


def test_transitions_with_plan_and_header_round_trip_and_check_batch_sizes():
    spec = EnvSpec({"state": ArraySpec((4,))}, ArraySpec((2,), low=-1.0, high=1.0))
    n = 6
    f = torch.zeros(n, dtype=torch.bool)
    batch = TransitionBatch(obs={"state": torch.randn(n, 4)}, action=torch.zeros(n, 2), reward=torch.ones(n),
                            terminated=f, truncated=f, next_obs={"state": torch.randn(n, 4)}, intervened=f,
                            policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n), seq=3)
    frames = [memoryview(bytearray(bytes(x))) for x in encode_transitions(batch, "s")]
    plan = TransitionPlan(spec)
    out = decode_transitions(frames, spec, plan=plan, header=unpack_header(frames[0]))
    assert out.seq == 3 and torch.equal(out.obs["state"], batch.obs["state"])
    short = TransitionBatch(**{**batch.__dict__, "reward": torch.ones(n - 1)})
    with pytest.raises(WireError) as e:
        decode_transitions(encode_transitions(short, "s"), spec, plan=plan)
    assert e.value.reason == "spec_mismatch"
