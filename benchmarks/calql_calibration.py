"""Cal-QL's offline phase on ``mujoco/pick_cube``: is its critic unstable, or settling at the scale of the returns?

RESULTS_offline_online.md read a rising critic loss and held-out TD error over the offline phase (and a mean Q of
−74 against "returns near −40") as instability. Both figures grow when |Q| grows, and Q starts at 0 while the
data's values are tens below it. This script runs the offline phase alone, for each variant on the same data, and
every ``--log-every`` updates measures what separates the two readings:

- the held-out TD error (mean squared, as ``robot-rl train`` logs it) and the same **relative to the Q scale**:
  RMS TD error / mean |Q(s, a)| on the held-out rows;
- **calibration** on the rows whose Monte-Carlo return is exact, those of episodes that ended by termination
  (a truncated episode's return misses what follows the cut): mean ``Q(s, a_data) − G`` and mean
  ``Q(s, π(s)) − G`` (the critics' mean, π deterministic). Cal-QL promises ``Q(s, π(s)) ≳ G``; plain CQL may
  sit below it;
- after the phase, the deterministic policy's success on the task (``--eval-episodes``).

Variants are ``ALPHA:KIND[:BC]`` with KIND ``calql`` (CQL's term with Cal-QL's clamp), ``cql`` (the term alone)
or ``sac`` (no conservative term: SAC's update on the data), and BC the first updates in which the actor clones
the data instead of maximising Q (``algo.actor_bc_updates``, CQL's ``policy_eval_start``; default 0). The data
is ``offline_online.py``'s: ``--demos`` scripted demonstrations and ``--noisy`` episodes of the same
demonstrator with action noise σ = ``--noise``, recorded under the SAC preset's task settings.

    MUJOCO_GL=osmesa python benchmarks/calql_calibration.py                     # 1:calql 1:cql 0.1:calql 0:sac
    MUJOCO_GL=osmesa python benchmarks/calql_calibration.py --variants 5:calql --updates 20000
    MUJOCO_GL=osmesa python benchmarks/calql_calibration.py --variants 1:calql:2000 --set algo.backup_entropy=false

Results: ``benchmarks/results/calql_calibration.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from offline_online import record_data, sac_preset

from robot_rl.core.transition import TransitionBatch
from robot_rl.data.offline import OfflineData, load_offline
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.evaluate import evaluate
from robot_rl.loop.offline_phase import OfflineConfig, pretrain

OUT = Path(__file__).parent / "results"
KINDS = ("calql", "cql", "sac")


def parse_variant(text: str) -> tuple[float, str, int]:
    """``"1:calql"`` → ``(1.0, "calql", 0)``; ``"1:calql:2000"`` → ``(1.0, "calql", 2000)``."""
    alpha, _, rest = text.partition(":")
    kind, _, bc = rest.partition(":")
    if kind not in KINDS or not (bc or "0").isdigit():
        raise argparse.ArgumentTypeError(f"variant {text!r}: write ALPHA:KIND[:BC] with KIND one of "
                                         f"{', '.join(KINDS)} and BC a number of updates")
    return float(alpha), kind, int(bc or 0)


def variant_name(alpha: float, kind: str, bc: int) -> str:
    """How a variant is keyed in the JSON and labelled in the plot."""
    return f"{alpha:g}:{kind}" + (f":bc{bc}" if bc else "")


def terminated_rows(batch: TransitionBatch) -> torch.Tensor:
    """Mask of the rows of episodes that ended by termination (their Monte-Carlo return is exact)."""
    ended = batch.env_index[batch.terminated.bool().reshape(-1)]
    return torch.isin(batch.env_index, ended)


@torch.no_grad()
def calibration(algo: Any, cfg: Any, spec: Any, rows: TransitionBatch) -> dict[str, float]:
    """The critics' mean Q of the data's and of the policy's actions, against the rows' Monte-Carlo returns."""
    policy = algo.make_policy()
    estimator = cfg.algo.build_value_estimator(spec, policy)
    estimator.load_critic_weights(algo.critic_weights())
    mc = rows.extras["mc_return"].reshape(-1)
    q_data = estimator.q_values(policy, rows.obs, rows.action).mean(dim=0)
    q_pi = estimator.q_values(policy, rows.obs, policy.deterministic_action(rows.obs)).mean(dim=0)
    return {"mc": float(mc.mean()), "q_data": float(q_data.mean()), "q_data_minus_mc": float((q_data - mc).mean()),
            "q_pi_minus_mc": float((q_pi - mc).mean()), "abs_q_data": float(q_data.abs().mean())}


def run_variant(alpha: float, kind: str, bc: int, data_path: Path, a: argparse.Namespace) -> dict[str, Any]:
    """The offline phase of one variant; its curve of TD error and calibration, and the policy's success."""
    conservative = [f"algo.cql_alpha={alpha}", f"algo.cql_samples={a.cql_samples}", f"algo.calql={kind == 'calql'}"]
    cfg = resolve_train_config(task=a.task, overrides=[*sac_preset(a.task), f"run.seed={a.seed}",
                                                       *(conservative if kind != "sac" else []),
                                                       f"algo.actor_bc_updates={bc}", *a.set])
    env = cfg.task.make("cpu", a.seed, num_envs=16)
    algo = cfg.algo.build(env.spec, "cpu", a.seed)
    data: OfflineData = load_offline(data_path, env.spec, cfg.algo.gamma, 0.1, a.seed)
    assert data.heldout is not None
    exact = data.train.index(torch.nonzero(terminated_rows(data.train)).reshape(-1))
    name = variant_name(alpha, kind, bc)
    curve: list[dict[str, float]] = []

    def on_point(point: dict[str, float]) -> None:
        held = calibration(algo, cfg, env.spec, data.heldout)  # type: ignore[arg-type]
        ex = calibration(algo, cfg, env.spec, exact)
        row = {**point, "relative_heldout_td": point["heldout_td"] ** 0.5 / max(held["abs_q_data"], 1e-6),
               **{f"heldout_{k}": v for k, v in held.items()}, **{f"terminated_{k}": v for k, v in ex.items()}}
        curve.append(row)
        print(f"  {name} update {point['update']:.0f}: heldout TD {point['heldout_td']:.3g} "
              f"(RMS/|Q| {row['relative_heldout_td']:.3f}), Q {point['q_mean']:.1f}; terminated rows: "
              f"Q(s,a)-G {ex['q_data_minus_mc']:+.1f}, Q(s,pi)-G {ex['q_pi_minus_mc']:+.1f} (G {ex['mc']:.1f})",
              flush=True)

    t0 = time.monotonic()
    pretrain(algo, data, OfflineConfig(data=str(data_path), updates=a.updates, log_every=a.log_every),
             cfg.algo.batch_size, a.seed, on_point=on_point, progress=False)
    wall = time.monotonic() - t0
    result = evaluate(algo.make_policy(), env, a.eval_episodes, seed=a.seed)
    env.close()
    print(f"  {name}: {a.updates} updates in {wall:.0f} s; policy alone {100 * result.success_rate:.0f} % "
          f"(return {result.mean_return:.1f})", flush=True)
    return {"alpha": alpha, "kind": kind, "actor_bc_updates": bc, "wall_s": wall, "success": result.success_rate,
            "mean_return": result.mean_return, "train_rows": len(data.train), "terminated_rows": len(exact),
            "heldout_rows": len(data.heldout), "curve": curve}


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    """Four panels against offline updates: held-out TD, relative TD, Q(s,a) − G and Q(s,π) − G."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("heldout_td", "held-out TD error (mean squared)"), ("relative_heldout_td", "RMS TD error / mean |Q|"),
              ("terminated_q_data_minus_mc", "Q(s, a_data) − G (terminated rows)"),
              ("terminated_q_pi_minus_mc", "Q(s, π(s)) − G (terminated rows)")]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    for ax, (key, title) in zip(axes, panels):
        for name, run in runs.items():
            ax.plot([p["update"] for p in run["curve"]], [p[key] for p in run["curve"]], "o-", ms=3,
                    label=f"{name} ({100 * run['success']:.0f} % after)")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("offline updates")
        ax.grid(alpha=0.3)
        if key.endswith("minus_mc"):
            ax.axhline(0.0, color="grey", lw=1)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Record the data once, run each variant's offline phase, write the JSON and the plot."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="mujoco/pick_cube")
    p.add_argument("--variants", nargs="+", type=parse_variant,
                   default=[(1.0, "calql", 0), (1.0, "cql", 0), (0.1, "calql", 0), (0.0, "sac", 0)],
                   metavar="ALPHA:KIND[:BC]")
    p.add_argument("--updates", type=int, default=5000, help="offline updates per variant")
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument("--cql-samples", type=int, default=4, help="sampled actions per state in the conservative term")
    p.add_argument("--demos", type=int, default=50)
    p.add_argument("--noisy", type=int, default=200)
    p.add_argument("--noise", type=float, default=1.0)
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="more settings for every variant, e.g. algo.backup_entropy=false")
    p.add_argument("--out", type=Path, default=OUT / "calql_calibration.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        info = record_data(a.task, Path(tmp) / "data", a.demos, a.noisy, a.noise, seed=12345)
        print(f"data: {info}", flush=True)
        for alpha, kind, bc in a.variants:
            runs[variant_name(alpha, kind, bc)] = run_variant(alpha, kind, bc, Path(tmp) / "data", a)
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps({
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
                "args": {k: v for k, v in vars(a).items() if k != "out"}, "data": info, "runs": runs},
                indent=1, default=str))
            plot(runs, a.out.with_suffix(".png"))
    print(f"written {a.out} and {a.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
