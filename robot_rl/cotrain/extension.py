"""Co-training as an extension of any learner: the ``cotrain`` extension, on when ``cotrain.real_dataset`` is set.

:class:`CoTraining` loads and aligns the real (and sim) demonstrations, runs stage 1 (SFT warm start on
the mix) on a fresh run, attaches the stage-2 hook (:class:`~robot_rl.cotrain.aux.AuxLoss`) to the
algorithm, and reports ``cotrain/lambda``, ``cotrain/aux_loss`` and ``cotrain/heldout_loss`` and
``cotrain/heldout_action_mse`` (the supervised loss, and the squared error of the deterministic actions, on
held-out real episodes: how much of the real data the RL forgets) every logging period, also appended to
``<run>/cotrain.csv``. :class:`CotrainExtension` is what a run attaches (before the offline phase, as stage 1 comes
first).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.algorithm import Algorithm, Policy
from robot_rl.core.config import ConfigError
from robot_rl.core.extension import BaseExtension, RunHandle, register_extension
from robot_rl.core.specs import EnvSpec
from robot_rl.cotrain.aux import AuxLoss, supervised, supervised_loss
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet, episodes_to_demoset, load_aligned_episodes, split_holdout
from robot_rl.cotrain.sft import warm_start

log = logging.getLogger(__name__)

#: Held-out rows scored per report (a fixed subset, so successive values are comparable).
HELDOUT_ROWS = 4096


class CoTraining:
    """Stage 1 + the stage-2 hook on ``algo`` (see the module docstring)."""

    def __init__(self, cfg: CotrainConfig, algo: Algorithm, spec: EnvSpec, device: torch.device | str, seed: int,
                 progress: Callable[[], int], run_dir: Path | None = None, resume: bool = False) -> None:
        if cfg.real_dataset is None:
            raise ConfigError("co-training needs cotrain.real_dataset")
        supervised(algo)  # an algorithm without a supervised loss is refused before the datasets load
        self.cfg, self.algo = cfg, algo
        self._scoring_policy: Policy | None = None  # built at the first held-out report
        real_eps = load_aligned_episodes(cfg.real_dataset, spec, cfg.camera_map, "the real demonstrations")
        if cfg.heldout_dataset is not None:
            train_eps = real_eps
            held_eps = load_aligned_episodes(cfg.heldout_dataset, spec, cfg.camera_map, "the held-out real demos")
        else:
            train_eps, held_eps = split_holdout(real_eps, cfg.holdout_fraction, seed)
        self.real = episodes_to_demoset(train_eps, spec, device)
        self.heldout = episodes_to_demoset(held_eps, spec, device) if held_eps else None
        self.sim: DemoSet | None = None
        if cfg.sim_dataset is not None:
            sim_eps = load_aligned_episodes(cfg.sim_dataset, spec, None, "the sim demonstrations")
            self.sim = episodes_to_demoset(sim_eps, spec, device)
        log.info("cotrain: %d real episodes for training (%d rows), %d held out; %s sim rows",
                 len(train_eps), len(self.real), len(held_eps), len(self.sim) if self.sim is not None else "no")
        self.sft_losses: list[float] = []
        if not resume:
            self.sft_losses = warm_start(algo, self.real, self.sim, cfg, seed + cfg.seed_offset + 1)
        self.hook = AuxLoss(cfg, self.real, progress, seed + cfg.seed_offset)
        algo.aux_hook = self.hook
        self.csv_path = None if run_dir is None else Path(run_dir) / "cotrain.csv"
        if self.csv_path is not None and not self.csv_path.exists():
            self.csv_path.write_text("env_steps,updates,lambda,aux_loss,heldout_loss,heldout_action_mse,"
                                     "real_train_loss\n")

    @torch.no_grad()
    def score(self, demos: DemoSet) -> float:
        """The supervised loss on (up to ``HELDOUT_ROWS`` of) ``demos``, with fixed flow-matching noise."""
        idx = torch.arange(min(len(demos), HELDOUT_ROWS), device=demos.action.device)
        obs, action, mask = demos.rows(idx)
        gen = torch.Generator(device=demos.action.device).manual_seed(0)
        return float(supervised_loss(self.algo, obs, action, mask, gen))

    @torch.no_grad()
    def action_error(self, demos: DemoSet) -> float:
        """Mean squared error of the policy's deterministic actions against the demo actions (masked chunks)."""
        if self._scoring_policy is None:
            self._scoring_policy = self.algo.make_policy()
        policy = self._scoring_policy
        policy.load_actor_weights(self.algo.actor_weights())  # the learner's current actor
        idx = torch.arange(min(len(demos), HELDOUT_ROWS), device=demos.action.device)
        obs, action, mask = demos.rows(idx)
        err = (policy.act(obs, deterministic=True)[0].reshape(action.shape) - action).square().mean(-1)
        return float(err.mean() if mask is None else (err * mask).sum() / mask.sum().clamp_min(1.0))

    def metrics(self, env_steps: int, updates: int) -> dict[str, float]:
        """``cotrain/*`` scalars for the logs (and a row of ``cotrain.csv``)."""
        out = self.hook.pop_stats()
        out["cotrain/real_train_loss"] = self.score(self.real)
        if self.heldout is not None:
            out["cotrain/heldout_loss"] = self.score(self.heldout)
            out["cotrain/heldout_action_mse"] = self.action_error(self.heldout)
        if self.csv_path is not None:
            with self.csv_path.open("a", newline="") as f:
                csv.writer(f).writerow([env_steps, updates, out["cotrain/lambda"], out.get("cotrain/aux_loss", ""),
                                        out.get("cotrain/heldout_loss", ""), out.get("cotrain/heldout_action_mse", ""),
                                        out["cotrain/real_train_loss"]])
        return out

    def detach(self) -> None:
        """Remove the hook from the algorithm (plain RL from here on)."""
        if self.algo.aux_hook is self.hook:
            self.algo.aux_hook = None


