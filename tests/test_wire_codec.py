"""The wire format: round trips, and thousands of malformed messages all rejected with a reason."""

import os
import pickle
import random
import zlib

import msgpack
import numpy as np
import pytest
import torch

from robot_rl.testing import FakeVecEnv
from robot_rl.transport.codec import (
    SCHEMA_VERSION,
    WireError,
    WireLimits,
    decode,
    encode,
    pack_header,
    unpack_header,
)
from robot_rl.transport.inproc import InprocTransport
from robot_rl.transport.transition_codec import decode_transitions, encode_transitions


def _batch(image: bool = False):
    from robot_rl.loop.actor import Actor
    from robot_rl.policies.sac import SACConfig

    env = FakeVecEnv(num_envs=3, image=image)
    algo = SACConfig(actor_hidden=(8,), critic_hidden=(8,)).build(env.spec, "cpu", 0)
    t = InprocTransport()
    actor = Actor(env, algo.make_policy(), t.actor_endpoint(5))
    actor.step()
    return env.spec, t.learner_endpoint().recv(1.0)


def _bytes(frames):
    return [bytes(f) for f in frames]


@pytest.mark.parametrize("image", [False, True])
def test_transitions_round_trip(image):
    spec, batch = _batch(image)
    batch.extras = {"log_prob": torch.randn(len(batch))}
    back = decode_transitions(_bytes(encode_transitions(batch, "s1")), spec)
    assert back.actor_id == 5 and back.seq == batch.seq
    for k in spec.observation:
        assert torch.equal(back.obs[k], batch.obs[k]) and torch.equal(back.next_obs[k], batch.next_obs[k])
    for name in ("action", "reward", "terminated", "truncated", "intervened", "policy_version", "env_index"):
        assert torch.equal(getattr(back, name), getattr(batch, name)), name
    assert torch.equal(back.extras["log_prob"], batch.extras["log_prob"])


def test_spec_violations_are_rejected():
    spec, batch = _batch()
    bad = _bytes(encode_transitions(batch, "s"))
    nan = batch.index(slice(None))
    nan.reward = nan.reward.clone()
    nan.reward[0] = float("nan")
    with pytest.raises(WireError) as e:
        decode_transitions(_bytes(encode_transitions(nan, "s")), spec)
    assert e.value.reason == "nonfinite"
    wrong = batch.index(slice(None))
    wrong.obs = {"state": torch.zeros(len(batch), 7)}
    with pytest.raises(WireError) as e:
        decode_transitions(_bytes(encode_transitions(wrong, "s")), spec)
    assert e.value.reason == "spec_mismatch"
    assert decode_transitions(bad, spec).seq == batch.seq


def _mutations(frames: list[bytes], rng: random.Random) -> list[bytes]:
    """One malformed variant of a valid message."""
    kind = rng.randrange(9)
    frames = list(frames)
    if kind == 0:  # truncate a frame
        i = rng.randrange(len(frames))
        frames[i] = frames[i][: rng.randrange(len(frames[i]) + 1)]
        if frames[i] == b"" and i == 0:
            frames[i] = b"\x00"
    elif kind == 1:  # flip a bit anywhere
        i = rng.randrange(len(frames))
        if frames[i]:
            b = bytearray(frames[i])
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
            frames[i] = bytes(b)
        else:
            frames[i] = b"\x01"
    elif kind == 2:  # drop or add a frame
        if rng.random() < 0.5 and len(frames) > 1:
            frames.pop(rng.randrange(1, len(frames)))
        else:
            frames.append(os.urandom(rng.randrange(1, 64)))
    elif kind == 3:  # random header bytes
        frames[0] = os.urandom(rng.randrange(1, 200))
    else:  # a well-formed header with one field made wrong
        h = unpack_header(frames[0])
        field = ["v", "type", "session", "seq", "arrays", "dtype", "shape", "crc", "meta", "packed"][
            kind - 4 + rng.randrange(6)]
        entry = rng.randrange(len(h["arrays"]))
        if field == "v":
            h["v"] = SCHEMA_VERSION + rng.choice([1, -1, 100])
        elif field == "type":
            h["type"] = rng.choice(["exec", "pickle", "", "TRANSITIONS"])
        elif field == "session":
            h["session"] = rng.choice([None, 3, ["x"]])
        elif field == "seq":
            h["seq"] = rng.choice([-1, "1", None, 1.5])
        elif field == "arrays":
            h["arrays"] = rng.choice([{}, "x", [[1, 2]], h["arrays"][:-1]])
        elif field == "dtype":
            h["arrays"][entry][1] = rng.choice(["object", "O", "float128", "complex64", "<f4", "V8"])
        elif field == "shape":
            h["arrays"][entry][2] = rng.choice([[-1], [2**40, 2**40], [1] * 9, "3", [True], [10**9]])
        elif field == "crc":
            h["arrays"][entry][3] = (h["arrays"][entry][3] + 1) % 2**32
        elif field == "packed":
            h["packed"] = rng.choice([-1, h["packed"] + 1, h["packed"] - 1, 0, "1", None, True])
        else:
            h["meta"] = rng.choice([[], "x", {"actor_id": "zero"}])
        frames[0] = pack_header(h)  # re-sealed: the field check itself must catch it
    return frames


