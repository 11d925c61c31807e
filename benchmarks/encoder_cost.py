"""Cost of SAC's camera encoders: the small DrQ CNN vs a frozen ResNet-10 / ResNet-18 trunk (HIL-SERL).

    .venv/bin/python benchmarks/encoder_cost.py [--batch 256] [--size 128] [--reps 2] [--threads 1] [--device cpu]
        [--amp-bf16] [--encoders cnn cnn_s2 resnet10 resnet18] [--image-channels 32] [--classifier-only]

One SAC learner per encoder, same settings otherwise (defaults: hidden 256×256, 2 critics, 50 features per
camera), with two cameras of SIZE×SIZE×3 and a 6-float state. Measured for each:

- one whole update at batch BATCH (DrQ shifts; trunk on obs and next_obs; heads, critic and actor forward and
  backward; Adam; Polyak), the median of REPS after one warm-up, and within it the trunk's forward alone;
- one action for a single observation (what the actor's control loop pays per step);
- parameters that train and parameters that are frozen;
- the actor-weights payload each publish sends (the wire codec's frames, bytes and tensor count) and the time
  to encode it, and the learner checkpoint (``torch.save`` of ``state_dict``);
- one training step of a success classifier (``--encoder``) at batch 64 on one SIZE×SIZE camera
  (``--classifier-only`` measures just that).

Prints ratios to the first encoder (the small CNN) in the same run and writes
benchmarks/results/encoder_cost[_bf16].json. ``--amp-bf16`` sets ``SACConfig.amp_bf16`` (the trunk then runs
under bf16 autocast too). Weights are random (the costs do not depend on them).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.sac import SACConfig
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.transport.codec import decode, encode
from robot_rl.transport.zmq_common import weights_arrays

ENCODERS = ("cnn", "cnn_s2", "resnet10", "resnet18")
"""``cnn_s2``: the small CNN with ``algo.image_conv_stride=2`` (every layer strided)."""


def make_spec(size: int) -> EnvSpec:
    obs = {"state": ArraySpec((6,)), **{f"image.cam{i}": ArraySpec((size, size, 3), "uint8") for i in range(2)}}
    return EnvSpec(observation=obs, action=ArraySpec((6,), "float32", -1.0, 1.0))


def random_batch(spec: EnvSpec, n: int, device: str, seed: int = 0) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)

    def obs() -> dict[str, torch.Tensor]:
        return {k: (torch.randint(0, 256, (n, *s.shape), generator=g, dtype=torch.uint8) if s.dtype == "uint8"
                    else torch.randn(n, *s.shape, generator=g)).to(device) for k, s in spec.observation.items()}

    return TransitionBatch(obs=obs(), action=(torch.rand(n, 6, generator=g) * 2 - 1).to(device),
                           reward=torch.randn(n, generator=g).to(device), terminated=torch.zeros(n, dtype=torch.bool,
                                                                                                   device=device),
                           truncated=torch.zeros(n, dtype=torch.bool, device=device), next_obs=obs(),
                           intervened=torch.zeros(n, dtype=torch.bool, device=device),
                           policy_version=torch.zeros(n, dtype=torch.int64, device=device),
                           env_index=torch.arange(n, device=device))


def timed(fn: Any, reps: int, device: str) -> float:
    """Median seconds of ``reps`` calls after one warm-up."""
    def once() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    once()
    return statistics.median(once() for _ in range(reps))


def measure(encoder: str, spec: EnvSpec, batch: TransitionBatch, reps: int, device: str, bf16: bool,
            channels: int = 32) -> dict[str, Any]:
    stride = 2 if encoder == "cnn_s2" else 1
    cfg = SACConfig(image_encoder=encoder.removesuffix("_s2"), image_conv_stride=stride,  # type: ignore[arg-type]
                    image_channels=channels, batch_size=len(batch), amp_bf16=bf16)
    algo = cfg.build(spec, device, seed=0)
    trunk = algo.actor.backbone
    nets = [algo.actor, algo.critic, *([algo.encoder_target] if algo.encoder_target is not None else [])]
    trainable = sum(p.numel() for n in nets for p in n.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in trunk.parameters()) if trunk is not None else 0
    update_s = timed(lambda: algo.update(batch), reps, device)
    trunk_s = 0.0
    if trunk is not None:
        with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            trunk_s = timed(lambda: (trunk(batch.obs), trunk(batch.next_obs)), reps, device)
    policy = algo.make_policy()
    one = {k: v[:1] for k, v in batch.obs.items()}
    act_s = timed(lambda: policy.act(one), max(reps, 10), device)
    weights = algo.actor_weights()
    frames = encode("weights", "bench", 1, weights_arrays(weights), meta={"version": 1})
    decode(frames)  # within the wire codec's default limits (arrays, bytes)
    encode_s = timed(lambda: encode("weights", "bench", 1, weights_arrays(weights), meta={"version": 1}), reps, "cpu")
    buf = io.BytesIO()
    torch.save(algo.state_dict(), buf)
    return {"encoder": encoder, "update_s": update_s, "trunk_forward_s": trunk_s, "act_s": act_s,
            "trainable_params": trainable, "frozen_params": frozen,
            "payload_bytes": sum(len(f) for f in frames), "payload_tensors": len(weights), "payload_encode_s": encode_s,
            "checkpoint_bytes": buf.tell()}


def classifier_step(encoder: str, size: int, reps: int, device: str) -> float:
    """Seconds of one BCE training step of a success classifier, batch 64, one camera."""
    model = SuccessClassifier({"image.front": (size, size, 3)}, encoder=encoder).to(device).train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    images = {"image.front": torch.randint(0, 256, (64, size, size, 3), dtype=torch.uint8, device=device)}
    label = torch.randint(0, 2, (64,), device=device).float()

    def step() -> None:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model.logits(images), label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return timed(step, max(reps, 3), device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp-bf16", action="store_true", help="SACConfig.amp_bf16 (trunk and heads in bf16)")
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=ENCODERS)
    parser.add_argument("--image-channels", type=int, default=32, help="the CNN's channels per layer (cnn, cnn_s2)")
    parser.add_argument("--classifier-only", action="store_true", help="only the success classifier's step")
    parser.add_argument("--out", type=Path, default=None,
                        help="default benchmarks/results/encoder_cost[_bf16|_classifier].json")
    args = parser.parse_args()
    suffix = "_classifier" if args.classifier_only else "_bf16" if args.amp_bf16 else ""
    out = args.out or Path(__file__).parent / "results" / f"encoder_cost{suffix}.json"
    torch.set_num_threads(args.threads)
    if args.classifier_only:
        rows = [{"encoder": e, "classifier_step_s": classifier_step(e, args.size, args.reps, args.device)}
                for e in args.encoders]
        for r in rows:
            print(f"{r['encoder']:10} classifier step {r['classifier_step_s']:.3f} s "
                  f"({r['classifier_step_s'] / rows[0]['classifier_step_s']:.2f}× {rows[0]['encoder']})")
        out.write_text(json.dumps({"meta": {"date": time.strftime("%Y-%m-%d"), "size": args.size,
                                            "threads": args.threads, "device": args.device}, "rows": rows}, indent=2))
        return
    spec = make_spec(args.size)
    batch = random_batch(spec, args.batch, args.device)
    rows = []
    for encoder in args.encoders:
        rows.append(measure(encoder, spec, batch, args.reps, args.device, args.amp_bf16, args.image_channels))
        if encoder != "cnn_s2":  # the classifier has no strided option
            rows[-1]["classifier_step_s"] = classifier_step(encoder, args.size, args.reps, args.device)
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    print(f"\nbatch {args.batch}, 2 cameras {args.size}×{args.size}, {args.device}, {args.threads} thread(s)"
          f"{', bf16 autocast' if args.amp_bf16 else ''}; ratios to {base['encoder']}")
    print(f"{'encoder':10} {'update s':>9} {'ratio':>6} {'trunk s':>8} {'act ms':>7} {'ratio':>6} {'trainable':>10} "
          f"{'frozen':>10} {'payload MB':>10} {'ratio':>6} {'ckpt MB':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['encoder']:10} {r['update_s']:9.2f} {r['update_s'] / base['update_s']:6.2f} "
              f"{r['trunk_forward_s']:8.2f} {1e3 * r['act_s']:7.1f} {r['act_s'] / base['act_s']:6.2f} "
              f"{r['trainable_params']:10,} {r['frozen_params']:10,} {r['payload_bytes'] / 1e6:10.1f} "
              f"{r['payload_bytes'] / base['payload_bytes']:6.2f} {r['checkpoint_bytes'] / 1e6:8.1f} "
              f"{r['checkpoint_bytes'] / base['checkpoint_bytes']:6.2f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "torch": torch.__version__, "batch": args.batch, "size": args.size, "threads": args.threads,
            "device": args.device, "reps": args.reps, "amp_bf16": args.amp_bf16, "image_channels": args.image_channels}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"written to {out}")


def _rows(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The encoders' rows of one result file and the first (the small CNN), which the ratios divide by."""
    rows = records[0]["results"]["rows"]
    return rows, rows[0]


