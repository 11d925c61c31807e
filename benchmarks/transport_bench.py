"""ZeroMQ transport benchmarks: throughput against raw pyzmq and pickle+lz4, weight broadcast, loop jitter.

    .venv/bin/python benchmarks/transport_bench.py            # everything
    .venv/bin/python benchmarks/transport_bench.py --only throughput --chunks 200

1. Throughput, one actor process → the learner (this process), tcp://127.0.0.1, for state-only
   transitions and for image transitions (two 128×128×3 uint8 cameras + state, in obs and next_obs):
   - ours: ``ZmqActorEndpoint.send`` → ``ZmqLearnerEndpoint.recv`` (header CRC, per-array CRC32,
     spec and finiteness checks, copy into tensors, acks, in-order delivery), with the defaults: small arrays
     packed into one frame, chunks that wait together sent as one message (``coalesce``);
   - ours_single: the same with ``coalesce=false``, one message per chunk (the ablation);
   - raw: pyzmq PUSH/PULL moving the same array bytes zero-copy, no checks (the limit; target ≥ 0.8);
   - raw_crc: raw plus the same per-array checksum computed and verified (the cost of integrity alone);
   - pickle+lz4: the dict of tensors pickled and lz4-compressed, PUSH/PULL, unpickled on receipt
     (the best-known real-robot RL stack's wire format; target ours ≥ 3× faster).
   Images are a smooth gradient plus camera-like noise (σ = 8), so lz4 has something to compress.
   State-only chunks are measured at several sizes (``--rows``); every round records the 1-minute load average.
2. Weight broadcast: a 5M-parameter policy published to 4 actor processes; latency from
   ``publish_weights`` until the last actor holds the tensors, against raw ROUTER→DEALER sends of
   the same bytes.
3. Control-loop jitter: a 50 Hz actor (reach task, SAC policy) in this process; period p50/p99/max
   with no learner traffic vs. with a learner process busy in SAC updates (and publishing weights).

Writes one result file (``--out``; default ``benchmarks/results/transport_bench/<UTC time>.json``);
:func:`throughput_table`, :func:`ratio_table`, :func:`weights_table` and :func:`jitter_table` render it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.util
import itertools
import multiprocessing as mp
import os
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from robot_rl.transport.codec import CHECKSUM, CHECKSUMS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "transport_bench"
STATE_DIM, ACTION_DIM = 32, 8


def _spec(image: bool) -> Any:
    from robot_rl.core.specs import ArraySpec, EnvSpec

    obs = {"state": ArraySpec((STATE_DIM,))}
    if image:
        obs["image.front"] = ArraySpec((128, 128, 3), "uint8", 0, 255)
        obs["image.wrist"] = ArraySpec((128, 128, 3), "uint8", 0, 255)
    return EnvSpec(obs, ArraySpec((ACTION_DIM,), low=-1.0, high=1.0))


def _chunk(image: bool, n: int, seed: int = 0) -> Any:
    from robot_rl.core.transition import TransitionBatch

    g = torch.Generator().manual_seed(seed)
    obs = {"state": torch.randn(n, STATE_DIM, generator=g)}
    nxt = {"state": torch.randn(n, STATE_DIM, generator=g)}
    if image:
        ramp = torch.linspace(0, 200, 128).reshape(1, 1, 128, 1).expand(n, 128, 128, 3)
        for d in (obs, nxt):
            for cam in ("image.front", "image.wrist"):
                d[cam] = (ramp + 8 * torch.randn(n, 128, 128, 3, generator=g)).clamp(0, 255).to(torch.uint8)
    f = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs=obs, action=torch.rand(n, ACTION_DIM, generator=g) * 2 - 1,
                           reward=torch.randn(n, generator=g), terminated=f, truncated=f, next_obs=nxt,
                           intervened=f, policy_version=torch.zeros(n, dtype=torch.long),
                           env_index=torch.arange(n))


def _arrays(batch: Any) -> dict[str, np.ndarray]:
    out = {f"obs/{k}": v.numpy() for k, v in batch.obs.items()}
    out.update({f"next_obs/{k}": v.numpy() for k, v in batch.next_obs.items()})
    for name in ("action", "reward", "terminated", "truncated", "intervened", "policy_version", "env_index"):
        out[name] = getattr(batch, name).numpy()
    return out


# ---- 1. throughput -------------------------------------------------------------------------------


def _sender(method: str, addr: str, image: bool, rows: int, chunks: int, copy_on_send: bool = True,
            cpu: Any = None) -> None:
    """Send ``chunks`` chunks of ``rows`` transitions by ``method``; put the process's CPU seconds on ``cpu``.

    CPU time is counted from the first send until everything left (acknowledged, for ours): on a loaded machine it
    moves far less than throughput does.
    """
    torch.set_num_threads(1)
    batch = _chunk(image, rows)
    if method in OURS:
        from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

        ep = ZmqActorEndpoint(addr, 1, _spec(image), ZmqSettings(outbox_size=32 if image else 256,
                                                                  resend_after_s=30.0, copy_on_send=copy_on_send,
                                                                  coalesce=method == "ours"))
        ep.connected.wait(30)
        gc.collect()  # the imports' garbage, before the clock starts (see _throughput)
        c0 = time.process_time()
        for _ in range(chunks):
            ep.send(batch, timeout_s=60)
        deadline = time.monotonic() + 120
        while ep.unacked() and time.monotonic() < deadline:
            time.sleep(0.01)
        if cpu is not None:
            cpu.put(time.process_time() - c0)
        ep.close()
        return
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 32 if image else 256)  # the same window as ours
    sock.connect(addr)
    arrays = _arrays(batch)
    gc.collect()
    c0 = time.process_time()
    for _ in range(chunks):
        if method in ("raw", "raw_crc"):
            bufs = [memoryview(a.reshape(-1).view(np.uint8)) for a in arrays.values()]
            if method == "raw_crc":  # the same integrity check as ours, nothing else
                sums = np.array([CHECKSUMS[CHECKSUM](b) for b in bufs], dtype=np.uint32)
                bufs.append(memoryview(sums.view(np.uint8)))
            sock.send_multipart(bufs, copy=False)
        else:  # pickle + lz4 of the dict of tensors, as the peer stack sends
            import lz4.frame

            payload = {"obs": batch.obs, "next_obs": batch.next_obs, "action": batch.action, "reward": batch.reward,
                       "terminated": batch.terminated, "truncated": batch.truncated}
            sock.send(lz4.frame.compress(pickle.dumps(payload)))
    # Wait until every zero-copy frame is on the wire while the arrays it points into are alive
    # (returning first lets interpreter shutdown free them under libzmq's feet).
    sock.setsockopt(zmq.LINGER, 60_000)
    sock.close()
    ctx.term()
    if cpu is not None:
        cpu.put(time.process_time() - c0)
    del arrays, batch


def _throughput(method: str, image: bool, rows: int, chunks: int,
                copy_on_send: bool = True) -> tuple[float, float, float, float]:
    """(transitions/s, MB/s of array payload) received by this process, and the CPU seconds per million
    transitions of the sender and of this receiver.

    Each process collects its garbage once before its clock starts, whatever the method: the imports (torch's above
    all) leave a debt that the collector pays in one full pass over the heap once a loop has allocated enough, which
    fell inside the window of a method that allocates (ours) by chance and cost up to a second of one run.
    """
    ctx = mp.get_context("spawn")
    cpu = ctx.Queue()
    payload = sum(a.nbytes for a in _arrays(_chunk(image, rows)).values())
    if method in OURS:
        from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

        learner = ZmqLearnerEndpoint("tcp://127.0.0.1:0", _spec(image), ZmqSettings(inbox_size=32 if image else 64))
        proc = ctx.Process(target=_sender, args=(method, learner.address, image, rows, chunks, copy_on_send, cpu))
        gc.collect()  # before the sender starts: while it sends, the learner's I/O thread would take chunks untimed
        proc.start()
        first = learner.recv(120)  # timed from here (with coalescing, a batch may hold several chunks)
        assert first is not None
        left = chunks * rows - len(first)
        t0, c0 = time.perf_counter(), time.process_time()
        while left > 0:
            batch = learner.recv(60)
            if batch is None:
                raise RuntimeError(f"{method}: {left} transitions did not arrive")
            left -= len(batch)
        dt, mine = time.perf_counter() - t0, time.process_time() - c0
        moved = chunks * rows - len(first)
        theirs = cpu.get(timeout=180)
        proc.join(120)
        learner.close()
        return (moved / dt, moved * payload / rows / dt / 1e6, theirs / (chunks * rows) * 1e6,
                mine / moved * 1e6)
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 32 if image else 64)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    proc = ctx.Process(target=_sender, args=(method, f"tcp://127.0.0.1:{port}", image, rows, chunks, True, cpu))
    gc.collect()
    proc.start()
    unpack = method == "pickle_lz4"
    if unpack:
        import lz4.frame
    sock.recv_multipart(copy=False)
    t0, c0 = time.perf_counter(), time.process_time()
    check = CHECKSUMS[CHECKSUM]
    for _ in range(chunks - 1):
        frames = sock.recv_multipart(copy=False)
        if unpack:
            pickle.loads(lz4.frame.decompress(frames[0].buffer))
        elif method == "raw_crc":
            sums = np.frombuffer(frames[-1].buffer, dtype=np.uint32)
            if any(check(f.buffer) != int(c) for f, c in zip(frames[:-1], sums)):
                raise RuntimeError("raw_crc: checksum mismatch")
    dt, mine = time.perf_counter() - t0, time.process_time() - c0
    theirs = cpu.get(timeout=180)
    proc.join(120)
    sock.close(0)
    moved = (chunks - 1) * rows
    return moved / dt, moved * payload / rows / dt / 1e6, theirs / (chunks * rows) * 1e6, mine / moved * 1e6


THROUGHPUT_PAYLOADS = {"state": "state only (32-d state, 8-d action)", "images": "2 × 128×128×3 cameras + state"}
OURS = ("ours", "ours_single")
METHODS = ("ours", "ours_single", "raw", "raw_crc", "pickle_lz4")
STATE_ROWS = (16, 64, 256, 1024)


def bench_throughput(chunks: int, rounds: int, copy_on_send: bool = True,
                     state_rows: tuple[int, ...] = STATE_ROWS) -> list[dict[str, Any]]:
    """Rows of the throughput table: best of ``rounds`` interleaved runs per method (a shared machine's
    load comes and goes; interleaving gives each method the same chances); ``ours_over_method`` is the ratio of
    transitions/s, ours to that method's, in this run; ``load_1min`` the load average when each round started."""
    out: list[dict[str, Any]] = []
    cases = [("state", False, r) for r in state_rows] + [("images", True, 16)]
    methods = [m for m in METHODS if m != "pickle_lz4" or importlib.util.find_spec("lz4") is not None]
    if len(methods) < len(METHODS):
        print("lz4 is not installed: the pickle_lz4 peer is left out (pip install lz4)", flush=True)
    for payload, image, rows in cases:
        # The same bytes per run whatever the chunk size (at least 200 chunks); images: a tenth.
        n = max(chunks * 256 // rows, 200) if not image else max(chunks // 10, 20)
        res: dict[str, tuple[float, float, float, float]] = {}
        per_round: dict[str, list[float]] = {m: [] for m in methods}
        cpus: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}  # (sender, receiver) per round
        loads: list[float] = []
        for _ in range(rounds):
            loads.append(round(os.getloadavg()[0], 2))
            for m in methods:
                r = _throughput(m, image, rows, n if m != "pickle_lz4" or image else max(n // 4, 50), copy_on_send)
                per_round[m].append(r[0])
                cpus[m].append((r[2], r[3]))
                res[m] = max(res.get(m, r), r)
        for m, (tps, mbs, _, _) in res.items():
            cpu_s, cpu_r = (min(c[i] for c in cpus[m]) for i in (0, 1))  # the least CPU any round took
            out.append({"payload": payload, "chunk": rows, "method": m, "transitions_per_s": tps, "mb_per_s": mbs,
                        "rounds_transitions_per_s": per_round[m], "ours_over_method": res["ours"][0] / tps,
                        "load_1min": loads, "sender_cpu_s_per_mtr": cpu_s, "receiver_cpu_s_per_mtr": cpu_r,
                        "rounds_cpu_s_per_mtr": cpus[m]})
        print(throughput_table([{"results": {"throughput": {"rows": out[-len(res):]}}}]), flush=True)
    return out


def throughput_table(runs: list[dict[str, Any]]) -> str:
    """| transitions | chunk | method | transitions/s | MB/s | ours / method | load |, every run's rows in turn.

    ``load``: the 1-minute load average at the start of each round, min–max (absent from older result files).
    """
    rows = []
    for run in runs:
        for r in run["results"]["throughput"]["rows"]:
            loads = r.get("load_1min") or []
            load = f"{min(loads):.1f}–{max(loads):.1f}" if loads else ""
            rows.append([THROUGHPUT_PAYLOADS[r["payload"]], str(r["chunk"]), r["method"],
                         f"{r['transitions_per_s']:,.0f}", f"{r['mb_per_s']:,.1f}", f"{r['ours_over_method']:.2f}",
                         load])
    return markdown_table(["transitions", "chunk", "method", "transitions/s", "MB/s", "ours / method", "load"], rows)


def ratio_table(runs: list[dict[str, Any]]) -> str:
    """State-only rows: throughput ratios of ours to each peer, and CPU per transition of raw over ours.

    | chunk | ours / raw | ours / raw_crc | ours / ours_single | ours / pickle_lz4 | CPU raw ÷ ours (sender, receiver) |
    load |; a CPU ratio of 0.8 means ours spends 1.25× raw's CPU per transition.
    """
    rows = []
    for run in runs:
        by: dict[int, dict[str, Any]] = {}
        for r in run["results"]["throughput"]["rows"]:
            if r["payload"] == "state":
                by.setdefault(r["chunk"], {})[r["method"]] = r
        for chunk, ms in sorted(by.items()):
            loads = ms["ours"].get("load_1min") or []
            ours, raw = ms["ours"], ms.get("raw", {})
            cpu = (f"{raw['sender_cpu_s_per_mtr'] / ours['sender_cpu_s_per_mtr']:.2f}, "
                   f"{raw['receiver_cpu_s_per_mtr'] / ours['receiver_cpu_s_per_mtr']:.2f}"
                   if "sender_cpu_s_per_mtr" in ours and "sender_cpu_s_per_mtr" in raw else "")
            rows.append([str(chunk), *(f"{ms[m]['ours_over_method']:.2f}" if m in ms else ""
                                       for m in ("raw", "raw_crc", "ours_single", "pickle_lz4")), cpu,
                         f"{min(loads):.1f}–{max(loads):.1f}" if loads else ""])
    return markdown_table(["chunk (state-only transitions)", "ours / raw", "ours / raw_crc", "ours / ours_single",
                           "ours / pickle_lz4", "CPU per transition, raw ÷ ours (sender, receiver)", "load"], rows)


# ---- 2. weight broadcast -----------------------------------------------------------------------


def _weight_actor(method: str, addr: str, ident: int, versions: int, out: Any) -> None:
    torch.set_num_threads(1)
    if method == "ours":
        from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

        ep = ZmqActorEndpoint(addr, ident, _spec(False), ZmqSettings(heartbeat_s=0.2))
        ep.connected.wait(60)
        out.put(("ready", ident, 0.0))
        for v in range(1, versions + 1):
            w = ep.wait_weights(v - 1, 120)
            assert w is not None
            out.put(("got", w.version, time.time()))
        ep.close()
        return
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(addr)
    sock.send(b"ready")
    out.put(("ready", ident, 0.0))
    for _ in range(versions):
        frames = sock.recv_multipart(copy=False)
        torch.from_numpy(np.frombuffer(frames[1].buffer, dtype=np.float32).copy())
        out.put(("got", int(frames[0].bytes), time.time()))
    sock.close(0)


def bench_weights(params: int, actors: int, versions: int) -> dict[str, Any]:
    """Median/max latency to the last of ``actors`` actors, ours vs raw."""
    ctx = mp.get_context("spawn")
    weights = {"w": torch.randn(params)}
    results = {}
    lat_by: dict[str, list[float]] = {}
    for method in ("ours", "raw"):
        out = ctx.Queue()
        if method == "ours":
            from robot_rl.core.transport import VersionedWeights
            from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

            learner = ZmqLearnerEndpoint("tcp://127.0.0.1:0", _spec(False), ZmqSettings(heartbeat_s=0.2))
            addr = learner.address
        else:
            router = zmq.Context.instance().socket(zmq.ROUTER)
            port = router.bind_to_random_port("tcp://127.0.0.1")
            addr = f"tcp://127.0.0.1:{port}"
        procs = [ctx.Process(target=_weight_actor, args=(method, addr, i, versions, out)) for i in range(actors)]
        for p in procs:
            p.start()
        for _ in range(actors):
            assert out.get(timeout=120)[0] == "ready"
        idents = [router.recv_multipart()[0] for _ in range(actors)] if method == "raw" else []
        lat = []
        for v in range(1, versions + 1):
            t0 = time.time()
            if method == "ours":
                learner.publish_weights(VersionedWeights(v, weights))
            else:
                buf = memoryview(weights["w"].numpy().view(np.uint8))
                for ident in idents:
                    router.send_multipart([ident, str(v).encode(), buf], copy=False)
            done = [out.get(timeout=120) for _ in range(actors)]
            lat.append(max(t for _, _, t in done) - t0)
            time.sleep(0.3)
        for p in procs:
            p.join(60)
        if method == "ours":
            learner.close()
        else:
            router.close(0)
        results[method] = (statistics.median(lat), max(lat))
        lat_by[method] = lat
    summary = {"params": params, "actors": actors, "versions": versions, "methods": {
        m: {"median_s": med, "max_s": mx, "latencies_s": lat_by[m], "ours_over_method": results["ours"][0] / med}
        for m, (med, mx) in results.items()}}
    print(weights_table([{"results": {"weights": summary}}]), flush=True)
    return summary


def weights_table(runs: list[dict[str, Any]]) -> str:
    """| method | median s | max s | ours / method (median) |, per run."""
    rows = []
    for run in runs:
        w = run["results"]["weights"]
        size = f"{w['params'] / 1e6:.0f}M params = {w['params'] * 4 / 1e6:.0f} MB, {w['actors']} actors"
        rows += [[f"{m} ({size})", f"{r['median_s']:.3f}", f"{r['max_s']:.3f}", f"{r['ours_over_method']:.2f}"]
                 for m, r in w["methods"].items()]
    return markdown_table(["method", "median s", "max s", "ours / method (median)"], rows)


# ---- 3. control-loop jitter --------------------------------------------------------------------


def _busy_learner(addr: str, seconds: float) -> None:
    from robot_rl.loop.learner import Learner
    from robot_rl.policies.sac import SACConfig
    from robot_rl.sims.reach import ReachConfig
    from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

    # One core's worth: on this 2-core box the learner shares the CPU with the actor (in a real
    # deployment it runs on its own GPU machine).
    torch.set_num_threads(1)
    env = ReachConfig(num_envs=1).make(torch.device("cpu"), 0)
    algo = SACConfig(learning_starts=64, batch_size=256).build(env.spec, "cpu", 0)
    ep = ZmqLearnerEndpoint(addr, env.spec, ZmqSettings(ack_after="confirm"))
    learner = Learner(algo, env.spec, ep, "cpu", num_envs_total=4)
    learner.publish()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        while learner.pump(0.0):
            pass
        if learner.owed_updates:
            learner.update_off_policy(50)
            learner.publish()
        else:
            learner.pump(0.01)
    ep.close()


def _loop_periods(addr: str | None, seconds: float, spill_dir: str = "") -> tuple[list[float], int, int]:
    from robot_rl.hardware.rate import RateLoop
    from robot_rl.loop.actor import Actor
    from robot_rl.policies.sac import SACConfig
    from robot_rl.sims.reach import ReachConfig
    from robot_rl.transport.inproc import InprocTransport
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

    env = ReachConfig(num_envs=4).make(torch.device("cpu"), 1)
    algo = SACConfig().build(env.spec, "cpu", 0)
    if addr is None:
        t = InprocTransport(max_queued_batches=10**6)
        endpoint: Any = t.actor_endpoint(1)
        from robot_rl.core.transport import VersionedWeights

        t.learner_endpoint().publish_weights(VersionedWeights(1, algo.actor_weights()))
    else:
        # A robot's settings: spill rather than block when the learner falls behind.
        endpoint = ZmqActorEndpoint(addr, 1, env.spec, ZmqSettings(outbox_policy="spill", spill_dir=spill_dir))
    actor = Actor(env, algo.make_policy(), endpoint)
    actor.wait_for_weights(-1, 120)
    rate, ticks = RateLoop(50.0), []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        rate.wait()
        ticks.append(time.monotonic())
        actor.sync_weights()
        actor.step()
    version, spilled = actor.policy_version, 0
    if addr is not None:
        spilled = endpoint.spill.spilled
        endpoint.close()
    return [b - a for a, b in itertools.pairwise(ticks)], version, spilled


def bench_jitter(seconds: float) -> dict[str, Any]:
    """Period statistics of the 50 Hz loop, idle vs next to a busy learner process."""
    ctx = mp.get_context("spawn")
    idle, _, _ = _loop_periods(None, seconds)
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(0)
    addr = f"tcp://127.0.0.1:{port}"
    proc = ctx.Process(target=_busy_learner, args=(addr, seconds + 60))
    proc.start()
    import tempfile

    with tempfile.TemporaryDirectory() as spill_dir:
        busy, version, spilled = _loop_periods(addr, seconds, spill_dir)
    proc.terminate()
    proc.join(30)

    def stats(xs: list[float]) -> dict[str, float]:
        ms = np.array(xs) * 1000
        return {"periods": len(xs), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                "max_ms": float(ms.max()), "mean_ms": float(ms.mean()), "mean_over_period": float(ms.mean()) / 20.0}

    out = {"seconds": seconds, "rate_hz": 50.0, "idle": stats(idle),
           "busy": {**stats(busy), "weights_version": version, "chunks_spilled": spilled}}
    print(jitter_table([{"results": {"jitter": out}}]), flush=True)
    return out


def jitter_table(runs: list[dict[str, Any]]) -> str:
    """| 50 Hz actor loop | periods | p50 ms | p99 ms | max ms | mean ms | mean / 20 ms |, per run."""
    rows = []
    for run in runs:
        j = run["results"]["jitter"]
        b = j["busy"]
        for name, r in (("no learner (in-process queue)", j["idle"]),
                        (f"learner process busy in SAC updates (weights v{b['weights_version']}; "
                         f"{b['chunks_spilled']} chunks spilled)", b)):
            rows.append([name, str(r["periods"]), f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['max_ms']:.2f}",
                         f"{r['mean_ms']:.2f}", f"{r['mean_over_period']:.3f}"])
    return markdown_table(["50 Hz actor loop", "periods", "p50 ms", "p99 ms", "max ms", "mean ms", "mean / 20 ms"],
                          rows)


def main() -> None:
    """Run the selected benchmarks, write the result file, print Markdown tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["throughput", "weights", "jitter"], nargs="*")
    ap.add_argument("--chunks", type=int, default=2000, help="chunks per throughput run (image runs: a tenth)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds (best is reported)")
    ap.add_argument("--rows", type=int, nargs="*", default=list(STATE_ROWS),
                    help="state-only chunk sizes (transitions per chunk)")
    ap.add_argument("--no-copy-on-send", action="store_true",
                    help="ours without the sender's defensive copy (transport.copy_on_send=false)")
    ap.add_argument("--params", type=int, default=5_000_000)
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--versions", type=int, default=5)
    ap.add_argument("--jitter-s", type=float, default=20.0)
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC)
    which = args.only or ["throughput", "weights", "jitter"]
    print(f"machine: {platform.processor() or platform.machine()}, {mp.cpu_count()} CPUs; torch {torch.__version__}, "
          f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})", flush=True)
    results: dict[str, Any] = {"pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(), "checksum": CHECKSUM}
    if "throughput" in which:
        results["throughput"] = {"chunks": args.chunks, "rounds": args.rounds,
                                 "copy_on_send": not args.no_copy_on_send,
                                 "rows": bench_throughput(args.chunks, args.rounds, not args.no_copy_on_send,
                                                          tuple(args.rows))}
    if "weights" in which:
        results["weights"] = bench_weights(args.params, args.actors, args.versions)
    if "jitter" in which:
        results["jitter"] = bench_jitter(args.jitter_s)
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
