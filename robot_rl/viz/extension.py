"""The ``viz`` extension of a training run: the live view in Rerun (``viz.*``) and the wandb mirror (``run.wandb``).

Sub-env 0 of actor 0 streams its steps and episodes (~50 us a logged step on CPU: docs/visualisation.md);
evaluations become notes; with ``run.wandb=true`` every logged scalar goes to Weights & Biases too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robot_rl.core.extension import BaseExtension, RunHandle, StepHook, StepView, register_extension
from robot_rl.viz import StepViz, open_viz
from robot_rl.viz.config import VizConfig


class VizExtension(BaseExtension):
    """Opens the sinks the run config asks for and feeds them."""

    def __init__(self, section: VizConfig, run_cfg: Any) -> None:
        self.section = section
        self.run_cfg = run_cfg
        self.viz: StepViz | None = None

    def scalar_sinks(self, run: RunHandle) -> list[Any]:
        """The wandb mirror with ``run.wandb=true``."""
        opts = self.run_cfg.run
        if not opts.wandb:
            return []
        from robot_rl.viz.wandb_sink import WandbSink

        return [WandbSink(run.run_dir, run.config_dict(), opts.wandb_project, opts.wandb_entity, opts.wandb_mode)]

    def attach(self, run: RunHandle) -> None:
        """Open the live view (not with actor processes: they step elsewhere)."""
        if run.remote:  # the actors step elsewhere
            return
        self.viz = open_viz(self.section, Path(run.run_dir) / "viz.rrd", Path(run.run_dir).resolve().name, run.title)
        if self.viz is not None:
            run.note(f"live view (sub-env 0 of actor 0): {self.viz.where}")

    def step_hook(self, index: int, actor: Any) -> StepHook | None:
        """Actor 0 streams its sub-env 0."""
        return _VizStep(self.viz, actor.env.num_envs) if index == 0 and self.viz is not None else None

    def evaluated(self, env_steps: int, success_rate: float, mean_return: float) -> None:
        """Each evaluation becomes a note in the log view."""
        if self.viz is not None:
            self.viz.note(f"eval @ {env_steps} env steps: success {success_rate:.0%}, return {mean_return:.2f}")

    def close(self) -> None:
        """Finish the recording."""
        if self.viz is not None:
            self.viz.close()


class _VizStep(StepHook):
    """Sub-env 0's steps (and episode ends) to the live view."""

    def __init__(self, viz: StepViz, num_envs: int) -> None:
        self.viz = viz
        self.episodes = 0

    def after_step(self, step: StepView) -> None:
        viz, t, info, result = self.viz, step.t, step.result.info, step.result
        if viz.due(t):
            keys = [k for k in step.obs if k == "state" or (k.startswith("image.") and viz.camera_due(t))]
            viz.step(t, _host(step.action)[0], source="human" if _host(step.intervened)[0] else "policy",
                     reward=float(_host(step.reward)[0]), success=bool(_host(info["success"])[0]),
                     obs={k: step.obs[k][0].cpu().numpy() for k in keys})
        if step.any_done and (bool(_host(result.terminated)[0]) or bool(_host(result.truncated)[0])):
            success, terminated = bool(_host(info["success"])[0]), bool(_host(result.terminated)[0])
            viz.episode_end(t, index=self.episodes,
                            outcome="success" if success else ("terminated" if terminated else "time_limit"),
                            ret=float(_host(info["episode_return"])[0]), length=int(_host(info["episode_length"])[0]))
            self.episodes += 1


def _host(x: torch.Tensor) -> Any:
    """``x`` as a numpy array (a view on CPU; one copy from an accelerator)."""
    return x.detach().cpu().numpy()


@register_extension("viz", VizConfig, "live view in Rerun (viz.sink=rerun) and the wandb mirror (run.wandb=true)")
def build(section: VizConfig, run_cfg: Any) -> VizExtension | None:
    """The extension when the live view or wandb is on, else None."""
    return VizExtension(section, run_cfg) if section.enabled or run_cfg.run.wandb else None
