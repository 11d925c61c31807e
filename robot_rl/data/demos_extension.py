"""The ``demos`` extension: demonstrations loaded into the learner's demo buffer at the start (``demos.path``).

RLPD / HIL-SERL style: with a demo buffer (e.g. SAC with ``algo.demo_ratio=0.5``) part of every batch comes from
the demonstrations. It attaches before every other extension (the offline phase and the HIL schedule's updates find
the buffer filled), and a resumed run whose demo buffer came back from its replay segments does not load it again.
Its keys were ``loop.demos_path``, ``loop.demos_correction_weight`` and ``loop.demos_rewind_weight``; those still load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.core.algorithm import NamedBufferStorage
from robot_rl.core.extension import BaseExtension, RunHandle, register_extension
from robot_rl.data.demos import RaCWeights, load_demos_into
from robot_rl.data.provenance import warn_if_task_differs

log = logging.getLogger(__name__)


@dataclass
class DemosConfig:
    """Demonstrations in the learner's demo buffer from the start (docs/datasets.md)."""

    path: Path | None = None
    """Demonstrations loaded into the learner's demo buffer at the start (an episode store from `robot-rl
    data import|record`, or a LeRobotDataset v3 directory); needs a demo buffer, e.g. SAC with
    ``algo.demo_ratio=0.5``. On resume they are loaded only if the demo buffer came back empty."""
    correction_weight: int = 1
    """Times each demo row labelled *correction* by rewind-and-correct recording (`robot-rl record`,
    docs/recording.md) is loaded; > 1 weights recovery behaviour up."""
    rewind_weight: int = 1
    """Times each demo row labelled *rewind* is loaded (0 leaves the rewinds out)."""

    def rac(self) -> RaCWeights | None:
        """The rewind-and-correct weights, or None when every row is loaded once."""
        if (self.correction_weight, self.rewind_weight) == (1, 1):
            return None
        return RaCWeights(correction_weight=self.correction_weight, rewind_weight=self.rewind_weight)


class DemosExtension(BaseExtension):
    """Loads ``demos.path`` into the learner's ``demos`` buffer when the run meets its extensions."""

    def __init__(self, section: DemosConfig, run_cfg: Any) -> None:
        assert section.path is not None
        self.path = Path(section.path)
        self.section = section
        self.task = run_cfg.task

    def attach(self, run: RunHandle) -> None:
        """Fill the demo buffer (refused without one), unless a resumed run's came back from disk."""
        storage = run.learner.storage
        demos = storage.buffers.get("demos") if isinstance(storage, NamedBufferStorage) else None
        if demos is not None and len(demos) > 0:
            # A resumed run reloads its demo buffer from the replay segments; loading again would double it.
            log.info("demo buffer already holds %d transitions; not loading %s again", len(demos), self.path)
            return
        n = load_demos_into(storage, self.path, run.spec, run.device, rac=self.section.rac())
        warn_if_task_differs(self.path, self.task, f"the demos ({n} transitions)")


# First of all (order -40): the demo buffer is full before co-training, the offline phase or HIL attach, as it was
# when the runner loaded it itself.
@register_extension("demos", DemosConfig, "demonstrations in the learner's demo buffer from the start "
                                          "(demos.path=DATA algo.demo_ratio=0.5; docs/datasets.md)", order=-40,
                    moved={"loop.demos_path": "path", "loop.demos_correction_weight": "correction_weight",
                           "loop.demos_rewind_weight": "rewind_weight"})
def build(section: DemosConfig, run_cfg: Any) -> DemosExtension | None:
    """The extension when ``demos.path`` is set, else None."""
    return DemosExtension(section, run_cfg) if section.path is not None else None
