"""A whole run's config: task, algorithm, loop, transport, replay and run sections, and each extension's section.

Resolution order for ``robot-rl train``: defaults of the chosen task and algorithm → the task's preset for
that algorithm → ``--config FILE.yaml`` → dotted overrides (``algo.batch_size=512``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from robot_rl.config_io import (
    apply_overrides,
    flatten,
    load_yaml,
    merge_implied,
    open_section_attr,
    open_sections,
    parse_override,
)
from robot_rl.core.config import ALGOS, TASKS, AlgoConfig, TaskConfig, TransportConfig
from robot_rl.core.extension import (
    EXTENSIONS,
    EnvRole,
    Extension,
    extension_order,
    extension_sections,
    moved_keys,
)
from robot_rl.transport.config import InprocTransportConfig

if TYPE_CHECKING:
    from robot_rl.core.env import VecEnv


@dataclass
class LoopConfig:
    """How the actor–learner loop runs and when it stops."""

    total_env_steps: int = 3_000_000
    """Budget of environment transitions (summed over sub-envs); training stops there at the latest."""
    success_threshold: float | None = 0.9
    """Stop as soon as an evaluation reaches this success rate (``null`` to always use the full budget)."""
    eval_episodes: int = 100
    """Episodes per evaluation (deterministic actions, fresh evaluation env)."""
    eval_every_env_steps: int = 10_000
    """Evaluate after every this many environment transitions."""
    eval_num_envs: int = 100
    """Sub-envs of the evaluation env (episodes run in parallel)."""
    checkpoint_every_s: float = 60.0
    """Save a checkpoint at most this often (and always at the end)."""
    log_every_s: float = 2.0
    """Scalars to TensorBoard / the progress line at most this often."""
    weight_sync_every_updates: int = 50
    """Off-policy: publish actor weights after every this many gradient updates."""
    actor_threads: int = 1
    """Off-policy: actor threads stepping their own env copy concurrently with the learner."""
    remote_actors: int = 1
    """`robot-rl learner` with an on-policy algorithm: actor processes whose envs fill one rollout."""
    max_wait_s: float = 60.0
    """Deadline on any wait for data or weights; exceeding it is an error, never a silent hang. An actor waiting
    for a backlogged learner to take a chunk waits as long as the learner answers; a learner silent this long is
    the error."""
    on_backlog: Literal["wait", "drop"] = "wait"
    """When the learner takes chunks more slowly than an actor makes them: ``wait`` (the actor's env pauses until
    the learner catches up; nothing is dropped) or ``drop`` (simulators that must not pause: a chunk the learner has
    not taken within ``max_wait_s`` is dropped, counted on the actor, the learner's status line and the summary).
    A real robot (`robot-rl deploy`) never drops (docs/distributed.md, Back-pressure)."""
    max_staleness: int | None = None
    """Actors stop exploring (pause the sim, hold the robot) while their weights are more than this many
    versions behind the learner's newest; counted and logged (``null``: never). With ``on_policy_sync: false`` it
    is also the learner's bound k: rows acted by weights more than k versions behind its own are dropped
    (counted: ``stale_rows_dropped``), the rest corrected for."""
    on_policy_sync: bool = True
    """On-policy (PPO, flow PPO): actors wait for new weights after each rollout and the learner for every
    actor's rows (``true``); ``false``: nobody waits, rollouts take whichever actors' rows come first, at most
    ``max_staleness`` versions old, and the update corrects for their age (decoupled PPO; docs/distributed.md)."""
    stop_grace_s: float = 15.0
    """`robot-rl actor`: on a stop (Ctrl-C, SIGTERM, the end of --max-env-steps), seconds to wait for the learner to
    acknowledge every chunk before closing. Keep it under the engine's kill grace (SLURM's KillWait, Kubernetes'
    terminationGracePeriodSeconds: 30 s by default)."""
    actor_hz: float = 0.0
    """`robot-rl actor`: step the env at most this often (a control rate, e.g. 50); 0 = as fast as it runs."""
    extensions: dict[str, Any] = open_sections(partial(extension_sections, "loop"))  # noqa: RUF009 (a field())
    """The sections of the extensions whose parent is ``loop`` (robot_rl.core.extension), each under its name:
    ``hil`` (the graded human-in-the-loop schedule, ``loop.hil={…}``; null = ordinary training; docs/rewards.md)."""

    def __getattr__(self, name: str) -> Any:
        # ``cfg.loop.hil``: an extension's section reads like a fixed field (only called for names not found).
        return open_section_attr(self, name)


@dataclass
class ReplayConfig:
    """Crash-safe replay: off-policy buffers backed by checksummed segment files under ``<run>/replay/``."""

    persist: bool = True
    """Append every stored transition to disk so that a crash, Ctrl-C or `--resume` keeps the buffer
    (off-policy algorithms only). Costs a few % of learner throughput; see docs/replay-and-checkpoints.md."""
    segment_transitions: int = 2000
    """Rows per segment file: the most transitions a kill -9 can lose from the replay."""
    flush_every_s: float = 30.0
    """Also commit a (smaller) segment when this long has passed since the last one."""
    delete_evicted: bool = True
    """Delete segment files whose rows have all left the in-memory ring (bounds disk use to ~one buffer)."""


@dataclass
class RunConfig:
    """Where the run is written and what makes it reproducible."""

    name: str | None = None
    """Run directory name under ``root`` (default: ``<task>-<algo>-<timestamp>``)."""
    root: Path = Path("runs")
    """Parent directory for runs."""
    seed: int = 0
    """Seeds torch, numpy and the environments."""
    device: str = "auto"
    """``cpu``, ``cuda``, ``cuda:1`` … ``auto`` picks CUDA when available."""
    torch_threads: int = 0
    """Intra-op threads for torch (0 = auto: on CPU, the cores left after the actor threads; torch's
    default on GPU)."""
    progress: bool = True
    """Show the live progress line."""
    wandb: bool = False
    """Mirror every TensorBoard scalar (same env step), the config and the learning curve to Weights & Biases
    (the ``wandb`` extra; docs/visualisation.md); the wandb run id is the run directory's name."""
    wandb_project: str | None = None
    """wandb project (null: ``$WANDB_PROJECT``, else ``robot-rl``)."""
    wandb_entity: str | None = None
    """wandb entity, a user or team (null: ``$WANDB_ENTITY``, else your default)."""
    distributed: Literal["auto", "none", "ddp"] = "auto"
    """Data-parallel training (docs/scale-out.md): ``ddp`` runs ``nproc_per_node`` ranks with
    DistributedDataParallel (NCCL on GPUs, gloo on CPU), each with its own envs; ``auto`` does so when started by
    ``torchrun`` (RANK/WORLD_SIZE set); ``none`` never."""
    nproc_per_node: int = 2
    """Ranks `robot-rl train run.distributed=ddp` starts on this machine (through torchrun)."""
    wandb_mode: Literal["online", "offline", "disabled"] | None = None
    """``online``, ``offline`` (write locally; `wandb sync` uploads later) or ``disabled`` (null: ``$WANDB_MODE``,
    else online)."""