def float32_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_encoders.md's float32 table: every cost, and its ratio to the small CNN (the trade-offs in bold)."""
    rows, base = _rows(records)
    lines = ["| encoder | update s | ratio | trunk s | act ms | ratio | trainable params | frozen params | payload MB "
             "(tensors) | ratio | learner state MB | ratio |", "|" + " --- |" * 12]
    for r in rows:
        fmt = "{:.2f}" if r is base else "**{:.2f}**"

        def bold(x: float, fmt: str = fmt) -> str:
            return fmt.format(x)
        trunk = f"{r['trunk_forward_s']:.2f}" if r["trunk_forward_s"] else "—"
        lines.append(f"| {r['encoder']} | {r['update_s']:.2f} | {bold(r['update_s'] / base['update_s'])} | {trunk} | "
                     f"{1e3 * r['act_s']:.1f} | {bold(r['act_s'] / base['act_s'])} | {r['trainable_params']:,} | "
                     f"{r['frozen_params']:,} | {r['payload_bytes'] / 1e6:.1f} ({r['payload_tensors']}) | "
                     f"{bold(r['payload_bytes'] / base['payload_bytes'])} | {r['checkpoint_bytes'] / 1e6:.1f} | "
                     f"{r['checkpoint_bytes'] / base['checkpoint_bytes']:.2f} |")
    return "\n".join(lines)


