"""SAC env steps to 80 % success on sparse-reward ``mujoco/pick_cube``, with camera-based reward models.

    .venv/bin/python benchmarks/reward_pick_bench.py [--budget 120000] [--max-wall 3300] [--replay-demos N]
        [--variants sparse classifier prm] [--quick]

Three SAC runs (the task's SAC preset through ``resolve_train_config`` + the in-process runner, what
``robot-rl train`` runs, with its ``reward`` section), the same seed and the same state-observation
policy, differing only in the training reward:

(a) ``sparse``: the env's own 0-on-success / −1-per-step reward (success: the cube grasped and
    within 3 cm of a goal in the air);
(b) ``classifier``: that reward replaced by a calibrated **image** success classifier
    (:class:`~robot_rl.rewards.classifier.SuccessClassifier`, the built-in CNN, through
    :class:`~robot_rl.rewards.wrapper.RewardWrapper`: 0 where it fires, −1 elsewhere), as on a real
    robot with no success signal;
(c) ``prm``: the sparse reward plus potential-based shaping ``γΦ(s') − Φ(s)`` from the built-in
    **image + language** process reward model (:class:`~robot_rl.rewards.prm.ProcessRewardModel`,
    :class:`~robot_rl.rewards.wrapper.ProgressShapingWrapper`).

The env renders the ``front`` and ``side`` cameras (``task.obs=state_pixels``; one view alone cannot
tell a 3 cm distance in 3-D: the front camera's precision stayed under 0.5 at any recall); the
reward wrappers read them, and
``reward.policy_keys=[state]`` hands the policy the state only. Both reward models are
trained once, before the runs, on episodes of the task's scripted demonstrator
(:class:`~robot_rl.sims.mujoco.pick_expert.ScriptedPickDemonstrator`) with action noise, through the
same ``train_classifier`` / ``train_prm`` as ``robot-rl reward train-classifier`` / ``train-prm``;
the classifier's threshold is calibrated on held-out episodes for precision ≥ 0.95, and the PRM's
Spearman ρ with true progress is measured on held-out successful demos. Success in evaluation is
always the env's own criterion; termination is the env's in every variant. ``--replay-demos N``
puts N scripted demos, recorded through each variant's own training env, in SAC's demo buffer
(RLPD 50/50 sampling, the HIL-SERL recipe).

A variant that does not reach 80 % within the budget is reported as such (with the budget as the
bound), never extrapolated. Writes benchmarks/reward_pick_curves_s<seed>.png and a JSON of the curves.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from reward_sac_common import plot_curves, print_table, train_capped

from robot_rl.config import resolve_train_config
from robot_rl.data.episode import Episode
from robot_rl.data.recorder import record_episodes
from robot_rl.rewards.classifier import ClassifierConfig, plot_pr_curve, train_classifier
from robot_rl.rewards.data import camera_keys, episode_frames
from robot_rl.rewards.prm import PRMConfig, episode_progress, spearman, train_prm
from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator
from robot_rl.sims.mujoco.tasks import MujocoPickCubeConfig

OUT = Path(__file__).resolve().parent
GOAL = "pick up the red cube and hold it at the green marker"
SHAPING_WEIGHT = 10.0
CAMERA, EXTRA_CAMERAS = "front", ("side",)  # two views: one alone cannot judge a 3 cm distance in 3-D
IMAGE_SIZE = 64


class ListSink:
    """Keeps recorded episodes in memory (the recorder's sink protocol)."""

    def __init__(self) -> None:
        self.episodes: list[Episode] = []

    def write(self, ep: Episode) -> None:
        """Keep ``ep``."""
        self.episodes.append(ep)

    def close(self) -> None:
        """Nothing to flush."""


def pick_env_config(**overrides: Any) -> MujocoPickCubeConfig:
    """``mujoco/pick_cube`` as its SAC preset runs it, rendering the reward camera beside the state."""
    preset = MujocoPickCubeConfig.presets["sac"]
    return MujocoPickCubeConfig(max_episode_steps=int(preset["task.max_episode_steps"]),
                                action_scale=float(preset["task.action_scale"]), reward="sparse",
                                obs="state_pixels", camera=CAMERA, extra_cameras=EXTRA_CAMERAS,
                                image_size=IMAGE_SIZE, **overrides)


def demo_episodes(episodes: int, seed: int, noise: float, hold: bool = False) -> list[Episode]:
    """Scripted-demonstrator episodes with ``image.front`` and ``image.side`` frames (the models read only these).

    ``hold``: episodes do not end on success; the demonstrator keeps the cube at the goal, its noise
    carrying it back and forth across the 3 cm border (classifier data, as recorded on a robot).
    """
    env = pick_env_config(num_envs=16, terminate_on_success=not hold).make("cpu", seed)
    sink = ListSink()
    record_episodes(env, ScriptedPickDemonstrator(noise=noise, seed=seed), sink, episodes, seed=seed,
                    deterministic=False, task=GOAL)
    env.close()
    return sink.episodes


def train_classifier_model(n_episodes: int, seed: int, out: Path, quick: bool, target_precision: float
                           ) -> dict[str, Any]:
    """Collect "hold" episodes, train the image classifier, calibrate it on held-out episodes."""
    t0 = time.perf_counter()
    # Careful and sloppy holds: many frames on both sides of the success border, and failures.
    holds = demo_episodes(n_episodes // 2, seed + 200, noise=0.3, hold=True) + \
        demo_episodes(n_episodes - n_episodes // 2, seed + 300, noise=1.0, hold=True)
    collect_s = time.perf_counter() - t0
    clf = train_classifier(holds, out / "classifier", ClassifierConfig(steps=150 if quick else 2000, seed=seed,
                                                                       target_precision=target_precision))
    plot_pr_curve(clf.calibration, OUT / f"reward_pick_pr_{'quick' if quick else f's{seed}'}.png",
                  title="pick_cube classifier (front + side cameras)")
    c = clf.calibration
    return {"hold_episodes": len(holds), "hold_frames": int(sum(len(e) for e in holds)),
            "hold_success_frames": int(sum(e.success.sum() for e in holds)), "collect_s": collect_s,
            "target_precision": target_precision, "threshold": c.threshold, "precision": c.precision,
            "recall": c.recall, "reached": c.reached, "held_out_frames": clf.held_out_frames,
            "held_out_success": c.positives, "train_s": clf.train_s}


def train_prm_model(n_demos: int, seed: int, out: Path, quick: bool) -> dict[str, Any]:
    """Collect demos that end at success, train the PRM, measure its Spearman ρ on held-out demos."""
    t0 = time.perf_counter()
    demos = demo_episodes(n_demos, seed + 100, noise=0.3)
    collect_s = time.perf_counter() - t0
    wins = [e for e in demos if e.is_success]
    split = int(0.8 * len(wins))
    prm = train_prm(wins[:split], out / "prm", PRMConfig(steps=150 if quick else 2000, seed=seed, instruction=GOAL))
    rhos = []
    keys = camera_keys(wins)
    for ep in wins[split:]:
        frames, _ = episode_frames(ep, keys)
        n = len(frames[keys[0]])
        if n > 2:
            rhos.append(spearman(episode_progress(prm.model, frames, GOAL), np.arange(n) / (n - 1)))
    return {"demos": len(demos), "demo_success": float(np.mean([e.is_success for e in demos])), "collect_s": collect_s,
            "train_demos": split, "loss": prm.final_loss, "held_out_demos": len(rhos),
            "spearman_median": float(np.median(rhos)) if rhos else float("nan"), "train_s": prm.train_s}


# ---- the variants: `robot-rl train`'s own reward section ------------------------------------

def variant_overrides(variant: str, model_dir: Path) -> list[str]:
    """The ``robot-rl train`` settings of one variant (the reward section: docs/rewards.md)."""
    if variant == "sparse":  # nothing reads a camera: no rendering
        return ["task.obs=state"]
    cams = ["task.obs=state_pixels", f"task.camera={CAMERA}", f"task.extra_cameras=[{','.join(EXTRA_CAMERAS)}]",
            f"task.image_size={IMAGE_SIZE}", "reward.policy_keys=[state]"]
    if variant == "classifier":
        return [*cams, f"reward.classifier={model_dir / 'classifier'}"]
    if variant == "prm":
        return [*cams, f"reward.prm={model_dir / 'prm'}", f"reward.goal={GOAL}",
                f"reward.shaping_weight={SHAPING_WEIGHT}"]
    raise ValueError(f"variant {variant!r} is not one of sparse, classifier, prm")


def run_variant(variant: str, model_dir: str, budget: int, max_wall: float, seed: int, root: str,
                replay_demos: int) -> dict[str, Any]:
    """Train one variant (in its own process); returns its eval curve and summary."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    torch.set_num_threads(1)
    overrides = [f"run.seed={seed}", f"run.root={root}", f"run.name={variant}", "run.progress=false",
                 "run.torch_threads=1", f"loop.total_env_steps={budget}", "loop.success_threshold=0.8",
                 "task.reward=sparse", "loop.checkpoint_every_s=100000", "replay.persist=false",
                 *variant_overrides(variant, Path(model_dir))]
    if replay_demos:
        # RLPD / HIL-SERL: demos recorded through the variant's own training env (so they carry its reward)
        # fill the demo buffer, sampled 50/50 with online data.
        store = Path(root) / f"demos_{variant}"
        cfg = resolve_train_config(task="mujoco/pick_cube", overrides=overrides)
        env = cfg.make_env("cpu", seed + 77)
        from robot_rl.data.recorder import StoreSink
        from robot_rl.data.store import EpisodeStore

        sink = StoreSink(EpisodeStore.create(store, env.spec, task=GOAL))
        record_episodes(env, ScriptedPickDemonstrator(noise=0.3, seed=seed), sink, replay_demos, seed=seed + 77,
                        deterministic=False, task=GOAL)
        env.close()
        overrides += [f"loop.demos_path={store}", "algo.demo_ratio=0.5"]
    cfg = resolve_train_config(task="mujoco/pick_cube", overrides=overrides)
    return train_capped(cfg, variant, max_wall)


def _worker(args: tuple[str, str, int, float, int, str, int]) -> dict[str, Any]:
    return run_variant(*args)


def main() -> None:
    """Train the reward models, run the SAC variants in parallel, print the table with ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=120_000, help="env steps per variant at most")
    ap.add_argument("--max-wall", type=float, default=3300.0, help="seconds per variant at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--demos", type=int, default=200,
                    help="scripted-demonstrator episodes per reward model (PRM demos; classifier hold episodes)")
    ap.add_argument("--variants", nargs="+", default=["sparse", "classifier", "prm"])
    ap.add_argument("--target-precision", type=float, default=0.95, help="the classifier's calibration target")
    ap.add_argument("--replay-demos", type=int, default=0,
                    help="scripted demos in SAC's demo buffer (RLPD 50/50 sampling, as HIL-SERL); 0 = none")
    ap.add_argument("--models-only", action="store_true", help="train and report the reward models, no SAC")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny budget")
    args = ap.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    if args.quick:
        args.budget, args.max_wall, args.demos = 3000, 90.0, 40
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as root:
        models: dict[str, Any] = {}
        if "classifier" in args.variants:
            models["classifier"] = train_classifier_model(args.demos, args.seed, Path(root) / "models", args.quick,
                                                          args.target_precision)
        if "prm" in args.variants:
            models["prm"] = train_prm_model(args.demos, args.seed, Path(root) / "models", args.quick)
        print(f"reward models: {json.dumps(models, indent=1)}", flush=True)
        if args.models_only:
            return
        jobs = [(v, str(Path(root) / "models"), args.budget, args.max_wall, args.seed, root, args.replay_demos)
                for v in args.variants]
        with mp.get_context("spawn").Pool(len(jobs)) as pool:
            results = pool.map(_worker, jobs)
    tag = ("quick" if args.quick else f"s{args.seed}") + (f"_demos{args.replay_demos}" if args.replay_demos else "")
    # Variants may run in separate invocations (same seed and settings): results merge by variant.
    path = OUT / f"reward_pick_{tag}.json"
    saved = json.loads(path.read_text()) if path.exists() and not args.quick else {"results": {}}
    saved["results"].update({r["variant"]: {**r, "budget": args.budget, "models": models} for r in results})
    path.write_text(json.dumps(saved, indent=1))
    merged = [saved["results"][v] for v in ("sparse", "classifier", "prm") if v in saved["results"]]
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch {torch.__version__}, seed {args.seed}, "
          f"budget {args.budget} env steps / {args.max_wall:.0f}s per variant; this run: {args.variants}")
    print_table(merged)
    plot_curves(merged, OUT / f"reward_pick_curves_{tag}.png",
                f"SAC on sparse mujoco/pick_cube, seed {args.seed}"
                + (f", {args.replay_demos} demos in replay" if args.replay_demos else "") + ": training reward")


if __name__ == "__main__":
    main()
