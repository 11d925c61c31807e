"""The deploy status line: one live terminal line an operator can read at a glance.

``v12 | POLICY acting (hold: HOLD to take over) | period 50.1 ms (p99 52.3, target 50.0) | success 4/10
(40%) | ep 11 step 23 | safety clamped 3, change_limit 1 (last: clamped)``

After an e-stop it starts with why, e.g. ``E-STOP: e-stop key (guard) | v12 | ...``.

Drawn with ``rich`` (a :class:`rich.live.Live` on stderr, 4 refreshes a second) when enabled; the text
itself comes from :meth:`StatusLine.text`, so tests and logs get the same words.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any


class StatusLine:
    """Collects the loop's numbers and renders them; a context manager that starts/stops the live line."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.values: dict[str, Any] = {"version": 0, "source": "policy", "mode_hint": "hold", "period_ms": 0.0,
                                       "p99_ms": 0.0, "target_ms": 0.0, "successes": 0, "episodes": 0,
                                       "episode": 0, "step": 0, "safety_counts": {}, "estop": None}
        self.last_safety: tuple[str, ...] = ()
        self._live: Any = None

    def update(self, **values: Any) -> None:
        """Set any of the shown values and redraw."""
        self.values.update(values)
        if self._live is not None:
            self._live.update(self._render())

    def safety(self, events: tuple[str, ...]) -> None:
        """Remember the newest safety events (shown as ``last:``)."""
        if events:
            self.last_safety = tuple(events)

    def text(self) -> str:
        """The status as plain text."""
        v = self.values
        who = {"policy": "POLICY acting", "human": "HUMAN acting", "hold": "HOLD (teleop lost)"}.get(
            v["source"], str(v["source"]))
        hint = "HOLD the control to take over" if v["mode_hint"] == "hold" else "PRESS toggle to take over"
        rate = f"{v['successes'] / v['episodes']:.0%}" if v["episodes"] else "-"
        counts = {k: n for k, n in sorted(v["safety_counts"].items()) if n}
        safety = ", ".join(f"{k} {n}" for k, n in counts.items()) or "none"
        last = f" (last: {', '.join(self.last_safety)})" if self.last_safety else ""
        estop = f"E-STOP: {v['estop']} | " if v["estop"] else ""
        return (f"{estop}v{v['version']} | {who} ({v['mode_hint']}: {hint}) | period {v['period_ms']:.1f} ms "
                f"(p99 {v['p99_ms']:.1f}, target {v['target_ms']:.1f}) | success {v['successes']}/{v['episodes']} "
                f"({rate}) | ep {v['episode']} step {v['step']} | safety {safety}{last}")

    def _render(self) -> Any:
        from rich.text import Text

        style = {"human": "bold yellow", "hold": "bold red"}.get(self.values["source"], "bold green")
        if self.values["estop"]:
            style = "bold white on red"
        return Text(self.text(), style=style, overflow="ellipsis", no_wrap=True)

    def __enter__(self) -> StatusLine:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
