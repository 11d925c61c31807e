"""Closed-loop success of a distilled student's exported C, next to torch, on the same episodes.

    python examples/distill_reach_pixels.py --out runs/distill_reach_pixels      # the student (about 12 min)
    python benchmarks/distill_c_closed_loop.py runs/distill_reach_pixels          # this, about 1 min

The student's float32 and int8_full C are generated as `robot-rl export` generates them, compiled for the host and
run through ctypes as the policy of the student's task: 100 episodes each, the evaluation seed of
`robot-rl distill`. int8_full is calibrated twice: on recorded observations only (what `robot-rl distill` exports
with), and on 200 random + 200 recorded (`robot-rl export`'s mix at these counts); q15 (fixed point) is
calibrated on the recorded observations and fed the state in its Q formats, and so is q7 (int8 weights and
activations, int16 state and action). Also prints the max and mean
|C − torch| on 400 held-out recorded observations. Writes benchmarks/results/distill_c_closed_loop.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.transition import Obs
from robot_rl.export.c_fixed import generate_fixed_c
from robot_rl.export.c_int8 import generate_int8_c
from robot_rl.export.c_vision import generate_vision_c
from robot_rl.export.fixed import FixedPlan, build_plan, quantize
from robot_rl.export.fixed_formats import Q7, Q15
from robot_rl.export.int8_full import calibrate
from robot_rl.export.run_export import load_actor, random_observations, recorded_observations, torch_actions
from robot_rl.export.toolchain import VisionHarness, build_vision_harness
from robot_rl.export.vision import VisionGraph, extract_graph
from robot_rl.loop.evaluate import evaluate


class CPolicy(Policy):
    """A compiled C policy (host shared library) behind the Policy interface."""

    def __init__(self, lib: VisionHarness, graph: VisionGraph, action_shape: tuple[int, ...],
                 plan: FixedPlan | None = None) -> None:
        super().__init__()
        self.lib, self.graph, self.action_shape, self.plan = lib, graph, action_shape, plan

    def act(self, obs: Obs, deterministic: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        images = [obs[cam.key].numpy() for cam in self.graph.cameras]
        action = self.forward(images, obs["state"].numpy() if self.graph.state_dim else None)
        return torch.from_numpy(action.astype(np.float32)).reshape(-1, *self.action_shape), {}

    def forward(self, images: list[np.ndarray], state: np.ndarray | None) -> np.ndarray:
        """Float actions; a q15 or q7 library gets the state in its Q formats and returns actions in Q(f_act)."""
        if self.plan is None:
            return np.asarray(self.lib.forward(images, state), dtype=np.float64)
        q_state = quantize(state, self.plan.state.frac[None, :]) \
            if state is not None and self.plan.state is not None else None
        return np.asarray(self.lib.forward(images, q_state), dtype=np.float64) * 2.0**-self.plan.f_act


def main() -> None:
    """Evaluate torch, float32 C and int8_full C (two calibrations) in closed loop; print and save."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a pixel SAC run directory (a `robot-rl distill` student, or a teacher)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--json", default="distill_c_closed_loop.json", help="file name under benchmarks/results/")
    args = ap.parse_args()
    torch.set_num_threads(1)
    loaded = load_actor(args.run)
    policy, spec = loaded.policy, loaded.spec
    graph = extract_graph(policy, spec)
    if not isinstance(graph, VisionGraph):
        raise SystemExit("this benchmark takes a pixel actor (an image camera and optional state)")
    recorded = recorded_observations(loaded, 400, 0)
    mixed = {k: np.concatenate([random_observations(spec, policy, 200, 0)[k], recorded[k][:200]]) for k in recorded}
    held = recorded_observations(loaded, 400, 7)
    state = recorded["state"] if graph.state_dim else None
    ranges = calibrate(graph, [recorded[c.key] for c in graph.cameras], state)
    absmax = np.abs(state).max(axis=0) if state is not None else None
    q15, q7 = (build_plan(graph, ranges, absmax, width) for width in (Q15, Q7))
    variants = {"float32 C": (generate_vision_c(graph, "policy", "float32"), None),
                "int8_full C, calibrated on 400 recorded": (_int8(graph, recorded), None),
                "int8_full C, calibrated on 200 random + 200 recorded": (_int8(graph, mixed), None),
                "q15 C, calibrated on 400 recorded": (generate_fixed_c(q15, "policy"), q15),
                "q7 C, calibrated on 400 recorded": (generate_fixed_c(q7, "policy"), q7)}
    results: dict[str, Any] = {"run": str(args.run), "episodes": args.episodes}
    results["torch"] = _score(policy, loaded.task, args.episodes)
    with tempfile.TemporaryDirectory(prefix="distill_c_") as tmp:
        for i, (name, (src, q_plan)) in enumerate(variants.items()):
            # One directory per variant: dlopen of a path already loaded would return the first library.
            lib = build_vision_harness(src, Path(tmp) / f"v{i}",
                                       [int(np.prod(c.image_shape)) for c in graph.cameras], graph.state_dim,
                                       graph.act_dim)
            c_policy = CPolicy(lib, graph, tuple(spec.action.shape), q_plan)
            got = c_policy.forward([held[c.key] for c in graph.cameras], held["state"] if graph.state_dim else None)
            err = np.abs(got - torch_actions(policy, held))
            results[name] = {**_score(c_policy, loaded.task, args.episodes),
                             "max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
                             "const_bytes": src.weight_bytes, "workspace_bytes": src.workspace_bytes}
    for name, r in results.items():
        if isinstance(r, dict):
            extra = (f", |C - torch| max {r['max_abs_err']:.3g} mean {r['mean_abs_err']:.3g}"
                     if "max_abs_err" in r else "")
            print(f"{name:55s} success {r['success_rate']:.2f}, length {r['mean_length']:.1f}{extra}")
    out = Path(__file__).parent / "results" / args.json
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


