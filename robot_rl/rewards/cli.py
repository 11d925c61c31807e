"""`robot-rl reward train-classifier|calibrate|train-prm|serve`: train and calibrate reward models, serve them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro


@dataclass
class TrainClassifierArgs:
    """Train a success classifier on an episode store or LeRobotDataset v3 and calibrate it.

    The threshold is chosen on held-out episodes to reach the target precision; --out gets model.pt,
    meta.json (with the threshold, precision, recall) and pr_curve.png.
    """

    data: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DATA")]]
    """Episode store or LeRobotDataset v3 with camera observations and success labels."""
    out: Path
    """Checkpoint directory to write."""
    target_precision: float = 0.95
    """Precision the calibrated threshold must reach on the held-out episodes."""
    cameras: tuple[str, ...] = ()
    """Cameras to use (e.g. top wrist); default all."""
    label: Literal["success", "last_k"] = "success"
    """Per-frame success flags, or the last K frames of successful episodes."""
    last_k: int = 3
    """K for --label last_k."""
    held_out: float = 0.25
    """Fraction of episodes held out for calibration."""
    steps: int = 400
    """Gradient steps."""
    backbone: Path | None = None
    """Local state-dict file of pretrained CNN weights."""
    seed: int = 0
    """Seed."""


@dataclass
class CalibrateArgs:
    """Choose a new threshold for a trained classifier without retraining (e.g. another target precision).

    By default DATA is the classifier's own training data and only its held-out episodes are scored
    (the same split as training); with --fresh, DATA holds new labelled episodes and all are scored.
    The model's meta.json and pr_curve.png are rewritten; the weights are unchanged.
    """

    model: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="MODEL")]]
    """Checkpoint directory from train-classifier."""
    data: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DATA")]]
    """Episode store or LeRobotDataset v3 with success labels."""
    target_precision: float = 0.95
    """Precision the new threshold must reach."""
    fresh: bool = False
    """DATA is new episodes the classifier never saw: score all of them."""


@dataclass
class TrainPRMArgs:
    """Train the built-in process reward model (progress between two frames for a language goal) on demos."""

    data: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DATA")]]
    """Episode store or LeRobotDataset v3 of successful demos."""
    out: Path
    """Checkpoint directory to write."""
    instruction: str = ""
    """Language goal (default: each episode's task text)."""
    cameras: tuple[str, ...] = ()
    """Cameras to use; default all."""
    steps: int = 400
    """Gradient steps."""
    seed: int = 0
    """Seed."""


@dataclass
class ServeArgs:
    """Serve a trained classifier or PRM to actors over ZeroMQ, batched across them (docs/rewards.md).

    Actors use it with `robot_rl.rewards.wrapper.remote_reward_wrapper(env, ADDRESS)`. Runs until Ctrl-C.
    """

    model: Path
    """Checkpoint directory from train-classifier or train-prm."""
    bind: str = "tcp://127.0.0.1:5600"
    """Address to bind (127.0.0.1 unless the actors are on other machines)."""
    max_batch: int = 512
    """Most rows (frames or frame pairs) in one forward pass."""
    batch_wait_ms: float = 2.0
    """After a request arrives, wait this long for other actors' requests to batch with it."""
    on_unseen: Literal["error", "zero"] = "error"
    """PRM: an instruction it never saw is an error reply, or scored as no progress."""
    torch_threads: int = 0
    """Torch intra-op threads (0: torch's default)."""
    duration_s: float = 0.0
    """Stop after this many seconds (0: until Ctrl-C)."""
    secret_key: Path | None = None
    """CURVE: this server's secret key file (`robot-rl keys --name reward`); with --allowed-clients-dir only
    actors holding one of those keys are served, encrypted."""
    allowed_clients_dir: Path | None = None
    """CURVE: the directory of the actors' public key files (.key)."""


RewardVerb = Union[
    Annotated[TrainClassifierArgs, tyro.conf.subcommand("train-classifier")],
    Annotated[CalibrateArgs, tyro.conf.subcommand("calibrate")],
    Annotated[TrainPRMArgs, tyro.conf.subcommand("train-prm")],
    Annotated[ServeArgs, tyro.conf.subcommand("serve")],
]


@dataclass
class RewardArgs:
    """Reward models: a calibrated success classifier, a process reward model, a reward server. See docs/rewards.md."""

    action: tyro.conf.OmitSubcommandPrefixes[RewardVerb]  # type: ignore[valid-type]
    """What to do."""


def run_reward(args: RewardArgs) -> int:
    """The `reward` verb: 0 on success, 2 on bad data or a model that cannot be served."""
    from robot_rl.data.store import StoreError
    from robot_rl.rewards.data import RewardDataError

    a = args.action
    if isinstance(a, ServeArgs):
        return _serve(a)
    try:
        if isinstance(a, TrainClassifierArgs):
            from robot_rl.rewards.classifier import ClassifierConfig, train_classifier

            cfg = ClassifierConfig(cameras=a.cameras, label=a.label, last_k=a.last_k,
                                   target_precision=a.target_precision, held_out=a.held_out, steps=a.steps,
                                   backbone=a.backbone, seed=a.seed)
            print(train_classifier(a.data, a.out, cfg).summary())
            return 0
        if isinstance(a, CalibrateArgs):
            from robot_rl.rewards.classifier import recalibrate_classifier

            print(recalibrate_classifier(a.model, a.data, a.target_precision,
                                         "all" if a.fresh else "training_split").summary())
            return 0
        from robot_rl.rewards.prm import PRMConfig, train_prm

        report = train_prm(a.data, a.out, PRMConfig(cameras=a.cameras, instruction=a.instruction, steps=a.steps,
                                                    seed=a.seed))
        print(report.summary())
        return 0
    except (RewardDataError, StoreError, ImportError, FileNotFoundError, ValueError) as e:
        print(f"robot-rl reward: error: {e}", file=sys.stderr)
        return 2


def _serve(a: ServeArgs) -> int:
    import threading

    import torch

    from robot_rl.rewards.service import RewardServer, load_reward_model

    if a.torch_threads > 0:
        torch.set_num_threads(a.torch_threads)
    try:
        model = load_reward_model(a.model, a.on_unseen)
        server = RewardServer(model, a.bind, a.max_batch, a.batch_wait_ms / 1000,
                              secret_key=str(a.secret_key) if a.secret_key else None,
                              allowed_clients_dir=str(a.allowed_clients_dir) if a.allowed_clients_dir else None)
    except (OSError, ValueError, KeyError) as e:
        print(f"robot-rl reward serve: error: {e}", file=sys.stderr)
        return 2
    print(f"serving {server.kind} from {a.model} at {server.address} (inputs: "
          f"{', '.join(f'{k} {v[0]}' for k, v in server.welcome_meta()['inputs'].items())})", flush=True)
    stop = threading.Event()
    if a.duration_s > 0:
        timer = threading.Timer(a.duration_s, stop.set)
        timer.daemon = True
        timer.start()
    try:
        server.serve(stop)
    except KeyboardInterrupt:
        pass
    finally:
        st = server.stats
        print(f"served {st.requests} requests ({st.rows} rows) in {st.batches} batches; "
              f"rejected {dict(st.errors) or 0}", flush=True)
        server.close()
    return 0
