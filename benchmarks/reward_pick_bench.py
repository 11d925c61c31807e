"""SAC env steps to 80 % success on sparse-reward ``mujoco/pick_cube``, with camera-based reward models.

    .venv/bin/python benchmarks/reward_pick_bench.py [--budget 120000] [--max-wall 3300] [--replay-demos N]
        [--variants sparse classifier prm] [--cameras front side wrist] [--target-precision P]
        [--shaping-weight W] [--models-dir DIR] [--models-only] [--seed S] [--quick]

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

The env renders the ``front``, ``side`` and ``wrist`` cameras (``--cameras``; ``task.obs=state_pixels``:
one view alone cannot tell a 3 cm distance in 3-D, and only the wrist view shows whether the cube sits
between closed fingers, which the success test checks); the reward wrappers read them, and
``reward.policy_keys=[state]`` hands the policy the state only. Both reward models are
trained once, before the runs, on episodes of the task's scripted demonstrator
(:class:`~robot_rl.sims.mujoco.pick_expert.ScriptedPickDemonstrator`) with action noise, through the
same ``train_classifier`` / ``train_prm`` as ``robot-rl reward train-classifier`` / ``train-prm``;
the classifier's threshold is calibrated on held-out episodes for ``--target-precision`` (0.95; a
model kept in ``--models-dir`` is recalibrated, not retrained, for a new target), and the PRM's
Spearman ρ with true progress is measured on held-out successful demos. Success in evaluation is
always the env's own criterion; termination is the env's in every variant. ``--replay-demos N``
puts N scripted demos, recorded through each variant's own training env, in SAC's demo buffer
(RLPD 50/50 sampling, the HIL-SERL recipe).

A variant that does not reach 80 % within the budget is reported as such (with the budget as the
bound), never extrapolated. Writes benchmarks/results/reward_pick_curves_s<seed>.png and a JSON of the curves.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from reward_sac_bench import plot_curves, print_table, train_capped

from robot_rl.data.episode import Episode
from robot_rl.data.recorder import record_episodes
from robot_rl.loop.config import resolve_train_config
from robot_rl.rewards.classifier import ClassifierConfig, plot_pr_curve, recalibrate_classifier, train_classifier
from robot_rl.rewards.data import camera_keys, episode_frames
from robot_rl.rewards.prm import PRMConfig, episode_progress, spearman, train_prm
from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator
from robot_rl.sims.mujoco.render import choose_gl
from robot_rl.sims.mujoco.tasks import MujocoPickCubeConfig

OUT = Path(__file__).resolve().parent / "results"
GOAL = "pick up the red cube and hold it at the green marker"
SHAPING_WEIGHT = 10.0  # the default Φ scale: Φ = weight · progress
#: front + side judge the cube's distance to the goal in 3-D (one view alone cannot: the front camera's
#: precision stayed under 0.5); the wrist camera shows whether the cube sits between closed fingers,
#: which the env's success test checks and the other two cannot see.
CAMERAS = ("front", "side", "wrist")
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


def pick_env_config(cameras: tuple[str, ...], **overrides: Any) -> MujocoPickCubeConfig:
    """``mujoco/pick_cube`` as its SAC preset runs it, rendering the reward cameras beside the state."""
    preset = MujocoPickCubeConfig.presets["sac"]
    return MujocoPickCubeConfig(max_episode_steps=int(preset["task.max_episode_steps"]),
                                action_scale=float(preset["task.action_scale"]), reward="sparse",
                                obs="state_pixels", camera=cameras[0], extra_cameras=cameras[1:],
                                image_size=IMAGE_SIZE, **overrides)


def demo_episodes(cameras: tuple[str, ...], episodes: int, seed: int, noise: float, hold: bool = False
                  ) -> list[Episode]:
    """Scripted-demonstrator episodes with ``image.<camera>`` frames (the models read only these).

    ``hold``: episodes do not end on success; the demonstrator keeps the cube at the goal, its noise
    carrying it back and forth across the 3 cm border (classifier data, as recorded on a robot).
    """
    env = pick_env_config(cameras, num_envs=16, terminate_on_success=not hold).make("cpu", seed)
    sink = ListSink()
    record_episodes(env, ScriptedPickDemonstrator(noise=noise, seed=seed), sink, episodes, seed=seed,
                    deterministic=False, task=GOAL)
    env.close()
    return sink.episodes


def train_classifier_model(cameras: tuple[str, ...], n_episodes: int, seed: int, out: Path, quick: bool,
                           target_precision: float, tag: str, recalibrate: dict[str, Any] | None = None
                           ) -> dict[str, Any]:
    """Collect "hold" episodes, train the image classifier, calibrate it on held-out episodes.

    ``recalibrate``: the report of a classifier already trained in ``out`` on the same episodes; it is
    recalibrated for ``target_precision`` instead of retrained.
    """
    t0 = time.perf_counter()
    # Careful and sloppy holds: many frames on both sides of the success border, and failures.
    holds = demo_episodes(cameras, n_episodes // 2, seed + 200, noise=0.3, hold=True) + \
        demo_episodes(cameras, n_episodes - n_episodes // 2, seed + 300, noise=1.0, hold=True)
    collect_s = time.perf_counter() - t0
    if recalibrate:  # the trained weights are kept; only the threshold moves (`robot-rl reward calibrate`)
        clf = recalibrate_classifier(out / "classifier", holds, target_precision)
        clf.train_s = float(recalibrate["train_s"])
    else:
        clf = train_classifier(holds, out / "classifier", ClassifierConfig(steps=150 if quick else 2000, seed=seed,
                                                                           target_precision=target_precision))
    plot_pr_curve(clf.calibration, OUT / f"reward_pick_pr_{tag}.png",
                  title=f"pick_cube classifier ({' + '.join(cameras)} cameras)")
    c = clf.calibration
    return {"hold_episodes": len(holds), "hold_frames": int(sum(len(e) for e in holds)),
            "hold_success_frames": int(sum(e.success.sum() for e in holds)), "collect_s": collect_s,
            "target_precision": target_precision, "threshold": c.threshold, "precision": c.precision,
            "recall": c.recall, "reached": c.reached, "held_out_frames": clf.held_out_frames,
            "held_out_success": c.positives, "train_s": clf.train_s}


def train_prm_model(cameras: tuple[str, ...], n_demos: int, seed: int, out: Path, quick: bool) -> dict[str, Any]:
    """Collect demos that end at success, train the PRM, measure its Spearman ρ on held-out demos."""
    t0 = time.perf_counter()
    demos = demo_episodes(cameras, n_demos, seed + 100, noise=0.3)
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
            "spearman_median": float(np.median(rhos)) if rhos else float("nan"), "train_s": prm.train_s,
            "progress_by_behaviour": prm_behaviour_probe(prm.model, cameras, seed)}


class GripperNeverCloses:
    """The demonstrator with its gripper held open: it hovers over the cube and never grasps (a PRM probe)."""

    def __init__(self, demo: ScriptedPickDemonstrator) -> None:
        self.demo = demo

    def act(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> tuple[torch.Tensor, dict[str, Any]]:
        """The demonstrator's motion with the gripper channel at +1 (open)."""
        action, info = self.demo.act(obs, deterministic)
        action[:, -1] = 1.0
        return action, info


