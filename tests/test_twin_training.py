"""Training in a fitted twin (``twin.file``) and refitting it while training (``twin.refit_every``).

The "real" robot is mujoco/reach with weaker servos, more damping and an action delay (as in test_twin.py);
its logs are an episode store that grows during the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("mujoco")
pytest.importorskip("cma")

from robot_rl.core.config import ConfigError
from robot_rl.loop.config import resolve_train_config
from robot_rl.sims.base import ParamRange, RandomizeConfig
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos
from robot_rl.twin.calibrate import TwinFitConfig, calibrate
from robot_rl.twin.fit import FitConfig
from robot_rl.twin.in_training import TwinRefitter, randomized
from robot_rl.twin.twin_config import load_twin

pytestmark = pytest.mark.sim
EXE = str(Path(sys.executable).with_name("robot-rl"))
PARAMS = "actuator_gain,dof_damping,action_delay"


def _record(out: Path, episodes: int, seed: int) -> None:
    from robot_rl.core.config import TASKS

    rnd = RandomizeConfig(params={"actuator_gain": ParamRange(0.5, 0.5), "dof_damping": ParamRange(2.5, 2.5)},
                          action_delay=(1, 1))
    real = TASKS.get("mujoco/reach")(num_envs=5, max_episode_steps=10, terminate_on_success=False, randomize=rnd)
    env = real.make("cpu", seed)
    try:
        record_demos(env, out, episodes, ScriptedReachDemonstrator(noise=0.5, seed=seed + 2), fps=25.0)
    finally:
        env.close()


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A twin quickly fitted on 10 logged episodes of the "real" robot: (twin.json, the logs)."""
    root = tmp_path_factory.mktemp("twin_training")
    logs = root / "real"
    _record(logs, 10, seed=1)
    out = root / "twin.json"
    calibrate(TwinFitConfig(episodes=logs, params=PARAMS, fit=FitConfig(population=4, iterations=2, restarts=2,
                                                                           polish_iterations=1), max_steps=6, out=out))
    return out, logs


def test_the_run_trains_in_the_twin_added_to_its_own_randomisation(twin: tuple[Path, Path]) -> None:
    twin_file, _ = twin
    report = load_twin(twin_file)
    cfg = resolve_train_config("mujoco/reach", "sac", None, [f"twin.file={twin_file}", "task.num_envs=2",
                                                             "task.randomize={obs_noise: {state: 0.01}}"])
    env = cfg.make_env("cpu", 0)
    try:
        rnd = randomized(env)
        assert rnd is not None and rnd.cfg.obs_noise == {"state": 0.01}  # the run's own, kept
        gain = report.param("actuator_gain")
        assert (rnd.cfg.params["actuator_gain"].low, rnd.cfg.params["actuator_gain"].high) == \
            pytest.approx(gain.interval(2.0), abs=1e-6)
        assert set(rnd.cfg.params) == {"actuator_gain", "dof_damping"}
    finally:
        env.close()
    preset = resolve_train_config("mujoco/reach", "sac", None, [f"twin.file={twin_file}", "twin.use=preset"])
    p = preset.make_env("cpu", 0, num_envs=1)
    try:
        r = randomized(p)
        assert r is not None and r.cfg.params["dof_damping"].low == r.cfg.params["dof_damping"].high == \
            pytest.approx(report.param("dof_damping").value, abs=1e-6)
    finally:
        p.close()


def test_a_twin_that_does_not_fit_the_run_is_refused(twin: tuple[Path, Path]) -> None:
    twin_file, _ = twin
    cases = {
        "already sets actuator_gain": ["task.randomize={params: {actuator_gain: {low: 0.9, high: 1.1}}}"],
        "other task settings than this run's: control rate": ["task.frame_skip=7"],
    }
    for message, extra in cases.items():
        cfg = resolve_train_config("mujoco/reach", "sac", None, [f"twin.file={twin_file}", *extra])
        with pytest.raises(ConfigError, match=message):
            cfg.make_env("cpu", 0, num_envs=1)
    cfg = resolve_train_config("mujoco/push", "sac", None, [f"twin.file={twin_file}"])
    with pytest.raises(ConfigError, match=r"fitted in 'mujoco/reach'.*--task mujoco/reach"):
        cfg.make_env("cpu", 0, num_envs=1)
    with pytest.raises(ValueError, match=r"needs twin\.file"):
        resolve_train_config("mujoco/reach", "sac", None, ["twin.refit_every=5"])


@pytest.mark.integration  # waits on a refit (a CMA-ES fit) running in a background thread
def test_new_real_episodes_refit_the_twin_and_move_the_envs(twin: tuple[Path, Path], tmp_path: Path) -> None:
    twin_file, _ = twin
    store = tmp_path / "real"
    _record(store, 10, seed=1)
    cfg = resolve_train_config("mujoco/reach", "sac", None, [f"twin.file={twin_file}", "twin.refit_every=5",
                                                             f"twin.real_episodes={store}", "twin.poll_s=0.01"])
    env = cfg.make_env("cpu", 0, num_envs=2)
    try:
        refitter = TwinRefitter(cfg.twin, cfg.task, [env], tmp_path / "run")
        assert refitter.fitted_on == 0  # another store than the twin's logs: all of it is new
        assert refitter.poll() == {} and refitter._thread is not None  # 10 new episodes >= 5: refitting
        refitter._thread.join(120)
        scalars = refitter.poll()
        assert scalars["refits"] == 1.0 and "actuator_gain/value" in scalars
        refit = load_twin(tmp_path / "run" / "twin" / "refit-1.json")
        assert refit.num_episodes == 10 and refit.fit["params"] == PARAMS
        rnd = randomized(env)
        assert rnd is not None and (rnd.cfg.params["actuator_gain"].low, rnd.cfg.params["actuator_gain"].high) \
            == pytest.approx(refit.param("actuator_gain").interval(2.0), abs=1e-6)
        env.reset(0)  # the new ranges are sampled at the next episode
        for _ in range(3):
            env.step(torch.zeros(env.num_envs, *env.spec.action.shape))
        assert refitter.poll() == {} and refitter._thread is None  # nothing new since: no refit
    finally:
        env.close()


@pytest.mark.slow
def test_train_refits_from_the_command_line(twin: tuple[Path, Path], tmp_path: Path) -> None:
    twin_file, _ = twin
    store = tmp_path / "real"
    _record(store, 10, seed=3)  # the robot's newer episodes, in their own store
    out = subprocess.run([EXE, "train", "--task", "mujoco/reach", f"twin.file={twin_file}", "twin.refit_every=5",
                          f"twin.real_episodes={store}", "twin.poll_s=0.1", "loop.log_every_s=0.2",
                          "loop.total_env_steps=12000", "task.num_envs=4", "algo.learning_starts=100000",
                          "loop.eval_episodes=2", "loop.eval_num_envs=2", "loop.eval_every_env_steps=100000",
                          "run.progress=false", "run.name=twin"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "twin: 10 episodes in" in text and "twin: refit 1 on 10 episodes" in text, text[-3000:]
    run = tmp_path / "runs" / "twin"
    assert load_twin(run / "twin" / "refit-1.json").num_episodes == 10
    assert "refit_every: 5" in (run / "config.yaml").read_text()
    assert json.loads((run / "summary.json").read_text())["env_steps"] >= 12000