def _default_task() -> TaskConfig:
    return TASKS.get("reach")()


def _default_algo() -> AlgoConfig:
    return ALGOS.get("sac")()


@dataclass
class TrainConfig:
    """A whole run: task, algorithm, loop, transport and run settings."""

    task: TaskConfig = field(default_factory=_default_task)
    algo: AlgoConfig = field(default_factory=_default_algo)
    loop: LoopConfig = field(default_factory=LoopConfig)
    transport: TransportConfig = field(default_factory=InprocTransportConfig)
    run: RunConfig = field(default_factory=RunConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    extensions: dict[str, Any] = open_sections(extension_sections, moved_keys)  # noqa: RUF009 (a field())
    """The sections of the registered extensions (robot_rl.core.extension), each at the top level under its name:
    ``demos`` (demonstrations in the learner's demo buffer from the start, ``demos.path=DATA``, formerly
    ``loop.demos_path``; docs/datasets.md), ``cotrain`` (sim–real co-training, RL-Co, on when
    ``cotrain.real_dataset`` is set; docs/cotraining.md), ``reward`` (learned rewards in the training envs, success
    classifier and PRM shaping, and the keys the policy sees; docs/rewards.md), ``offline`` (pre-training on
    recorded data before the online run, ``--offline DATA``; docs/offline-to-online.md), ``jsrl`` (a guide policy
    acts first in each episode, ``jsrl.guide=RUN_DIR`` or ``offline``; docs/offline-to-online.md), ``twin`` (train
    in a twin fitted by `robot-rl twin fit`, ``twin.file=twin.json``, and refit it while training; docs/real2sim.md),
    ``viz`` (live view in Rerun, ``--viz rerun``; docs/visualisation.md) … (`robot-rl config train` lists them)."""

    def __getattr__(self, name: str) -> Any:
        # ``cfg.viz``: an extension's section reads like a fixed one (only called for names not found otherwise).
        return open_section_attr(self, name)

    def section(self, name: str) -> Any:
        """The config section of extension ``name`` (``loop.hil``'s too)."""
        return self.sections()[name]

    def sections(self) -> dict[str, Any]:
        """Every extension's section by name: the top-level ones and those inside a fixed section (``loop.hil``)."""
        return {**self.extensions, **self.loop.extensions}

    def make_env(self, device: Any, seed: int, num_envs: int | None = None, role: EnvRole = "train") -> VecEnv:
        """The task's env as this run's policy meets it: as each extension adapts its task and wraps it.

        ``role="train"`` or ``"eval"``: e.g. the ``reward`` extension puts its models around a training env only, and
        the policy's observation keys on both (evaluation scores the env's own success).
        """
        extensions = self.build_extensions()
        task = self.task
        for ext in extensions:
            task = ext.adapt_task(task)
        env = task.make(device, seed, num_envs=num_envs)
        try:
            for ext in extensions:
                env = ext.wrap_env(env, role)
        except BaseException:
            env.close()
            raise
        return env

    def build_extensions(self) -> list[Extension]:
        """The extensions this config switches on, in the order they are called (robot_rl.core.extension)."""
        sections = self.sections()
        built = (EXTENSIONS.get(name).build(sections[name], self) for name in extension_order(sections))
        return [ext for ext in built if ext is not None]


def resolve_train_config(
    task: str | None = None,
    algo: str | None = None,
    config_file: Path | str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> TrainConfig:
    """The resolution order of the module docstring, as one function (the CLI and tests call it)."""
    file_tree = load_yaml(config_file) if config_file is not None else {}
    parsed = dict(parse_override(o) for o in overrides)
    task_name = task or parsed.get("task.type") or (file_tree.get("task") or {}).get("type") or "reach"
    algo_name = algo or parsed.get("algo.type") or (file_tree.get("algo") or {}).get("type") or "sac"
    task_cls, implied = TASKS.resolve(str(task_name))
    algo_cls = ALGOS.get(str(algo_name))
    file_task = file_tree.get("task")
    if isinstance(file_task, dict) and str(file_task.get("type", task_name)) == str(task_name):
        merge_implied(dict(file_task), implied, f"{config_file}: task")
    cfg = TrainConfig(task=task_cls(**typing.cast(dict[str, Any], implied)), algo=algo_cls())
    preset = task_cls.presets.get(str(algo_name), {})
    if preset:
        cfg = apply_overrides(cfg, dict(preset))
    if file_tree:
        file_flat = flatten(file_tree)
        file_flat.pop("task.type", None)
        file_flat.pop("algo.type", None)
        cfg = apply_overrides(cfg, file_flat)
    parsed.pop("task.type", None)
    parsed.pop("algo.type", None)
    if parsed:
        cfg = apply_overrides(cfg, parsed)
    return cfg
