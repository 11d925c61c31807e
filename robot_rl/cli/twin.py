"""`robot-rl twin fit|config|camera`: calibrate a simulated task (dynamics, camera) to logs, rewrite its configs."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import tyro

from robot_rl.cli.base import Command, missing_extra
from robot_rl.cli.vocabulary import sub_verb_union


@dataclass
class TwinFitArgs(Command):
    """Fit simulator parameters to logged episodes by replaying their actions open-loop (CMA-ES).

    Writes --out (the fit, uncertainties, per-episode errors before and after) and, beside it, two
    task.randomize mappings: <stem>_preset.json (the fitted values) and <stem>_dr.json (ranges value ± k·std).
    Train on either with `robot-rl train --task TASK "task.randomize=$(cat twin_dr.json)"`. See docs/real2sim.md.
    """

    episodes: Annotated[Path, tyro.conf.arg(metavar="DATA")]
    """Logs: an episode store or a LeRobotDataset v3 with a state observation."""
    task: str = "mujoco/reach"
    """The simulated task to calibrate (a mujoco/* arm task); the logs must match its spec and rate."""
    params: str = "actuator_gain,dof_damping,body_mass,action_delay"
    """Comma-separated parameters: NAME (all elements scaled together) or NAME:label+label (e.g.
    dof_damping:j1+j2, body_mass:cube); names: body_mass, geom_friction, dof_damping, actuator_gain, action_delay."""
    restarts: int = 4
    """Independent CMA-ES runs; their spread is the uncertainty of parameters the logs do not pin down."""
    bootstrap: int = 0
    """Refits on episodes resampled with replacement (a few Levenberg–Marquardt steps each), added to the
    uncertainty: how much the fit depends on which episodes were logged."""
    population: int = 12
    """CMA-ES candidates per iteration (each a parallel replay of every episode)."""
    iterations: int = 40
    """CMA-ES iterations per restart."""
    polish_iterations: int = 12
    """Levenberg–Marquardt iterations polishing each restart's result."""
    scale_range: tuple[float, float] = (0.2, 5.0)
    """Bounds of every factor on the simulator's nominal value."""
    max_delay: int = 3
    """Largest action delay searched (control steps)."""
    k: float = 2.0
    """The randomisation ranges of <stem>_dr.json are value ± k·std, clipped to the bounds."""
    fps: float | None = None
    """The logs' true control rate, if the rate they record is wrong."""
    skip_bad: bool = False
    """Leave out episodes with dropped frames (and say so) instead of stopping."""
    max_steps: int | None = None
    """Replay only the first N steps of each episode."""
    seed: int = 0
    """Seed of CMA-ES and the bootstrap."""
    out: Path = Path("twin.json")
    """The twin file to write."""
    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="task.KEY=VALUE")]] = ()
    """Task settings the logs were recorded with, e.g. task.action_scale=0.05."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The task's settings (``task.KEY=VALUE``)."""
        return ("task",)

    def resolved_config(self) -> Any:
        """The :class:`~robot_rl.twin.calibrate.TwinFitConfig` this command runs."""
        from robot_rl.twin.calibrate import TwinFitConfig
        from robot_rl.twin.fit import FitConfig

        fit = FitConfig(population=self.population, iterations=self.iterations, restarts=self.restarts,
                        bootstrap=self.bootstrap, polish_iterations=self.polish_iterations, seed=self.seed)
        return TwinFitConfig(episodes=self.episodes, task=self.task, task_overrides=self.overrides,
                             params=self.params, scale_range=self.scale_range, max_delay=self.max_delay, fit=fit,
                             k=self.k, fps=self.fps, skip_bad=self.skip_bad, max_steps=self.max_steps, out=self.out)

    def run(self) -> int:
        """Fit with a progress bar, print the table, write the files."""
        from rich.markup import escape  # descriptions are rich markup: a [bracket] in the text is not a style
        from rich.progress import Progress

        from robot_rl.twin.calibrate import calibrate
        from robot_rl.twin.twin_config import config_paths

        cfg = self.resolved_config()
        with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
            tasks: dict[str, Any] = {}

            def progress(stage: str, done: int, total: int, best: float) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(escape(stage), total=total)
                bar.update(tasks[stage], completed=done, description=escape(f"{stage}: loss {best:.4g}"))

            report, _ = calibrate(cfg, progress)
        print(format_report(report))
        report_path, preset, dr = config_paths(self.out)
        print(f"wrote {report_path}, {preset} (fitted values) and {dr} (ranges ± {self.k:g}·std); train on it with\n"
              f'  robot-rl train --task {report.task} "task.randomize=$(cat {dr})"')
        return 0


def format_report(report: Any) -> str:
    """The fit as a table: value ± std per parameter, and the error before → after."""
    lines = [f"{'parameter':<28} {'fit':>9} {'± std':>9}   bounds"]
    for p in report.params:
        std = f"{p.std:.3g}" if p.std is not None else "unknown"
        lines.append(f"{p.key:<28} {p.value:>9.4g} {std:>9}   [{p.low:g}, {p.high:g}]")
    before, after = report.errors_before, report.errors_after
    lines.append(f"state error (RMS, normalised) over {report.num_episodes} episodes: mean "
                 f"{sum(before) / len(before):.4g} → {sum(after) / len(after):.4g}")
    converged, restarts = report.fit.get("converged_restarts", 0), report.fit.get("restarts", 0)
    if converged < 2 and not report.fit.get("bootstrap"):
        lines.append(f"only {converged} of {restarts} restarts reached the best loss: the std of well-informed "
                     "parameters is then the local (Laplace) term alone, which is optimistic; raise --iterations or "
                     "--restarts, or add --bootstrap 8")
    if report.suspect_episodes:
        lines.append(f"episodes still far off after the fit (dropped frames? unmodelled effects?): "
                     f"{report.suspect_episodes}")
    return "\n".join(lines)


@dataclass
class TwinCameraArgs(Command):
    """Fit a camera's pose and field of view to logged images of the arm (CMA-ES on rendered scenes).

    The logs need the camera's frames and the full state beside them (record with task.obs=state_pixels).
    Writes --out and prints the task.camera_adjust override that renders the simulator from the fitted camera.
    See docs/real2sim.md, "The camera".
    """

    episodes: Annotated[Path, tyro.conf.arg(metavar="DATA")]
    """Logs: an episode store or a LeRobotDataset v3 with image.<camera> and state observations."""
    task: str = "mujoco/reach"
    """The simulated task whose scene is rendered (a mujoco/* arm task)."""
    camera: str = "front"
    """The scene camera the logged frames come from (front, side, top, wrist)."""
    free: str = "dx,dy,dz,roll,pitch,yaw,fovy_scale"
    """Comma-separated adjustments to fit (the others stay as the scene has them); leave out fovy_scale when the
    camera's intrinsics are known: a shift along the line of sight and a zoom look alike."""
    frames: int = 48
    """Logged frames compared, spread evenly over the episodes."""
    max_shift: float = 0.1
    """Bound of the position shift on each axis (m)."""
    max_turn: float = 10.0
    """Bound of the rotation about each camera axis (degrees)."""
    population: int = 12
    """CMA-ES candidates per iteration (each renders every compared frame)."""
    iterations: int = 60
    """CMA-ES iterations per restart."""
    restarts: int = 3
    """Independent CMA-ES runs; their spread is the uncertainty."""
    seed: int = 0
    """Seed of CMA-ES and of the restarts' starting points."""
    out: Path = Path("camera.json")
    """The fit to write."""
    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="task.KEY=VALUE")]] = ()
    """Task settings the logs were recorded with, e.g. task.image_size=96."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The task's settings (``task.KEY=VALUE``)."""
        return ("task",)

    def run(self) -> int:
        """Fit with a progress bar, print the table and the override, write --out."""
        from rich.progress import Progress

        from robot_rl.twin.calibrate import task_from_name
        from robot_rl.twin.camera import CameraFitConfig, describe, fit_camera

        cfg = CameraFitConfig(camera=self.camera, free=tuple(f.strip() for f in self.free.split(",") if f.strip()),
                              frames=self.frames, max_shift=self.max_shift,
                              max_turn=self.max_turn, population=self.population, iterations=self.iterations,
                              restarts=self.restarts, seed=self.seed)
        task = task_from_name(self.task, self.overrides)
        with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
            job = bar.add_task("camera fit", total=cfg.restarts * cfg.iterations)

            def progress(done: int, total: int, best: float) -> None:
                bar.update(job, completed=done, description=f"camera fit: error {best:.4g}")

            fit = fit_camera(task, self.episodes, cfg, progress)
        print(describe(fit))
        fit.write(self.out)
        print(f"wrote {self.out}; render the simulator from the fitted camera with\n"
              f"  robot-rl train --task {self.task} 'task.camera_adjust={json.dumps(fit.adjust())}' ...")
        return 0


@dataclass
class TwinConfigArgs(Command):
    """Print a twin's task.randomize mapping again: the fitted values (preset) or ranges with another k (dr)."""

    twin: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="TWIN_JSON")]]
    """A twin file from `robot-rl twin fit`."""
    mode: Literal["preset", "dr"] = "dr"
    """preset: the fitted values; dr: ranges value ± k·std."""
    k: float = 2.0
    """Width of the ranges in standard deviations."""
    out: Path | None = None
    """Where to write the mapping (default: print it)."""

    def run(self) -> int:
        """Print or write the mapping (the value of a `task.randomize=` override)."""
        from robot_rl.twin.twin_config import load_twin, randomize_section

        text = json.dumps(randomize_section(load_twin(self.twin), self.mode, self.k))
        if self.out is None:
            print(text)
        else:
            self.out.write_text(text + "\n")
            print(f"wrote {self.out}")
        return 0


TWIN_VERBS: dict[str, type[Command]] = {"fit": TwinFitArgs, "config": TwinConfigArgs, "camera": TwinCameraArgs}
if TYPE_CHECKING:
    TwinVerb = Command
else:  # tyro's subcommands, one per sub-verb
    TwinVerb = sub_verb_union(TWIN_VERBS)


@dataclass
class TwinArgs(Command):
    """Digital twin: fit simulator parameters to robot logs (real2sim), and make task configs from the fit.

    `robot-rl twin fit --episodes DATA --task mujoco/reach --out twin.json`, then
    `robot-rl train --task mujoco/reach "task.randomize=$(cat twin_dr.json)"`. See docs/real2sim.md.
    """

    sub_verbs: ClassVar[dict[str, type[Command]]] = TWIN_VERBS

    action: tyro.conf.OmitSubcommandPrefixes[TwinVerb]
    """What to do."""

    def run(self) -> int:
        """Run the sub-verb; 2 on logs that cannot be replayed (a UserError), a missing file or the missing extra."""
        from robot_rl.core.errors import UserError

        try:
            result: int = self.action.run()
        except (UserError, FileNotFoundError, ImportError) as e:
            if isinstance(e, ImportError) and not missing_extra(e):
                raise
            print(f"robot-rl twin: error: {e}", file=sys.stderr)
            return 2
        return result