class RandomActions:
    """Uniform random actions in [−1, 1] (a PRM probe)."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> tuple[torch.Tensor, dict[str, Any]]:
        """``[N, 4]`` uniform in [−1, 1]."""
        n = obs["state"].shape[0]
        return torch.rand((n, 4), generator=self.generator) * 2 - 1, {}


def prm_behaviour_probe(prm: Any, cameras: tuple[str, ...], seed: int, episodes: int = 16) -> dict[str, Any]:
    """What the PRM pays for: its progress ``delta(first frame, frame)`` over episodes of three behaviours.

    A PRM that shapes pick well must rank grasp-and-carry clearly above hovering over the cube without
    closing; if hovering earns most of the progress, shaping pays for approaching, not for picking.
    """
    behaviours = {"demonstrator": ScriptedPickDemonstrator(noise=0.3, seed=seed),
                  "never_closes": GripperNeverCloses(ScriptedPickDemonstrator(noise=0.3, seed=seed)),
                  "random": RandomActions(seed)}
    out: dict[str, Any] = {}
    for name, policy in behaviours.items():
        env = pick_env_config(cameras, num_envs=episodes, terminate_on_success=False).make("cpu", seed + 500)
        sink = ListSink()
        record_episodes(env, policy, sink, episodes, seed=seed + 500, deterministic=False, task=GOAL)
        env.close()
        peaks, lasts = [], []
        for ep in sink.episodes:
            frames, _ = episode_frames(ep, camera_keys([ep]))
            progress = episode_progress(prm, frames, GOAL)
            peaks.append(float(progress.max()))
            lasts.append(float(progress[-1]))
        out[name] = {"peak_mean": float(np.mean(peaks)), "last_mean": float(np.mean(lasts)),
                     "success": float(np.mean([e.is_success for e in sink.episodes]))}
    return out


# ---- the variants: `robot-rl train`'s own reward section ------------------------------------

def variant_overrides(variant: str, model_dir: Path, cameras: tuple[str, ...],
                      shaping_weight: float = SHAPING_WEIGHT) -> list[str]:
    """The ``robot-rl train`` settings of one variant (the reward section: docs/rewards.md)."""
    if variant == "sparse":  # nothing reads a camera: no rendering
        return ["task.obs=state"]
    cams = ["task.obs=state_pixels", f"task.camera={cameras[0]}", f"task.extra_cameras=[{','.join(cameras[1:])}]",
            f"task.image_size={IMAGE_SIZE}", "reward.policy_keys=[state]"]
    if variant == "classifier":
        return [*cams, f"reward.classifier={model_dir / 'classifier'}"]
    if variant == "prm":
        return [*cams, f"reward.prm={model_dir / 'prm'}", f"reward.goal={GOAL}",
                f"reward.shaping_weight={shaping_weight}"]
    raise ValueError(f"variant {variant!r} is not one of sparse, classifier, prm")


def run_variant(variant: str, model_dir: str, budget: int, max_wall: float, seed: int, root: str,
                replay_demos: int, cameras: tuple[str, ...], shaping_weight: float) -> dict[str, Any]:
    """Train one variant (in its own process); returns its eval curve and summary."""
    choose_gl("cpu")
    torch.set_num_threads(1)
    overrides = [f"run.seed={seed}", f"run.root={root}", f"run.name={variant}", "run.progress=false",
                 "run.torch_threads=1", f"loop.total_env_steps={budget}", "loop.success_threshold=0.8",
                 "task.reward=sparse", "loop.checkpoint_every_s=100000", "replay.persist=false",
                 *variant_overrides(variant, Path(model_dir), cameras, shaping_weight)]
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
    # A non-default shaping weight is its own variant in the results (e.g. prm_w3).
    label = variant if variant != "prm" or shaping_weight == SHAPING_WEIGHT else f"prm_w{shaping_weight:g}"
    return train_capped(cfg, label, max_wall)


def _worker(args: tuple[str, str, int, float, int, str, int, tuple[str, ...], float]) -> dict[str, Any]:
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
    ap.add_argument("--cameras", nargs="+", default=list(CAMERAS),
                    help="cameras the reward models read (first is task.camera); the policy reads state")
    ap.add_argument("--shaping-weight", type=float, default=SHAPING_WEIGHT,
                    help="PRM shaping scale (Φ = weight · progress); a non-default one is reported as prm_w<weight>")
    ap.add_argument("--models-dir", default=None,
                    help="keep the reward models here and reuse those already trained (with their report.json); "
                         "default: a temporary directory")
    ap.add_argument("--models-only", action="store_true", help="train and report the reward models, no SAC")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny budget")
    args = ap.parse_args()
    choose_gl("cpu")
    OUT.mkdir(parents=True, exist_ok=True)
    if args.quick:
        args.budget, args.max_wall, args.demos = 3000, 90.0, 40
    torch.set_num_threads(2)
    cameras = tuple(args.cameras)
    tag = ("quick" if args.quick else f"s{args.seed}") + (f"_demos{args.replay_demos}" if args.replay_demos else "")
    if cameras != ("front", "side"):  # the first published runs read front + side; their files keep their names
        tag += "_" + "-".join(cameras)
    with tempfile.TemporaryDirectory() as root:
        model_dir = Path(args.models_dir) if args.models_dir else Path(root) / "models"
        report = model_dir / "report.json"
        models: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
        if models.get("cameras", list(cameras)) != list(cameras):
            raise SystemExit(f"{model_dir} holds reward models trained on cameras {models['cameras']}, not "
                             f"{list(cameras)}: pass --cameras {' '.join(models['cameras'])} or another --models-dir")
        models["cameras"] = list(cameras)
        old = models.get("classifier")
        if "classifier" in args.variants and (old is None or old["target_precision"] != args.target_precision):
            models["classifier"] = train_classifier_model(cameras, args.demos, args.seed, model_dir,
                                                          args.quick, args.target_precision, tag, recalibrate=old)
        if "prm" in args.variants and "prm" not in models:
            models["prm"] = train_prm_model(cameras, args.demos, args.seed, model_dir, args.quick)
        model_dir.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(models, indent=1))
        print(f"reward models ({model_dir}): {json.dumps(models, indent=1)}", flush=True)
        if args.models_only:
            (OUT / f"reward_pick_models_{tag}.json").write_text(json.dumps(models, indent=1))
            return
        jobs = [(v, str(model_dir), args.budget, args.max_wall, args.seed, root, args.replay_demos, cameras,
                 args.shaping_weight) for v in args.variants]
        with mp.get_context("spawn").Pool(len(jobs)) as pool:
            results = pool.map(_worker, jobs)
    # Variants may run in separate invocations (same seed and settings): results merge by variant.
    path = OUT / f"reward_pick_{tag}.json"
    saved = json.loads(path.read_text()) if path.exists() and not args.quick else {"results": {}}
    saved["results"].update({r["variant"]: {**r, "budget": args.budget, "models": models} for r in results})
    path.write_text(json.dumps(saved, indent=1))
    merged = sorted(saved["results"].values(), key=lambda r: r["variant"] != "sparse")  # sparse first: the reference
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch {torch.__version__}, seed {args.seed}, "
          f"reward cameras {'+'.join(cameras)}, "
          f"budget {args.budget} env steps / {args.max_wall:.0f}s per variant; this run: {args.variants}")
    print_table(merged)
    plot_curves(merged, OUT / f"reward_pick_curves_{tag}.png",
                f"SAC on sparse mujoco/pick_cube, seed {args.seed}"
                + (f", {args.replay_demos} demos in replay" if args.replay_demos else "") + ": training reward")


if __name__ == "__main__":
    main()
