"""Train a calibrated success classifier on recorded episodes and check it on episodes it never saw.

    python examples/reward_classifier.py --out /tmp/reward_clf

1. Writes scripted pixel demos of the `reach` arm (render2d, a camera over the target) into an
   episode store, with the task's per-step success flags: the same layout `robot-rl data record`
   writes for a real run.
2. Trains the classifier through the CLI verb `robot-rl reward train-classifier` with a target
   precision of 0.95; the threshold is calibrated on held-out episodes and stored in <out>/clf.
3. Scores a fresh set of episodes with the stored threshold and prints precision and recall, and
   where the precision-recall curve was written.
"""

import argparse
import json
from pathlib import Path

import torch

from robot_rl.cli import main as robot_rl
from robot_rl.data.episode import spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.rewards.classifier import SuccessClassifier, score_frames
from robot_rl.rewards.data import labelled_frames
from robot_rl.rewards.demos import reach_pixel_demos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reward_clf"))
    parser.add_argument("--episodes", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)

    demos = reach_pixel_demos(args.episodes, image_size=32, seed=0)
    store = EpisodeStore.create(args.out / "episodes", spec_of(demos[0]), fps=20, task=demos[0].task)
    for ep in demos:
        store.append(ep)
    print(f"wrote {len(store)} episodes ({store.total_frames} frames) to {args.out / 'episodes'}")

    rc = robot_rl(["reward", "train-classifier", str(args.out / "episodes"), "--out", str(args.out / "clf"),
                   "--target-precision", "0.95", "--steps", "300"])
    if rc:
        raise SystemExit(rc)
    meta = json.loads((args.out / "clf" / "meta.json").read_text())
    print(f"stored threshold {meta['threshold']:.4f} (calibration: {meta['calibration']})")

    model = SuccessClassifier.load(args.out / "clf")
    fresh = labelled_frames(reach_pixel_demos(40, image_size=32, seed=123), model.cameras)
    fired = score_frames(model, fresh) >= model.threshold
    tp = int((fired & fresh.label).sum())
    print(f"fresh episodes: precision {tp / max(int(fired.sum()), 1):.3f}, recall {tp / int(fresh.label.sum()):.3f} "
          f"({len(fresh)} frames, {int(fresh.label.sum())} successes)")
    print(f"precision-recall curve: {args.out / 'clf' / 'pr_curve.png'}")


if __name__ == "__main__":
    main()
