"""What a run writes: TensorBoard scalars, an evaluation CSV, a learning-curve PNG and a summary.

Other scalar sinks (wandb: :class:`~robot_rl.viz.wandb_sink.WandbSink`) get every scalar TensorBoard gets, at the
same step, and the learning curve as an image.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

TRAIN_FIELDS = ["env_steps", "wall_s", "updates", "return", "success"]
EVAL_FIELDS = ["env_steps", "updates", "wall_s", "policy_version", "success_rate", "mean_return",
               "mean_length", "episodes"]


class ScalarSink(Protocol):
    """Somewhere else the run's scalars go (wandb), beside TensorBoard."""

    def scalars(self, values: dict[str, float], step: int) -> None:
        """``values`` (full names, e.g. ``eval/success_rate``) at env step ``step``."""

    def image(self, key: str, path: Path, step: int) -> None:
        """An image file (the learning curve) at env step ``step``."""

    def close(self) -> None:
        """Finish (flush, end the run)."""


class RunLog:
    """Writer for one run directory (appends when resuming); ``sinks`` mirror the TensorBoard scalars."""

    def __init__(self, run_dir: Path, sinks: list[ScalarSink] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(self.run_dir / "tb"))
        self.sinks: list[ScalarSink] = list(sinks or [])
        self.eval_csv = self.run_dir / "eval.csv"
        self.train_csv = self.run_dir / "train.csv"

    def scalars(self, values: dict[str, float], step: int, prefix: str = "") -> None:
        """Write scalars to TensorBoard (and the other sinks) at ``step`` (env transitions)."""
        named = {f"{prefix}{k}": float(v) for k, v in values.items()}
        for k, v in named.items():
            self.tb.add_scalar(k, v, step)
        if named:
            for sink in self.sinks:
                sink.scalars(named, step)

    def eval_row(self, row: dict[str, Any]) -> None:
        """Append an evaluation row to ``eval.csv`` and TensorBoard."""
        _append_csv(self.eval_csv, EVAL_FIELDS, row)
        self.scalars({k: row[k] for k in ("success_rate", "mean_return", "mean_length")}, int(row["env_steps"]),
                     prefix="eval/")
        self.tb.flush()

    def train_row(self, row: dict[str, Any]) -> None:
        """Append a row of training-episode statistics (return/success of recent episodes) to ``train.csv``."""
        _append_csv(self.train_csv, TRAIN_FIELDS, row)

    def read_eval(self) -> list[dict[str, float]]:
        """All evaluation rows so far."""
        return _read_csv(self.eval_csv)

    def read_train(self) -> list[dict[str, float]]:
        """All training rows so far."""
        return _read_csv(self.train_csv)

    def plot_learning_curve(self, title: str) -> Path | None:
        """``learning_curve.png``: evaluation success rate and return against env steps."""
        rows = self.read_eval()
        train = [r for r in self.read_train() if r.get("return") == r.get("return")]  # drop NaN rows
        if not rows and not train:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, train_key, eval_key, label in ((ax1, "success", "success_rate", "success rate"),
                                               (ax2, "return", "mean_return", "episode return")):
            if train:
                ax.plot([r["env_steps"] for r in train], [r[train_key] for r in train], color="tab:gray",
                        alpha=0.7, label="training episodes (last 100)")
            if rows:
                ax.plot([r["env_steps"] for r in rows], [r[eval_key] for r in rows], marker="o",
                        color="tab:blue", label="evaluation (deterministic)")
            ax.set_xlabel("environment steps")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        ax1.set_ylim(-0.02, 1.02)
        ax1.legend(loc="lower right", fontsize=8)
        fig.suptitle(title)
        fig.tight_layout()
        path = self.run_dir / "learning_curve.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        last = int(max([r["env_steps"] for r in rows] + [r["env_steps"] for r in train]))
        for sink in self.sinks:
            sink.image("learning_curve", path, last)
        return path

    def write_summary(self, summary: dict[str, Any]) -> None:
        """``summary.json`` and a short human-readable ``summary.md``."""
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        lines = [f"# {summary.get('title', 'run')}", ""]
        for k, v in summary.items():
            if k != "title":
                lines.append(f"- **{k}**: {v}")
        (self.run_dir / "summary.md").write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        """Flush and close TensorBoard, then the other sinks."""
        self.tb.flush()
        self.tb.close()
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception:  # one sink failing to finish must not keep the others open
                log.exception("closing %s failed", sink)


def _read_csv(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    with open(path) as f:
        return [{k: float(v) if v not in ("", None) else float("nan") for k, v in r.items()}
                for r in csv.DictReader(f)]


def _append_csv(path: Path, fields: list[str], row: dict[str, Any]) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)