def test_fuzzer_thousands_of_malformed_messages_are_all_rejected_with_a_reason():
    spec, batch = _batch(image=True)
    good = _bytes(encode_transitions(batch, "s"))
    rng = random.Random(0)
    reasons: dict[str, int] = {}
    for _ in range(3000):
        frames = _mutations(good, rng)
        try:
            decode_transitions(frames, spec, WireLimits(max_array_bytes=1 << 20))
        except WireError as e:
            reasons[e.reason] = reasons.get(e.reason, 0) + 1
            continue
        # A mutation may leave the message valid (e.g. a bit flip in a msgpack string padding is not
        # possible, but meta changes can be); then it must decode to exactly the original arrays.
        back = decode_transitions(frames, spec)
        assert torch.equal(back.action, batch.action)
    assert sum(reasons.values()) > 2500
    for expected in ("truncated", "bad_crc", "bad_header", "bad_version", "unknown_type", "bad_dtype", "bad_shape"):
        assert reasons.get(expected, 0) > 0, (expected, reasons)


def test_oversized_frames_are_refused_before_allocation():
    frames = encode("transitions", "s", 0, {"x": np.zeros(10, np.float32)})
    h = unpack_header(frames[0])
    h["arrays"][0][2] = [2**30]
    with pytest.raises(WireError) as e:
        decode([pack_header(h), bytes(frames[1])], WireLimits(max_array_bytes=1 << 20))
    assert e.value.reason == "oversized"
    with pytest.raises(WireError) as e:
        decode([b"\x00" * (2 << 20)], WireLimits(max_header_bytes=1 << 20))
    assert e.value.reason == "oversized"


class _Canary:
    def __reduce__(self):
        return (open, (os.environ["ROBOT_RL_CANARY"], "w"))


def test_pickle_payload_has_no_effect(tmp_path, monkeypatch):
    canary = tmp_path / "canary"
    monkeypatch.setenv("ROBOT_RL_CANARY", str(canary))
    payload = pickle.dumps(_Canary())
    spec, batch = _batch()
    good = _bytes(encode_transitions(batch, "s"))
    attempts = [[payload], [payload, payload], [good[0], payload, *good[2:]],
                [pack_header({"v": SCHEMA_VERSION, "type": "transitions", "session": "s", "seq": 0, "meta": {},
                                "arrays": [["x", "object", [1], zlib.crc32(payload)]]}), payload],
                [msgpack.packb({"v": SCHEMA_VERSION, "type": "transitions"}), payload]]
    for frames in attempts:
        with pytest.raises(WireError):
            decode_transitions(frames, spec)
    assert not canary.exists()


def test_header_bit_flips_are_caught_by_the_header_crc():
    # Without a header checksum a flipped bit in seq/session would store or acknowledge the wrong chunk.
    frames = _bytes(encode("ack", "session-a", 12345))
    rng = random.Random(3)
    for _ in range(200):
        b = bytearray(frames[0])
        j = rng.randrange(len(b))
        b[j] ^= 1 << rng.randrange(8)
        with pytest.raises(WireError) as e:
            decode([bytes(b)])
        assert e.value.reason in ("bad_crc", "truncated")
    assert decode(frames).seq == 12345


def test_small_arrays_share_one_packed_frame_and_large_ones_travel_alone(monkeypatch):
    from robot_rl.transport import codec

    monkeypatch.setattr(codec, "PACK_MAX_BYTES", 64)
    arrays = {"a": np.arange(3, dtype=np.float32), "big": np.arange(100, dtype=np.int64),
              "b": np.array([True, False, True]), "c": np.arange(4, dtype=np.float64), "empty": np.zeros(0, np.int16)}
    frames = encode("transitions", "s", 7, arrays)
    h = unpack_header(frames[0])
    # a (12 bytes) at 0, b (3) at 16, c (32) at 24, empty (0) at 56: one frame of 56 bytes; big alone after it.
    assert h["v"] == SCHEMA_VERSION and h["packed"] == 4 and len(frames) == 3
    assert [e[0] for e in h["arrays"]] == ["a", "b", "c", "empty", "big"] and len(frames[1]) == 56
    back = decode(_bytes(frames))
    for name, arr in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], arr)
        assert back.arrays[name].ctypes.data % arr.dtype.itemsize == 0  # aligned views
    for wrong in (frames[1][:-1], bytes(frames[1]) + b"\0" * 8):  # the layout fixes the packed frame's length
        with pytest.raises(WireError) as e:
            decode([bytes(frames[0]), wrong, bytes(frames[2])])
        assert e.value.reason == "bad_size"
    with pytest.raises(WireError) as e:  # a frame missing
        decode([bytes(frames[0]), bytes(frames[1])])
    assert e.value.reason == "truncated"