_STRIDE_NAMES = {"cnn": "cnn (DrQ, stride 2 then 1)", "cnn_s2": "cnn, `image_conv_stride=2`",
                 "resnet10": "resnet10 (frozen, random weights)"}


def stride_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_encoders.md's strided-CNN table: every file's encoders (one file per channel count), each against the
    first file's first encoder (the small CNN at its default channels)."""
    base = records[0]["results"]["rows"][0]
    lines = ["| encoder (two 64×64 cameras) | channels | update s | × cnn (32) | act ms | trainable params | "
             "payload MB |", "|" + " --- |" * 7]
    for rec in records:
        channels = rec["results"]["meta"].get("image_channels", 32)
        for r in rec["results"]["rows"]:
            name = _STRIDE_NAMES.get(r["encoder"], r["encoder"])
            if r["encoder"] == "cnn" and channels != 32:
                name = "cnn"
            lines.append(f"| {name} | {'–' if r['encoder'] == 'resnet10' else channels} | {r['update_s']:.2f} | "
                         f"{r['update_s'] / base['update_s']:.2f} | {1e3 * r['act_s']:.1f} | "
                         f"{r['trainable_params']:,} | {r['payload_bytes'] / 1e6:.1f} |")
    return "\n".join(lines)


def bf16_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_encoders.md's bf16 autocast table (``--amp-bf16``)."""
    rows, base = _rows(records)
    lines = ["| encoder | update s | ratio | trunk s | act ms | trainable params | payload MB | learner state MB |",
             "|" + " --- |" * 8]
    for r in rows:
        trunk = f"{r['trunk_forward_s']:.2f}" if r["trunk_forward_s"] else "—"
        lines.append(f"| {r['encoder']} | {r['update_s']:.2f} | {r['update_s'] / base['update_s']:.2f} | {trunk} | "
                     f"{1e3 * r['act_s']:.1f} | {r['trainable_params']:,} | {r['payload_bytes'] / 1e6:.1f} | "
                     f"{r['checkpoint_bytes'] / 1e6:.1f} |")
    return "\n".join(lines)


def classifier_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_encoders.md's success-classifier step (``--classifier-only``) and the default 400 steps' time."""
    rows, base = _rows(records)
    lines = ["| encoder | step s | ratio | default 400 steps |", "| --- | --- | --- | --- |"]
    for r in rows:
        minutes = round(r["classifier_step_s"] * 400 / 60 * 2) / 2
        lines.append(f"| {r['encoder']} | {r['classifier_step_s']:.3f} | "
                     f"{r['classifier_step_s'] / base['classifier_step_s']:.2f} | ~{minutes:g} min |")
    return "\n".join(lines)


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/algorithms.md's summary of the float32 costs, ratios to the small CNN in brackets."""
    rows, base = _rows(records)
    lines = ["| | update | act (1 obs) | trainable / frozen params | weights per publish | learner state |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def ratio(key: str, fmt: str, r: dict[str, Any] = r) -> str:
            return "" if r is base else f" ({r[key] / base[key]:{fmt}}×)"
        frozen = f"{r['frozen_params'] / 1e6:.3g} M" if r["frozen_params"] else "0"
        lines.append(f"| `{r['encoder']}` | {r['update_s']:.1f} s{ratio('update_s', '.2f')} | "
                     f"{1e3 * r['act_s']:.2g} ms{ratio('act_s', '.1f')} | "
                     f"{r['trainable_params'] / 1e6:.3g} M / {frozen} | "
                     f"{r['payload_bytes'] / 1e6:.0f} MB{ratio('payload_bytes', '.2f')} | "
                     f"{r['checkpoint_bytes'] / 1e6:.0f} MB |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
