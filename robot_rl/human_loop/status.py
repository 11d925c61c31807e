"""The deploy status: two live terminal lines an operator reads at a glance, each within 80 columns.

``POLICY acting (hold to take over) | ep 11 step 23 | v12 | 50.1 ms/step (p99 52)``
``alone 4/6 (67%), helped 3/4 | safety change_limit 1, clamped 3 (last: clamped)``

When the robot asks for help (``help.enabled``), the first part says so, why and for how long it has waited:
``ASKS FOR HELP: risk +3.2 sd (threshold 2.9) (4s/20s) | ep 11 step 23 | v12``. Before the learner's first
weights (learn mode) it says where it waits and for how long: ``waiting for the learner at tcp://…: 12s of 60s``.

First what matters first: who acts and how to take over, where the run is; then how it goes. "alone"
counts the episodes the policy ran without a single intervened step, "helped" the others: in learn mode a
success with the human's help is not the policy's. After an e-stop the first line starts with why, e.g.
``E-STOP: e-stop key (guard) | ...``. Parts that do not fit in 80 columns are dropped from the end of a line
(the loop rate first); only a single part too long for the line is cut, with an ellipsis.

Drawn with ``rich`` (a :class:`rich.live.Live` on stderr, 4 refreshes a second) when enabled and stderr is a
terminal; the text itself comes from :meth:`StatusLine.text`, so tests and logs get the same words. While it is
live, log records below ERROR go to ``log_file`` (when given) instead of the terminal, so they cannot scroll the
status away; errors still show. With stderr not a terminal (a file, a pipe, a service's journal) nothing is
redrawn: logs stay where they go, and the last frame is written once at the end, as whole lines.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from robot_rl.core.transport import LearnerWaitNotice

WIDTH = 80


class StatusLine:
    """Collects the loop's numbers and renders them; a context manager that starts/stops the live lines.

    ``terminal``: whether stderr is a terminal the lines are redrawn on (None: ask ``sys.stderr.isatty()``).
    """

    def __init__(self, enabled: bool = True, log_file: Path | None = None, terminal: bool | None = None) -> None:
        self.enabled = enabled
        self.log_file = log_file
        self.terminal = terminal
        self.values: dict[str, Any] = {"version": 0, "source": "policy", "mode_hint": "hold", "period_ms": 0.0,
                                       "p99_ms": 0.0, "target_ms": 0.0, "successes": 0, "episodes": 0,
                                       "alone": None, "helped": None, "episode": 0, "step": 0,
                                       "safety_counts": {}, "estop": None, "asking": "", "waiting": ""}
        self.last_safety: tuple[str, ...] = ()
        self._live: Any = None
        self._diverted: list[tuple[logging.Handler, int]] = []
        self._file_handler: logging.Handler | None = None
        self._plain = False  # enabled, but stderr is no terminal: the last frame is written once, at the end

    def update(self, **values: Any) -> None:
        """Set any of the shown values and redraw. ``alone``/``helped``: ``(successes, episodes)`` pairs."""
        self.values.update(values)
        if self._live is not None:
            self._live.update(self._render())

    def waiting(self, notice: LearnerWaitNotice) -> Callable[[float], None]:
        """``wait_first_weights``'s ``on_wait``: ``notice`` logs the wait, the first part shows it with the seconds."""
        return lambda waited_s: self.update(waiting=notice(waited_s))

    def question(self, text: str) -> None:
        """A question for the operator in place of who acts ("" clears it); printed once without a terminal."""
        if self._live is not None:
            self.update(asking=text, source="asking" if text else "hold")
        elif text:
            print(text, file=sys.stderr, flush=True)

    def safety(self, events: tuple[str, ...]) -> None:
        """Remember the newest safety events (shown as ``last:``)."""
        if events:
            self.last_safety = tuple(events)

    def text(self) -> str:
        """The status as plain text: two lines, each at most 80 columns."""
        v = self.values
        who = {"policy": "POLICY acting", "human": "HUMAN acting", "hold": "HOLD (teleop lost)"}.get(
            v["source"], str(v["source"]))
        hint = v.get("hint") or ("hold to take over" if v["mode_hint"] == "hold" else "toggle to take over")
        estop = [f"E-STOP: {v['estop']}"] if v["estop"] else []
        rate = f"{v['period_ms']:.1f} ms/step (p99 {v['p99_ms']:.0f})" if v["target_ms"] else ""
        # The robot asking for help replaces who acts: the operator must see it first (and why, and for how long).
        actor = [v["asking"]] if v.get("asking") and v["source"] != "human" else [f"{who} ({hint})"]
        if v.get("waiting"):  # nobody acts yet: the robot waits for the learner's first weights
            actor = [v["waiting"]]
        first = [*estop, *actor, f"ep {v['episode']} step {v['step']}", f"v{v['version']}", rate]
        success = _success(v)
        second = [success, _safety(v["safety_counts"], self.last_safety, WIDTH - len(success) - 3)]
        return f"{_fit(first)}\n{_fit(second)}"

    def _render(self) -> Any:
        from rich.text import Text

        style = {"human": "bold yellow", "hold": "bold red", "asking": "bold black on yellow"}.get(
            self.values["source"], "bold green")
        if self.values["estop"]:
            style = "bold white on red"
        elif self.values.get("waiting"):
            style = "bold yellow"
        return Text(self.text(), style=style, overflow="ellipsis", no_wrap=True)

    def __enter__(self) -> StatusLine:
        terminal = sys.stderr.isatty() if self.terminal is None else self.terminal
        self._plain = self.enabled and not terminal
        if self.enabled and terminal:
            from rich.console import Console
            from rich.live import Live

            self._divert_logs()
            self._live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._plain:  # whole lines: whatever is printed next starts on its own line
            print(self.text(), file=sys.stderr, flush=True)
            self._plain = False
        for handler, level in self._diverted:
            handler.setLevel(level)
        self._diverted = []
        if self._file_handler is not None:
            logging.getLogger().removeHandler(self._file_handler)
            self._file_handler.close()
            self._file_handler = None
            if self.log_file is not None and self.log_file.exists():
                print(f"warnings of this run: {self.log_file}", file=sys.stderr)

    def _divert_logs(self) -> None:
        if self.log_file is None:
            return
        root = logging.getLogger()
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._file_handler = logging.FileHandler(self.log_file, delay=True)  # no file unless something is logged
        self._file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(self._file_handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        for handler in root.handlers:
            if handler is not self._file_handler and isinstance(handler, logging.StreamHandler) \
                    and handler.stream in (sys.stderr, sys.stdout):
                self._diverted.append((handler, handler.level))
                handler.setLevel(max(handler.level, logging.ERROR))


def _success(v: dict[str, Any]) -> str:
    if v["alone"] is None:
        rate = f" ({v['successes'] / v['episodes']:.0%})" if v["episodes"] else ""
        return f"success {v['successes']}/{v['episodes']}{rate}"
    (a_ok, a_n), (h_ok, h_n) = v["alone"], v["helped"] or (0, 0)
    rate = f" ({a_ok / a_n:.0%})" if a_n else ""
    return f"alone {a_ok}/{a_n}{rate}, helped {h_ok}/{h_n}"


def _safety(counts: dict[str, int], last: tuple[str, ...], budget: int) -> str:
    """``safety clamped 3, change_limit 1 (last: clamped)`` within ``budget`` columns: the most frequent first."""
    items = sorted(((n, k) for k, n in counts.items() if n), key=lambda t: (-t[0], t[1]))
    if not items:
        return "safety none"
    shown: list[str] = []
    for i, (n, k) in enumerate(items):
        more = len(items) - i - 1
        candidate = ", ".join([*shown, f"{k} {n}"]) + (f" +{more} more" if more else "")
        if shown and len("safety " + candidate) > budget:
            break
        shown.append(f"{k} {n}")
    rest = len(items) - len(shown)
    text = "safety " + ", ".join(shown) + (f" +{rest} more" if rest else "")
    tail = f" (last: {', '.join(last)})" if last else ""
    return text + tail if len(text + tail) <= budget else text


def _fit(parts: list[str], width: int = WIDTH) -> str:
    """Join the non-empty parts with `` | ``, dropping whole parts from the end until the line fits."""
    kept = [p for p in parts if p]
    while len(kept) > 1 and len(" | ".join(kept)) > width:
        kept.pop()
    line = " | ".join(kept)
    return line if len(line) <= width else line[: width - 1] + "…"