def test_chunks_copied_into_an_open_message_decode_as_their_rows_in_order():
    from robot_rl.transport.codec import encode_packed
    from robot_rl.transport.open_message import OpenMessage

    def chunk(tag: float, n: int) -> dict[str, np.ndarray]:
        return {"x": np.full((n, 3), tag, np.float32), "done": np.arange(n) % 2 == 0, "k": np.full(n, tag, np.int64)}

    def values(c: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(c.values())

    names = ("x", "done", "k")
    parts = [chunk(1.0, 2), chunk(2.0, 5), chunk(3.0, 1)]
    for fill in (parts, [chunk(float(i), 2) for i in range(4)]):  # partial (compacted on seal), full (sent as is)
        message = OpenMessage(names, values(fill[0]), max_chunks=4, max_bytes=1 << 20)
        want = {name: np.concatenate([p[name] for p in fill]) for name in names}
        for p in fill:
            assert OpenMessage.eligible(values(p), 1 << 20) and message.fits(names, values(p))
            message.append(values(p))
            p["x"][:] = -1.0  # the env reuses its buffers: what was handed over stays as it was
        assert message.chunks == len(fill) and message.rows == len(want["k"])
        back = decode(_bytes(encode_packed("transitions", "s", 0, message.seal())))
        for name in names:
            np.testing.assert_array_equal(back.arrays[name], want[name])
    # Another layout, dtype, trailing shape or more rows than it holds starts a new message.
    message = OpenMessage(names, values(chunk(1.0, 2)), max_chunks=2, max_bytes=1 << 20)
    assert not message.fits(("x", "done"), values(chunk(1.0, 2))[:2])
    assert not message.fits(names, [np.zeros((2, 4), np.float32), *values(chunk(1.0, 2))[1:]])
    assert not message.fits(names, [np.zeros((2, 3), np.float64), *values(chunk(1.0, 2))[1:]])
    assert not message.fits(names, values(chunk(1.0, 5)))
    assert not OpenMessage.eligible([np.zeros((2, 3), ">f4")], 1 << 20)  # byte order, rows, size: the other path
    assert not OpenMessage.eligible([np.zeros((2, 3), np.float32), np.zeros(3)], 1 << 20)
    assert not OpenMessage.eligible([np.zeros((1 << 16, 3), np.float32)], 1 << 20)



def test_a_pooled_message_is_reused_only_once_nothing_points_into_it_and_sums_its_new_rows():
    from robot_rl.transport.codec import encode_packed
    from robot_rl.transport.open_message import HOT_BYTES, MessagePool

    rows = HOT_BYTES // (3 * 4) + 5  # "x" is summed as it is copied in, "k" at seal

    def chunk(tag: float) -> tuple[tuple[str, ...], list[np.ndarray]]:
        return ("x", "k"), [np.full((rows, 3), tag, np.float32), np.full(rows, tag, np.int64)]

    pool = MessagePool(keep=2)
    names, values = chunk(1.0)
    first = pool.take(names, values, max_chunks=3, max_bytes=1 << 20)
    for tag in (1.0, 2.0):  # partial: compacted in place
        first.append(chunk(tag)[1])
    sent = first.seal().frames[0]  # a frame ZeroMQ still sends from (zero-copy)
    pool.give(first)
    assert pool.take(names, values, 3, 1 << 20) is not first  # not while the frame points into it
    pool.give(first)
    back = decode(_bytes(encode_packed("transitions", "s", 0, first.seal())))
    np.testing.assert_array_equal(back.arrays["x"][:rows], 1.0)
    del sent, back
    again = pool.take(names, values, 3, 1 << 20)
    assert again is first and pool.reused == 1 and again.rows == 0
    for tag in (3.0, 4.0, 5.0):  # full: sent as it lies
        again.append(chunk(tag)[1])
    back = decode(_bytes(encode_packed("transitions", "s", 0, again.seal())))
    np.testing.assert_array_equal(back.arrays["x"], np.repeat([3.0, 4.0, 5.0], rows)[:, None].repeat(3, 1))
    np.testing.assert_array_equal(back.arrays["k"], np.repeat([3, 4, 5], rows))
    assert pool.take(names, [np.zeros((rows, 3), np.float64), values[1]], 3, 1 << 20) is not again  # other dtype

def test_packed_copy_is_taken_at_pack_time():
    from robot_rl.transport.codec import encode_packed, pack_arrays

    x = np.zeros((4, 3), np.float32)
    packed, unsummed = pack_arrays({"x": x}), pack_arrays({"x": x}, checksums=False)
    x += 1.0  # an env reusing its buffer after send()
    for p in (packed, unsummed):  # checksums of the copy, made now or when the message is built
        np.testing.assert_array_equal(decode(_bytes(encode_packed("transitions", "s", 0, p))).arrays["x"], 0.0)


def test_a_pending_wake_writes_no_second_byte_and_drain_rearms_it():
    import os

    from robot_rl.transport.zmq_common import Waker

    w = Waker()
    try:
        w.wake()
        w.wake()  # already pending: no syscall
        assert os.read(w.fd, 16) == b"\0"
        w.wake()  # still pending until drain(): work queued now is seen on the I/O thread's current turn
        w.drain()
        w.wake()
        assert os.read(w.fd, 16) == b"\0"
    finally:
        w.close()