def _int8(graph: VisionGraph, obs: dict[str, np.ndarray]) -> Any:
    images = [obs[cam.key] for cam in graph.cameras]
    return generate_int8_c(graph, calibrate(graph, images, obs["state"] if graph.state_dim else None), "policy")


def _score(policy: Policy, task: Any, episodes: int) -> dict[str, float]:
    env = task.make("cpu", 12345, num_envs=min(50, episodes))  # robot-rl distill's evaluation episodes
    try:
        return evaluate(policy, env, episodes, seed=12345).as_dict()
    finally:
        env.close()


def _err(x: float) -> str:
    """An error as the RESULTS tables give it: 2 significant digits (3 from 1 up), below 1e-4 in e-notation."""
    if x < 1e-4:
        mantissa, exp = f"{x:.1e}".split("e")
        return f"{mantissa}e{int(exp)}"
    return f"{x:#.3g}" if x >= 1 else f"{x:#.2g}"


def _rows(result: dict[str, Any], labels: dict[str, str]) -> list[str]:
    rows = []
    for key, label in labels.items():
        r = result[key]
        err = f" {_err(r['max_abs_err'])} / {_err(r['mean_abs_err'])} |" if "max_abs_err" in r else " |"
        rows.append(f"| {label} | {r['success_rate']:.2f} | {r['mean_length']:.1f} |{err}")
    return rows


HEAD = ["| policy | success | mean length | max / mean \\|C − torch\\| (400 held-out recorded obs) |",
        "| --- | ---: | ---: | --- |"]
VARIANTS = ("float32 C", "int8_full C, calibrated on 400 recorded",
            "int8_full C, calibrated on 200 random + 200 recorded", "q15 C, calibrated on 400 recorded",
            "q7 C, calibrated on 400 recorded")


def teacher_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_export.md's trained pixel SAC policy in closed loop: torch and each C variant (one result file)."""
    result = records[0]["results"]
    labels = {"torch": "trained SAC, torch", **{v: v for v in VARIANTS if v in result}}
    return "\n".join([*HEAD, *_rows(result, labels)])


def student_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_export.md's distilled student in closed loop: the teacher's torch row (its result file first), then
    the student's torch and C variants (its result file second)."""
    teacher, student = records[0]["results"], records[1]["results"]
    labels = {"torch": "student (32×32, torch)", "float32 C": "student, float32 C",
              VARIANTS[1]: f"student, {VARIANTS[1]} (what `distill` exports)", VARIANTS[2]: f"student, {VARIANTS[2]}",
              VARIANTS[3]: "student, q15 C", VARIANTS[4]: "student, q7 C"}
    return "\n".join([*HEAD, *_rows(teacher, {"torch": "teacher (SAC, 64×64, torch)"}),
                      *_rows(student, {k: v for k, v in labels.items() if k in student})])


