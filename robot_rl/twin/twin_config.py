"""The twin file: fitted values with uncertainties, and the ``task.randomize`` sections made from them.

``robot-rl twin fit … --out twin.json`` writes three JSON files:

- ``twin.json``: the report (:class:`TwinReport`): task, logs, each parameter's fit, uncertainty and
  bounds, the per-episode error before and after, the fit's settings and cost;
- ``twin_preset.json``: a ``task.randomize`` mapping whose ranges have ``low == high`` — the fitted values
  applied to every episode (a task preset: the calibrated simulator);
- ``twin_dr.json``: a ``task.randomize`` mapping of domain-randomisation ranges centred on the fit,
  ``value ± k·std`` clipped to the fit's bounds: narrow where the logs pinned a parameter down, wide where
  they did not (an unknown std spans the whole bounds).

Each mapping is one line of JSON (which is YAML), the value of a ``task.randomize=…`` override::

    robot-rl train --task mujoco/reach "task.randomize=$(cat twin_dr.json)"

A factor ``s`` of parameter ``NAME`` (elements ``indices``) becomes ``NAME: {low, high, mode: scale,
indices}`` — the ``ParamRange`` of :class:`~robot_rl.sims.base.RandomizeConfig`; the delay becomes
``action_delay: [low, high]`` in whole steps.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robot_rl.config_io import from_dict
from robot_rl.core.config import ConfigError
from robot_rl.sims.base import RandomizeConfig
from robot_rl.twin.fit import FitResult
from robot_rl.twin.params import DELAY

FORMAT = "robot_rl.twin"
VERSION = 1


@dataclass
class ParamFit:
    """One parameter of a twin file."""

    key: str
    """``NAME`` or ``NAME:label+label`` as given to --params."""
    name: str
    indices: list[int] | None
    labels: list[str]
    value: float
    """Fitted factor on the simulator's nominal value (or steps of delay)."""
    std: float | None
    """Uncertainty (same units); null when unknown."""
    std_restarts: float | None
    std_bootstrap: float | None
    std_local: float | None
    low: float
    """Bounds of the search."""
    high: float
    restarts: list[float] = field(default_factory=list)
    """Each restart's best value."""

    def interval(self, k: float) -> tuple[float, float]:
        """``value ± k·std`` clipped to the bounds (the whole bounds when std is unknown)."""
        if self.std is None or not math.isfinite(self.std):
            return self.low, self.high
        return max(self.low, self.value - k * self.std), min(self.high, self.value + k * self.std)


@dataclass
class TwinReport:
    """Everything ``twin.json`` holds (module docstring)."""

    task: str
    episodes_path: str
    num_episodes: int
    control_hz: float
    params: list[ParamFit]
    errors_before: list[float]
    """Per-episode RMS normalised state error of the uncalibrated simulator."""
    errors_after: list[float]
    episode_ids: list[int]
    loss_before: float
    loss_after: float
    fit: dict[str, Any] = field(default_factory=dict)
    """Settings (population, iterations, restarts, bootstrap, seed), evaluations and wall time."""
    suspect_episodes: list[int] = field(default_factory=list)
    """Episodes whose error after the fit stays above 5× the median: dropped frames the log cannot show,
    contacts or effects the simulator lacks, or a different robot."""

    def to_json(self) -> str:
        """The file's text."""
        return json.dumps({"format": FORMAT, "version": VERSION, **asdict(self)}, indent=2)

    @classmethod
    def from_json(cls, text: str, where: str = "twin file") -> TwinReport:
        """Parse a twin file, refusing other formats and newer versions."""
        data = json.loads(text)
        if data.pop("format", None) != FORMAT:
            raise ConfigError(f"{where} is not a twin file (format {FORMAT!r}; written by `robot-rl twin fit`)")
        if int(data.pop("version", 0)) > VERSION:
            raise ConfigError(f"{where} was written by a newer toolkit (version > {VERSION})")
        data["params"] = [ParamFit(**p) for p in data["params"]]
        return cls(**data)

    def param(self, key: str) -> ParamFit:
        """The fit of ``key`` (``NAME`` or ``NAME:labels``)."""
        for p in self.params:
            if key in (p.key, p.name):
                return p
        raise KeyError(f"no parameter {key!r} in the twin; it has {', '.join(p.key for p in self.params)}")