class CotrainExtension(BaseExtension):
    """Builds :class:`CoTraining` when the run meets its extensions; its scalars every logging period."""

    def __init__(self, section: CotrainConfig, run_cfg: Any) -> None:
        self.section = section
        self.seed = int(run_cfg.run.seed)
        self.cotraining: CoTraining | None = None
        self.run: RunHandle | None = None

    def attach(self, run: RunHandle) -> None:
        """Load the demonstrations, run stage 1 on a fresh run (the actors then get its weights), hook stage 2 in."""
        learner = run.learner
        self.cotraining = CoTraining(self.section, run.algo, run.spec, run.device, self.seed,
                                     lambda: int(learner.updates), run.run_dir, run.resumed)
        if self.cotraining.sft_losses:
            run.publish()
        self.run = run

    def single_process(self) -> str:
        """The real-data BC term is one process's."""
        return "cotrain (its real-data BC term is not shared out over the ranks)"

    def metrics(self) -> Mapping[str, float]:
        """``lambda``, ``aux_loss``, ``real_train_loss``, ``heldout_loss``, ``heldout_action_mse`` (``cotrain/…``)."""
        if self.cotraining is None or self.run is None:
            return {}
        out = self.cotraining.metrics(self.run.env_steps(), int(self.run.learner.updates))
        return {k.removeprefix("cotrain/"): v for k, v in out.items()}


@register_extension("cotrain", CotrainConfig, "sim–real co-training (RL-Co): stage-1 SFT on real + sim demos, then "
                                              "λ·supervised loss on real demos (docs/cotraining.md)", order=-20)
def build(section: CotrainConfig, run_cfg: Any) -> CotrainExtension | None:
    """The extension when ``cotrain.real_dataset`` is set, else None."""
    return CotrainExtension(section, run_cfg) if section.enabled else None
