"""The ``offline`` extension: pre-train on recorded data before any env step (``--offline DATA``).

It attaches before the other extensions (a JSRL guide may be its policy) and runs the phase of
:mod:`robot_rl.loop.offline_phase` there; a resumed run whose phase is done (``offline_curve.json``) skips it.
"""

from __future__ import annotations

import logging
from typing import Any

from robot_rl.core.algorithm import NamedBufferStorage, OfflinePhaseAware
from robot_rl.core.config import ConfigError, OfflineTrainableConfig
from robot_rl.core.extension import BaseExtension, RunHandle, register_extension
from robot_rl.core.extras import MC_RETURN
from robot_rl.data.provenance import warn_if_task_differs
from robot_rl.loop.offline_phase import OfflineConfig, check_actor_warmup

log = logging.getLogger(__name__)


class OfflinePhase(BaseExtension):
    """Runs the offline phase when the run meets its extensions."""

    def __init__(self, section: OfflineConfig, run_cfg: Any) -> None:
        self.section = section
        self.run_cfg = run_cfg

    def attach(self, run: RunHandle) -> None:
        """Pre-train, keep the data in the replay if asked, publish the weights the actors start from."""
        from robot_rl.data.offline import load_offline
        from robot_rl.loop.offline_phase import pretrain, write_curve

        cfg, off, dp, algo = self.run_cfg, self.section, run.data_parallel, run.algo
        done = (run.run_dir / "offline_curve.json").exists()  # resumed: the phase is done, its data in the replay
        if done if dp is None else dp.broadcast_flag(done, run.device):  # rank 0's (a new rank has none)
            return
        if not isinstance(cfg.algo, OfflineTrainableConfig) or algo.on_policy:
            raise ConfigError(f"--offline trains an off-policy learner (sac), not {type(cfg.algo).__name__}")
        data = load_offline(str(off.data), run.spec, cfg.algo.gamma, off.heldout_fraction, cfg.run.seed, run.device)
        warn_if_task_differs(str(off.data), cfg.task, "the offline data")
        curve = pretrain(algo, data, off, cfg.algo.batch_size, cfg.run.seed, data_parallel=dp,
                         on_point=lambda p: run.log_scalars(p, int(p["update"]), "offline/"))
        log.info("offline phase done: curve in %s", write_curve(curve, run.run_dir))
        data.train.extras.pop(MC_RETURN.name, None)  # online rows have no Monte-Carlo return: the replay holds neither
        if off.keep_data:
            storage = run.learner.storage
            if isinstance(storage, NamedBufferStorage) and "demos" in storage.buffers:
                storage.add_to("demos", data.train)
            else:
                storage.add(data.train)
        if isinstance(algo, OfflinePhaseAware) and not off.conservative_online:
            algo.finish_offline()
        run.publish()


@register_extension("offline", OfflineConfig, "pre-training on recorded data before the online run "
                                              "(--offline DATA; docs/offline-to-online.md)", order=-10)
def build(section: OfflineConfig, run_cfg: Any) -> OfflinePhase | None:
    """The phase when ``offline.data`` is set, else None; refuses an actor warm-up without a phase to run in."""
    check_actor_warmup(run_cfg.algo, section)
    return OfflinePhase(section, run_cfg) if section.data is not None else None