def report_from_fit(result: FitResult, task: str, episodes_path: str, control_hz: float, episode_ids: list[int],
                    settings: dict[str, Any]) -> TwinReport:
    """A :class:`TwinReport` of ``result``."""
    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    params = [ParamFit(key=p.key, name=p.name, indices=list(p.indices) if p.indices is not None else None,
                       labels=list(p.labels), value=float(result.value[j]), std=num(result.std[j]),
                       std_restarts=num(result.std_restarts[j]), std_bootstrap=num(result.std_bootstrap[j]),
                       std_local=num(result.std_local[j]),
                       low=p.low, high=p.high, restarts=[float(v) for v in result.restart_values[:, j]])
              for j, p in enumerate(result.params)]
    after = result.errors_after
    median = float(np.median(after))
    suspect = [episode_ids[i] for i in np.flatnonzero(after > 5 * median + 1e-9)]
    return TwinReport(task=task, episodes_path=episodes_path, num_episodes=len(after), control_hz=control_hz,
                      params=params, errors_before=[float(x) for x in result.errors_before],
                      errors_after=[float(x) for x in after], episode_ids=list(episode_ids),
                      loss_before=result.loss_before, loss_after=result.loss_after,
                      fit={**settings, "evaluations": result.evaluations, "wall_s": round(result.wall_s, 2),
                           "restart_losses": [float(x) for x in result.restart_losses],
                           "converged_restarts": int(result.converged.sum())},
                      suspect_episodes=suspect)


def randomize_section(report: TwinReport, mode: Literal["preset", "dr"] = "dr", k: float = 2.0) -> dict[str, Any]:
    """The ``task.randomize`` mapping of the twin: fixed values (``preset``) or ranges ``value ± k·std`` (``dr``)."""
    params: dict[str, Any] = {}
    section: dict[str, Any] = {"params": params}
    for p in report.params:
        lo, hi = (p.value, p.value) if mode == "preset" else p.interval(k)
        if p.name == DELAY:
            section["action_delay"] = [max(0, math.floor(lo + 1e-9)), max(0, math.ceil(hi - 1e-9))]
            continue
        entry: dict[str, Any] = {"low": round(lo, 6), "high": round(hi, 6), "mode": "scale"}
        if p.indices is not None:
            entry["indices"] = list(p.indices)
        params[p.name] = entry
    return section


def override(report: TwinReport, mode: Literal["preset", "dr"] = "dr", k: float = 2.0) -> str:
    """The ``task.randomize=…`` override of the twin (one line: a shell argument or a config value)."""
    return "task.randomize=" + json.dumps(randomize_section(report, mode, k))


def randomize_config(report: TwinReport, mode: Literal["preset", "dr"] = "dr", k: float = 2.0) -> RandomizeConfig:
    """The twin as a :class:`RandomizeConfig` (validated as the config loader does)."""
    return from_dict(RandomizeConfig, randomize_section(report, mode, k), where="twin randomize")


def config_paths(out: Path | str) -> tuple[Path, Path, Path]:
    """``(twin.json, twin_preset.json, twin_dr.json)`` for ``--out twin.json``."""
    out = Path(out)
    return out, out.with_name(f"{out.stem}_preset.json"), out.with_name(f"{out.stem}_dr.json")


def write_twin(report: TwinReport, out: Path | str, k: float = 2.0) -> tuple[Path, Path, Path]:
    """Write the report and its two ``task.randomize`` mappings (module docstring); returns their paths."""
    report_path, preset_path, dr_path = config_paths(out)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(report.to_json() + "\n")
    preset_path.write_text(json.dumps(randomize_section(report, "preset")) + "\n")
    dr_path.write_text(json.dumps(randomize_section(report, "dr", k)) + "\n")
    return report_path, preset_path, dr_path


def load_twin(path: Path | str) -> TwinReport:
    """Read a ``twin.json``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (write it with `robot-rl twin fit --out {path}`)")
    return TwinReport.from_json(path.read_text(), str(path))