C_VARIANTS = {"float32 C": "float32 C", VARIANTS[1]: "int8_full C", VARIANTS[3]: "q15 C", VARIANTS[4]: "q7 C"}


def _c_row(result: dict[str, Any], key: str) -> tuple[str, str]:
    """The C variants the file holds, named, and the same statistic of each, joined by " / "."""
    have = [k for k in C_VARIANTS if k in result]
    names = " / ".join(C_VARIANTS[k] for k in have)
    return names, " / ".join(f"{result[k][key]:{'.2f' if key == 'success_rate' else '.1f'}}" for k in have)


def docs_student_summary(records: list[dict[str, Any]]) -> str:
    """docs/distill.md's trained pixel SAC teacher and its distilled student: success of the teacher (its result
    file first), of the student in torch and of each of its C variants (its result file second)."""
    teacher, student = records[0]["results"], records[1]["results"]
    t, s = teacher["torch"]["success_rate"], student["torch"]["success_rate"]
    names, successes = _c_row(student, "success_rate")
    return "\n".join(["| policy (the same 100 episodes) | success |", "| --- | ---: |",
                      f"| teacher (SAC, 64×64, torch) | {t:.2f} |",
                      f"| student (`small_cnn`, 32×32, torch) | **{s:.2f}** ({s / t:.2f}× the teacher) |",
                      f"| student as {names} | {successes} |"])


def docs_flow_student(records: list[dict[str, Any]]) -> str:
    """docs/distill.md's flow chunk student: success and mean episode length in torch and of each C variant."""
    r = records[0]["results"]
    names, successes = _c_row(r, "success_rate")
    _, lengths = _c_row(r, "mean_length")
    return "\n".join(["| policy (the same 100 episodes) | success | mean length (steps) |", "| --- | ---: | ---: |",
                      f"| student (`small_cnn`, 48×48, predicts the chunk `[8, 2]`; torch) | "
                      f"{r['torch']['success_rate']:.2f} | {r['torch']['mean_length']:.1f} |",
                      f"| student as {names} | {successes} | {lengths} |"])


def docs_scripted_student(records: list[dict[str, Any]]) -> str:
    """docs/distill.md's closing summary: the scripted teacher's 32×32 student in torch and as the int8_full C that
    `distill` exports, with that C's size as the generator gives it."""
    r = records[0]["results"]
    c = r[VARIANTS[1]]
    return "\n".join(["| | success, same 100 episodes | int8_full C, generator's flash / RAM |",
                      "| --- | ---: | ---: |",
                      f"| student, torch | {r['torch']['success_rate']:.2f} | |",
                      f"| student, its int8_full C in closed loop (host build) | {c['success_rate']:.2f} | "
                      f"{c['const_bytes']:,} / {c['workspace_bytes']:,} B |"])



def _student_labels(result: dict[str, Any], torch_label: str) -> dict[str, str]:
    labels = {"torch": torch_label, "float32 C": "student, float32 C",
              VARIANTS[1]: f"student, {VARIANTS[1]} (what `distill` exports)", VARIANTS[2]: f"student, {VARIANTS[2]}",
              VARIANTS[3]: "student, q15 C", VARIANTS[4]: "student, q7 C"}
    return {k: v for k, v in labels.items() if k in result}


def scripted_student_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_export.md's student of the scripted pixel teacher: torch and each C variant (one result file; the
    teacher's own evaluation is not in it)."""
    result = records[0]["results"]
    return "\n".join([*HEAD, *_rows(result, _student_labels(result, "student (32×32, torch)"))])


def chunk_student_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_export.md's student of the flow chunk teacher (its errors are over the 16 values of a chunk)."""
    result = records[0]["results"]
    head = [HEAD[0].replace("(400 held-out", "over the 16 chunk values (400 held-out"), HEAD[1]]
    return "\n".join([*head, *_rows(result, _student_labels(result, "student (predicts the whole chunk `[8, 2]`, "
                                                                      "torch)"))])


def sizes_table(records: list[dict[str, Any]]) -> str:
    """The C generator's constants and workspace per variant (each variant calibrated on recorded observations)."""
    result = records[0]["results"]
    rows = ["| variant | generator: constants / workspace B |", "| --- | ---: |"]
    for key in VARIANTS:
        if key in result and "random" not in key:
            r = result[key]
            rows.append(f"| {key.split(' C')[0]} | {r['const_bytes']:,} / {r['workspace_bytes']:,} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
