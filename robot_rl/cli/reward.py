"""`robot-rl reward train-classifier|calibrate|train-prm|serve|audit|report`: reward models, serving, auditing."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import tyro

from robot_rl.cli.base import Command, missing_extra
from robot_rl.cli.reward_audit import AuditArgs, ReportArgs
from robot_rl.core.errors import UserError

_Verb = TypeVar("_Verb", bound=Command)


def _bad_data_exits_2(run: Callable[[_Verb], int]) -> Callable[[_Verb], int]:
    """Report bad data (a UserError), a missing file or a missing extra as `robot-rl reward: error: …`; exit 2."""

    @functools.wraps(run)
    def guarded(self: _Verb) -> int:
        try:
            return run(self)
        except (UserError, FileNotFoundError, ImportError) as e:
            if isinstance(e, ImportError) and not missing_extra(e):
                raise
            print(f"robot-rl reward: error: {e}", file=sys.stderr)
            return 2

    return guarded


@dataclass
class TrainClassifierArgs(Command):
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
    min_threshold: float = 0.5
    """The threshold never goes below this probability: held-out demos rarely show the poses a policy will try,
    and a threshold chosen for full recall on them fires on those poses (0: recall first)."""
    cameras: tuple[str, ...] = ()
    """Cameras to use (e.g. top wrist); default all."""
    label: Literal["success", "last_k", "first_k"] = "success"
    """Per-frame success flags, the last K frames of successful episodes, or the first K frames of every episode (a
    classifier of initial states: the reset reward of `robot-rl deploy --mode practice`, docs/practice.md)."""
    last_k: int = 3
    """K for --label last_k and --label first_k."""
    held_out: float = 0.25
    """Fraction of episodes held out for calibration."""
    steps: int = 400
    """Gradient steps."""
    encoder: Literal["cnn", "resnet10", "resnet18"] = "cnn"
    """Camera encoder: the small CNN, or a frozen ResNet trunk (weights from --backbone) with a head per camera."""
    backbone: Path | None = None
    """Local weights file: the small CNN's state dict, or with --encoder resnet10/resnet18 a torchvision-layout
    ResNet (e.g. torch.save(torchvision.models.resnet18(weights=...).state_dict(), 'r18.pt')); nothing is
    downloaded."""
    seed: int = 0
    """Seed."""

    @_bad_data_exits_2
    def run(self) -> int:
        """Train, calibrate and print the summary."""
        from robot_rl.rewards.classifier import train_classifier

        print(train_classifier(self.data, self.out, self.resolved_config()).summary())
        return 0

    def resolved_config(self) -> Any:
        """The :class:`~robot_rl.rewards.classifier.ClassifierConfig` the options make."""
        from robot_rl.rewards.classifier import ClassifierConfig

        return ClassifierConfig(cameras=self.cameras, label=self.label, last_k=self.last_k,
                                target_precision=self.target_precision, min_threshold=self.min_threshold,
                                held_out=self.held_out, steps=self.steps,
                                encoder=self.encoder, backbone=self.backbone, seed=self.seed)


@dataclass
class CalibrateArgs(Command):
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

    @_bad_data_exits_2
    def run(self) -> int:
        """Recalibrate and print the summary."""
        from robot_rl.rewards.classifier import recalibrate_classifier

        print(recalibrate_classifier(self.model, self.data, self.target_precision,
                                     "all" if self.fresh else "training_split").summary())
        return 0


@dataclass
class TrainPRMArgs(Command):
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

    @_bad_data_exits_2
    def run(self) -> int:
        """Train and print the summary."""
        from robot_rl.rewards.prm import train_prm

        print(train_prm(self.data, self.out, self.resolved_config()).summary())
        return 0

    def resolved_config(self) -> Any:
        """The :class:`~robot_rl.rewards.prm.PRMConfig` the options make."""
        from robot_rl.rewards.prm import PRMConfig

        return PRMConfig(cameras=self.cameras, instruction=self.instruction, steps=self.steps, seed=self.seed)


@dataclass
class ServeArgs(Command):
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

    def run(self) -> int:
        """Serve until Ctrl-C or --duration-s; 2 when the model cannot be loaded or the address bound."""
        import threading

        import torch

        from robot_rl.rewards.service import RewardServer, load_reward_model

        if self.torch_threads > 0:
            torch.set_num_threads(self.torch_threads)
        try:
            model = load_reward_model(self.model, self.on_unseen)
            server = RewardServer(model, self.bind, self.max_batch, self.batch_wait_ms / 1000,
                                  secret_key=str(self.secret_key) if self.secret_key else None,
                                  allowed_clients_dir=(str(self.allowed_clients_dir) if self.allowed_clients_dir
                                                       else None))
        except (OSError, UserError) as e:  # a model directory of another kind, an address in use
            print(f"robot-rl reward serve: error: {e}", file=sys.stderr)
            return 2
        print(f"serving {server.kind} from {self.model} at {server.address} (inputs: "
              f"{', '.join(f'{k} {v[0]}' for k, v in server.welcome_meta()['inputs'].items())})", flush=True)
        stop = threading.Event()
        if self.duration_s > 0:
            timer = threading.Timer(self.duration_s, stop.set)
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


RewardVerb = Union[
    Annotated[TrainClassifierArgs, tyro.conf.subcommand("train-classifier")],
    Annotated[CalibrateArgs, tyro.conf.subcommand("calibrate")],
    Annotated[TrainPRMArgs, tyro.conf.subcommand("train-prm")],
    Annotated[ServeArgs, tyro.conf.subcommand("serve")],
    Annotated[AuditArgs, tyro.conf.subcommand("audit")],
    Annotated[ReportArgs, tyro.conf.subcommand("report")],
]


@dataclass
class RewardArgs(Command):
    """Reward models: a success classifier, a process reward model, a server, the audit's questions, its report.

    See docs/rewards.md.
    """

    action: tyro.conf.OmitSubcommandPrefixes[RewardVerb]  # type: ignore[valid-type]
    """What to do."""

    def run(self) -> int:
        """Run the sub-verb: 0 on success, 2 on bad data or a model that cannot be served."""
        result: int = self.action.run()
        return result

    def resolved_config(self) -> Any:
        """The sub-verb's config (None for calibrate and serve, which take options only)."""
        return self.action.resolved_config()
