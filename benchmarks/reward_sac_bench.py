"""SAC env steps to 80 % success on sparse-reward ``mujoco/reach``: sparse reward vs classifier vs PRM shaping.

    MUJOCO_GL=egl .venv/bin/python benchmarks/reward_sac_bench.py [--budget 30000] [--max-wall 780] [--quick]

Three SAC runs (the task's SAC preset through ``resolve_train_config`` + ``train``, exactly what
``robot-rl train`` does), the same seed, differing only in the training reward:

(a) ``sparse``: the env's own 0-on-success / -1-per-step reward;
(b) ``classifier``: the env's reward replaced by a calibrated success classifier's decision
    (:class:`~robot_rl.rewards.wrapper.RewardWrapper`, 0 where it fires, -1 elsewhere), as on a
    real robot where no success signal exists;
(c) ``prm``: the sparse reward plus potential-based shaping ``γΦ(s') − Φ(s)`` from a process
    reward model (:class:`~robot_rl.rewards.wrapper.ProgressShapingWrapper`).

The reward models read **state features** (the task's 25-number observation), not camera frames:
on this shared 2-core CPU, rendering 16 worlds per step with OSMesa plus three SAC runs did not fit
the ~40 min budget, and a 3 cm success radius is a pixel or two in a 64×64 front view. The model
code is the same shape as the pixel models (classifier: features → logit, calibrated with
:func:`~robot_rl.rewards.classifier.calibrate` on held-out episodes; PRM: (first, current) →
progress in [-1, 1] from normalised demo time with reversed and stalled negatives); only the
encoder is an MLP instead of the CNN. Both are trained on episodes of the task's scripted expert
(a proportional controller on the goal offset, with action noise). Success in evaluation is always
the env's own criterion, and termination stays the env's in every variant.

The sparse run often does not reach 80 % within the budget; the table then says so (the cap is
reported, not an extrapolation). Writes success-vs-env-steps curves to
benchmarks/results/reward_sac_curves_s<seed>.png and one result file (``--out``; default
``benchmarks/results/reward_sac_bench/<UTC time>.json``, one per seed): :func:`table` renders the seeds' files side
by side, :func:`calibration_table` the classifier's calibration. Run with ``--quick`` for a smoke run (tiny budget).
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from result_file import add_out_argument, default_path, markdown_table, runner_eval_curve, write_result
from torch import nn

from robot_rl.core.config import TASKS
from robot_rl.core.env import VecEnv
from robot_rl.loop.config import TrainConfig, resolve_train_config
from robot_rl.rewards.classifier import calibrate
from robot_rl.rewards.wrapper import ProgressShapingWrapper, RewardWrapper
from robot_rl.sims.mujoco.tasks import MujocoReachConfig

NAME = "reward_sac_bench"
OUT = Path(__file__).resolve().parent / "results"
OFFSET = slice(19, 22)  # goal − grip in mujoco/reach's state: 16 arm numbers, goal (3), offset (3), fine (3)
GOAL = "reach the goal"
SHAPING_WEIGHT = 10.0


# ---- state-feature reward models -------------------------------------------------------------

class StateSuccessClassifier(nn.Module):
    """MLP on the state vector → success logit, with a calibrated threshold (a wrapper ``SuccessModel``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))
        self.dim = dim
        self.cameras = ["state"]
        self.threshold = 0.5

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """What the wrapper checks against the env's spec."""
        return {"state": (self.dim,)}

    def probability(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Success probability ``[N]``."""
        with torch.no_grad():
            return torch.sigmoid(self.net(obs["state"].float())[:, 0])

    def predict(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Calibrated decision ``[N]`` bool."""
        return self.probability(obs) >= self.threshold


# ---- one variant's capped run, the table and the plot (reward_pick_bench.py uses them too) ------------------

TARGET = 0.8


def train_capped(cfg: TrainConfig, variant: str, max_wall: float) -> dict[str, Any]:
    """Train ``cfg`` (``loop.success_threshold`` = the target); returns the eval curve and a summary."""
    from robot_rl.loop.runner import InProcessRunner

    runner = InProcessRunner(cfg)
    deadline = time.monotonic() + max_wall
    orig = runner.updates.iteration

    def capped() -> None:  # the wall cap: stop collecting once max_wall has passed (the curve so far is kept)
        if time.monotonic() > deadline:
            raise KeyboardInterrupt
        orig()

    runner.updates.iteration = capped  # type: ignore[method-assign]
    t0 = time.monotonic()
    result = runner.train()
    wall = time.monotonic() - t0
    curve = runner_eval_curve(result.run_dir)
    rows = [(int(k), rate) for k, rate in zip(curve["env_steps"], curve["success"], strict=True)]
    reached = next((s for s, rate in rows if rate >= TARGET), None)
    return {"variant": variant, "curve": rows, "reached_at": reached, "env_steps": result.env_steps,
            "updates": result.updates, "wall_s": wall, "stop": result.stop_reason}


def print_table(results: list[dict[str, Any]]) -> None:
    """Env steps to the target per variant, and the ratio to the sparse reward's (a bound when it is capped)."""
    sparse = next((r for r in results if r["variant"] == "sparse"), None)
    ref = sparse["reached_at"] if sparse else None
    print(f"{'variant':<12} {'80% at env steps':>17} {'vs sparse':>10} {'best':>6} {'env steps':>10} "
          f"{'updates':>8} {'wall s':>7} stop")
    for r in results:
        best = max((rate for _, rate in r["curve"]), default=0.0)
        at = r["reached_at"]
        if at is not None and ref is not None:
            ratio = f"{at / ref:.2f}"
        elif at is not None and sparse is not None:
            ratio = f"<{at / sparse['env_steps']:.2f}"  # sparse capped: its cap bounds the ratio from above
        else:
            ratio = "n/a"
        print(f"{r['variant']:<12} {str(at) if at is not None else 'not reached':>17} {ratio:>10} {best:6.0%} "
              f"{r['env_steps']:10d} {r['updates']:8d} {r['wall_s']:7.0f} {r['stop']}")
        print(f"  curve: {r['curve']}")


def plot_curves(results: list[dict[str, Any]], path: Path, title: str) -> None:
    """Evaluation success against env steps, one line per variant, the target dashed."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        if r["curve"]:
            steps, rate = zip(*r["curve"], strict=True)
            ax.plot(steps, rate, marker="o", ms=3, label=r["variant"])
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval success (50 episodes)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"curves: {path}")



class StatePRM(nn.Module):
    """(first state, current state) → progress in [-1, 1] and a done probability."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3 * dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                 nn.Linear(256, 2))

    def raw(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Pre-activation progress and done logit ``[N, 2]``."""
        return self.net(torch.cat([a, b, b - a], -1))

    def __call__(self, obs_t: dict[str, torch.Tensor], obs_k: dict[str, torch.Tensor],  # type: ignore[override]
                 goals: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The :data:`~robot_rl.rewards.wrapper.ProgressModel` signature (one task, so the goal is fixed)."""
        with torch.no_grad():
            out = self.raw(obs_t["state"].float(), obs_k["state"].float())
        return torch.tanh(out[:, 0]), torch.sigmoid(out[:, 1])


def expert_episodes(episodes: int, seed: int, noise: float = 0.3) -> list[dict[str, np.ndarray]]:
    """Rollouts of the scripted expert on ``mujoco/reach``: ``states [T+1, 25]`` and ``success [T+1]``."""
    cfg = MujocoReachConfig(reward="sparse", num_envs=16)
    env = cfg.make("cpu", seed)
    gen = torch.Generator().manual_seed(seed)
    obs = env.reset(seed)
    n = env.num_envs
    cur: list[list[np.ndarray]] = [[obs["state"][i].numpy().copy()] for i in range(n)]
    out: list[dict[str, np.ndarray]] = []
    while len(out) < episodes:
        off = obs["state"][:, OFFSET]
        action = (off / cfg.action_scale).clamp(-1, 1) + noise * torch.randn(n, 3, generator=gen)
        res = env.step(action.clamp(-1, 1))
        final = res.info["final_obs"]["state"]
        ended = (res.terminated | res.truncated).tolist()
        for i in range(n):
            cur[i].append(final[i].numpy().copy())
            if ended[i]:
                succ = np.zeros(len(cur[i]), bool)
                succ[-1] = bool(res.terminated[i])
                out.append({"states": np.stack(cur[i]), "success": succ})
                cur[i] = [res.obs["state"][i].numpy().copy()]
        obs = res.obs
    env.close()
    return out[:episodes]


def train_classifier(eps: list[dict[str, np.ndarray]], target_precision: float, seed: int
                     ) -> tuple[StateSuccessClassifier, dict[str, float]]:
    """Fit on 75 % of the episodes, calibrate the threshold on the rest."""
    torch.manual_seed(seed)
    split = int(0.75 * len(eps))
    x = torch.from_numpy(np.concatenate([e["states"] for e in eps[:split]])).float()
    y = torch.from_numpy(np.concatenate([e["success"] for e in eps[:split]])).float()
    model = StateSuccessClassifier(x.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pos_weight = ((1 - y).sum() / y.sum().clamp_min(1)).clamp(max=20.0)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(1500):
        idx = torch.randint(0, len(x), (256,), generator=gen)
        loss = nn.functional.binary_cross_entropy_with_logits(model.net(x[idx])[:, 0], y[idx], pos_weight=pos_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    hx = torch.from_numpy(np.concatenate([e["states"] for e in eps[split:]])).float()
    hy = np.concatenate([e["success"] for e in eps[split:]])
    scores = model.probability({"state": hx}).numpy()
    cal = calibrate(scores, hy, target_precision)
    model.threshold = cal.threshold
    return model.eval(), {"threshold": cal.threshold, "precision": cal.precision, "recall": cal.recall,
                          "held_out_frames": len(hy), "held_out_positives": int(hy.sum())}


def train_prm(eps: list[dict[str, np.ndarray]], seed: int, steps: int = 2000) -> tuple[StatePRM, float]:
    """Progress = normalised time between two states of a successful demo; reversed pairs negative,
    stalled pairs zero (the built-in PRM's labels, without the instruction negatives: one task)."""
    torch.manual_seed(seed)
    demos = [e["states"] for e in eps if e["success"][-1]]
    frames = torch.from_numpy(np.concatenate(demos)).float()
    lengths = np.array([len(d) for d in demos])
    start = np.r_[0, np.cumsum(lengths)[:-1]]
    model = StatePRM(frames.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = np.random.default_rng(seed)
    loss_v = float("nan")
    for _ in range(steps):
        b = 256
        d = g.integers(0, len(demos), b)
        n = lengths[d]
        i, j = (g.random(b) * n).astype(int), (g.random(b) * n).astype(int)
        i, j = np.minimum(i, j), np.maximum(i, j)
        kind = np.arange(b) % 3  # forward, reversed, stalled
        j = np.where(kind == 2, i, j)
        i, j = np.where(kind == 1, j, i), np.where(kind == 1, i, j)
        delta = torch.from_numpy(((j - i) / np.maximum(n - 1, 1)).astype(np.float32))
        done = torch.from_numpy(((j == n - 1) & (kind != 1)).astype(np.float32))
        raw = model.raw(frames[start[d] + i], frames[start[d] + j])
        loss = nn.functional.mse_loss(torch.tanh(raw[:, 0]), delta) + \
            0.5 * nn.functional.binary_cross_entropy_with_logits(raw[:, 1], done)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_v = float(loss.detach())
    return model.eval(), loss_v


# ---- the task variants -------------------------------------------------------------------------

MODELS: dict[str, Any] = {}  # filled in each worker process before training


@TASKS.register("bench/reward_reach")
@dataclass
class RewardReachConfig(MujocoReachConfig):
    """``mujoco/reach`` (sparse) with its training reward from a learned model (``variant``)."""

    variant: str = "sparse"
    """``sparse`` | ``classifier`` | ``prm``."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> VecEnv:
        """The MuJoCo env inside the variant's reward wrapper."""
        env: VecEnv = MujocoReachConfig.make(self, device, seed, num_envs)
        if self.variant == "classifier":
            return RewardWrapper(env, MODELS["classifier"], mode="replace")  # type: ignore[arg-type]
        if self.variant == "prm":
            return ProgressShapingWrapper(env, MODELS["prm"], GOAL, gamma=MODELS["gamma"], weight=SHAPING_WEIGHT,
                                          cameras=["state"])
        return env


def run_variant(variant: str, model_dir: str, budget: int, max_wall: float, seed: int, root: str) -> dict[str, Any]:
    """Train one variant (in its own process); returns its eval curve and summary."""
    torch.set_num_threads(1)
    saved = torch.load(Path(model_dir) / "models.pt", weights_only=True)
    clf, prm = StateSuccessClassifier(saved["dim"]), StatePRM(saved["dim"])
    clf.load_state_dict(saved["classifier"])
    clf.threshold = saved["threshold"]
    prm.load_state_dict(saved["prm"])
    MODELS.update(classifier=clf.eval(), prm=prm.eval())
    cfg = resolve_train_config(task="mujoco/reach", overrides=[
        f"run.seed={seed}", f"run.root={root}", f"run.name={variant}", "run.progress=false", "run.torch_threads=1",
        f"loop.total_env_steps={budget}", "loop.success_threshold=0.8", "task.reward=sparse",
        "loop.eval_every_env_steps=1000",
        "loop.checkpoint_every_s=100000", "replay.persist=false"])
    base = cfg.task
    cfg.task = RewardReachConfig(**{f.name: getattr(base, f.name) for f in fields(base)}, variant=variant)
    MODELS["gamma"] = float(getattr(cfg.algo, "gamma", 0.99))
    return train_capped(cfg, variant, max_wall)


def _worker(args: tuple[str, str, int, float, int, str]) -> dict[str, Any]:
    return run_variant(*args)


def main() -> None:
    """Train the reward models, run the three SAC variants in parallel, print the table with ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=30_000, help="env steps per variant at most")
    ap.add_argument("--max-wall", type=float, default=780.0, help="seconds per variant at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--demos", type=int, default=200, help="scripted-expert episodes for the reward models")
    ap.add_argument("--variants", nargs="+", default=["sparse", "classifier", "prm"])
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny budget")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    started = dt.datetime.now(dt.UTC)
    if args.quick:
        args.budget, args.max_wall, args.demos = 2000, 60.0, 40
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    eps = expert_episodes(args.demos, seed=args.seed + 123)
    succ = np.mean([e["success"][-1] for e in eps])
    clf, cal = train_classifier(eps, 0.95, args.seed)
    prm, prm_loss = train_prm(eps, args.seed, steps=300 if args.quick else 2000)
    print(f"reward models: {len(eps)} expert episodes ({succ:.0%} successful), classifier {cal}, "
          f"PRM loss {prm_loss:.4f}, {time.perf_counter() - t0:.0f}s")
    with tempfile.TemporaryDirectory() as root:
        torch.save({"classifier": clf.state_dict(), "threshold": clf.threshold, "prm": prm.state_dict(),
                    "dim": int(eps[0]["states"].shape[1])}, Path(root) / "models.pt")
        jobs = [(v, root, args.budget, args.max_wall, args.seed, root) for v in args.variants]
        with mp.get_context("spawn").Pool(len(jobs)) as pool:
            results = pool.map(_worker, jobs)
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch {torch.__version__}, seed {args.seed}, "
          f"budget {args.budget} env steps / {args.max_wall:.0f}s per variant, the variants in parallel")
    print_table(results)
    name = "reward_sac_curves_quick.png" if args.quick else f"reward_sac_curves_s{args.seed}.png"
    OUT.mkdir(parents=True, exist_ok=True)
    plot_curves(results, OUT / name, f"SAC on sparse mujoco/reach, seed {args.seed}: training reward")
    summary = {"seed": args.seed, "budget": args.budget, "max_wall": args.max_wall, "target": TARGET,
               "reward_models": {"expert_episodes": len(eps), "expert_success": float(succ), "classifier": cal,
                                 "prm_loss": prm_loss}, "variants": with_ratios(results), "plot": name}
    path = write_result(args.out or default_path(NAME, started), NAME, args, summary, started)
    print(f"result file: {path}")


def with_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each variant with its env steps to the target over the sparse reward's (``vs_sparse_bound``: an upper bound
    where sparse did not reach the target within its budget)."""
    sparse = next((r for r in results if r["variant"] == "sparse"), None)
    out = []
    for r in results:
        at, ref = r["reached_at"], sparse["reached_at"] if sparse else None
        ratio = at / ref if at is not None and ref is not None else None
        bound = at / sparse["env_steps"] if at is not None and ref is None and sparse is not None else None
        out.append({**r, "curve": [list(p) for p in r["curve"]], "vs_sparse": ratio, "vs_sparse_bound": bound})
    return out


LABELS = {"sparse": "(a) sparse reward alone", "classifier": "(b) calibrated classifier as reward",
          "prm": "(c) PRM potential-based shaping"}


def table(runs: list[dict[str, Any]]) -> str:
    """Env steps to the target per variant (rows) and seed (one run per seed: columns), with the ratios to the
    sparse reward and their mean."""
    seeds = [run["results"]["seed"] for run in runs]
    variants = list(dict.fromkeys(v["variant"] for run in runs for v in run["results"]["variants"]))
    rows = []
    for name in variants:
        per = [next((v for v in run["results"]["variants"] if v["variant"] == name), None) for run in runs]
        steps = [("–" if v is None else f"{v['reached_at']:,}" if v["reached_at"] is not None
                  else f"not reached ({v['env_steps']:,})") for v in per]
        ratios = [None if v is None else v["vs_sparse"] for v in per]
        cells = [("n/a" if v is None else f"<{v['vs_sparse_bound']:.2f}" if v["vs_sparse_bound"] is not None
                  else "n/a" if r is None else f"{r:.2f}") for v, r in zip(per, ratios)]
        known = [r for r in ratios if r is not None]
        mean = f"{sum(known) / len(known):.2f}" if known and len(known) == len(ratios) else "n/a"
        rows.append([LABELS.get(name, name), *steps, " / ".join(cells), mean])
    return markdown_table(["variant", *(f"seed {s}" for s in seeds),
                           f"ratio vs sparse ({' / '.join(f'seed {s}' for s in seeds)})", "mean ratio"], rows,
                          "l" + "r" * (len(seeds) + 2))


def calibration_table(runs: list[dict[str, Any]]) -> str:
    """The classifier's calibration on the held-out expert frames, per seed."""
    rows = []
    for run in runs:
        c = run["results"]["reward_models"]["classifier"]
        rows.append([str(run["results"]["seed"]), f"{c['threshold']:.3f}", f"{c['precision']:.3f}",
                     f"{c['recall']:.3f}", f"{c['held_out_frames']} ({c['held_out_positives']})"])
    return markdown_table(["seed", "threshold", "precision", "recall", "held-out frames (successes)"], rows, "rrrrr")


if __name__ == "__main__":
    main()
