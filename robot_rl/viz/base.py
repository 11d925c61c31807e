"""The narrow interface the loops call: one step, one episode end, a note, close.

The train actor (sub-env 0 of actor 0), the deploy loop and the record loop each call :meth:`StepViz.step` once
per step they take, with the action, *who* produced it (``source``), the reward, the success flag and the
observation (its ``image.<camera>`` keys and ``state``). Sinks must be cheap per step: they buffer and send in
batches. Arrays are numpy arrays (or anything ``np.asarray`` takes) of one env, without a batch dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

SOURCES = ("policy", "human", "hold")
"""Who produced an action: the policy, the human at the teleop device, or nobody (the arm held: device lost, or
idle between takeovers while recording)."""


@runtime_checkable
class StepViz(Protocol):
    """A live view of one loop. Thread-safe: the train actor's thread steps while the main thread adds notes."""

    @property
    def where(self) -> str:
        """Where the steps go, in words (a viewer's address, a file and how to open it)."""

    def due(self, step: int) -> bool:
        """Whether :meth:`step` at ``step`` will be logged (callers skip costly conversions otherwise)."""

    def camera_due(self, step: int) -> bool:
        """Whether the cameras of ``step`` will be logged (callers pass ``obs`` only then)."""

    def step(self, step: int, action: Any, *, source: str, reward: float, success: bool,
             obs: Mapping[str, Any] | None = None, proposal: Any = None) -> None:
        """One step on the ``env_step`` timeline.

        ``action`` ``[A]`` is what was sent (logged under ``action/<source>``); ``source`` is one of
        :data:`SOURCES` (``human`` also sets ``intervention`` to 1); ``proposal`` ``[A]`` is the policy's own action
        when the human overrode it; ``obs`` the observation the action was chosen on.
        """

    def episode_end(self, step: int, *, index: int, outcome: str, ret: float, length: int) -> None:
        """Episode ``index`` ended at ``step`` (its last step) with ``outcome`` after ``length`` steps."""

    def note(self, text: str, step: int | None = None) -> None:
        """A line in the log view (an evaluation result, a phase change)."""

    def close(self) -> None:
        """Send what is buffered and finish the recording (the ``.rrd`` file is complete after this)."""
