"""The digital twin (robot_rl/twin): recover hidden parameters of a "real" simulator from 20 logged episodes,
report a large uncertainty where the logs say nothing, refuse unusable logs with clear errors, and load the twin
file into the real env as a preset and as randomisation ranges."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")  # MUJOCO_GL is chosen in conftest.py, before anything imports mujoco
pytest.importorskip("cma")

from robot_rl.core.config import TASKS
from robot_rl.core.specs import SpecMismatchError
from robot_rl.data.episode import Episode
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.sims.base import ParamRange, RandomizeConfig
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos
from robot_rl.sims.randomize import RandomizedVecEnv
from robot_rl.twin.calibrate import TwinFitConfig, calibrate, prepare
from robot_rl.twin.fit import FitConfig
from robot_rl.twin.logs import ControlRateError, DroppedFramesError
from robot_rl.twin.params import parse_params
from robot_rl.twin.twin_config import load_twin, override, randomize_config, randomize_section

pytestmark = pytest.mark.sim

#: The "real" robot: mujoco/reach with weaker servos, more joint damping and one step of action delay.
TRUE = {"actuator_gain": 0.5, "dof_damping": 2.5}
TRUE_DELAY = 1
STEPS = 12  # short episodes: the step response of the servos is what identifies them


def record_real(out: Path, episodes: int = 20, steps: int = STEPS, fps: float = 25.0, seed: int = 1) -> Path:
    """Log ``episodes`` noisy scripted reaches of the "real" robot into an episode store at ``out``."""
    rnd = RandomizeConfig(params={k: ParamRange(v, v) for k, v in TRUE.items()},
                          action_delay=(TRUE_DELAY, TRUE_DELAY))
    real = TASKS.get("mujoco/reach")(num_envs=10, max_episode_steps=steps, terminate_on_success=False, randomize=rnd)
    env = real.make("cpu", seed)
    try:
        record_demos(env, out, episodes, ScriptedReachDemonstrator(noise=0.5, seed=seed + 2), fps=fps)
    finally:
        env.close()
    return out


@pytest.fixture(scope="module")
def real_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_real(tmp_path_factory.mktemp("twin") / "real")


@pytest.fixture(scope="module")
def fitted(real_logs: Path, tmp_path_factory: pytest.TempPathFactory):
    """The full fit: 3 CMA-ES restarts (population 6, 15 iterations) and 8 polishing steps; 25-45 s on 2 cores."""
    out = tmp_path_factory.mktemp("twin_out") / "twin.json"
    fit = FitConfig(population=6, iterations=15, restarts=3, polish_iterations=8, seed=0)
    cfg = TwinFitConfig(episodes=real_logs, task="mujoco/reach", params="actuator_gain,dof_damping,geom_friction,"
                        "action_delay", fit=fit, out=out)
    t0 = time.perf_counter()
    report, result = calibrate(cfg)
    return report, result, out, time.perf_counter() - t0


@pytest.fixture(scope="module")
def quick_twin(real_logs: Path, tmp_path_factory: pytest.TempPathFactory):
    """A twin file from a tiny fit (seconds): enough to check what the files load into."""
    out = tmp_path_factory.mktemp("twin_quick") / "twin.json"
    cfg = TwinFitConfig(episodes=real_logs, params="actuator_gain,dof_damping,geom_friction,action_delay",
                        fit=FitConfig(population=4, iterations=2, restarts=2, polish_iterations=1), max_steps=6,
                        out=out)
    report, _ = calibrate(cfg)
    return report, out


@pytest.mark.slow
def test_the_fit_recovers_the_hidden_parameters(fitted):
    report, result, _, wall = fitted
    print(f"fit of 20 episodes: {wall:.1f}s, {result.evaluations} candidates")
    for p in report.params:
        print(f"  {p.key}: {p.value:.4f} ± {p.std}")
    assert report.param("actuator_gain").value == pytest.approx(TRUE["actuator_gain"], rel=0.05)
    assert report.param("dof_damping").value == pytest.approx(TRUE["dof_damping"], rel=0.15)
    assert report.param("action_delay").value == TRUE_DELAY
    assert report.num_episodes == 20
    # The error per episode falls by orders of magnitude from the uncalibrated sim to the twin.
    assert max(report.errors_after) < 0.1 * min(report.errors_before)
    assert report.loss_after < 1e-3 * report.loss_before


@pytest.mark.slow
def test_a_parameter_the_logs_cannot_inform_gets_a_large_uncertainty(fitted):
    # Only the gripper, table and objects collide, and reach has no objects: friction never acts.
    report = fitted[0]
    friction, gain = report.param("geom_friction"), report.param("actuator_gain")
    assert friction.std is not None and gain.std is not None
    assert friction.std > 0.3 * friction.value  # tens of percent: the box, not a measurement
    assert friction.std > 10 * gain.std / gain.value * friction.value
    lo, hi = friction.interval(2.0)
    assert hi / lo > 3  # its randomisation range stays wide
    glo, ghi = gain.interval(2.0)
    assert ghi / glo < 1.5  # the servo gain's is narrow


def test_the_twin_file_loads_as_a_preset_into_the_real_env(quick_twin):
    report, out = quick_twin
    # What a user types: robot-rl train --task mujoco/reach "task.randomize=$(cat twin_preset.json)"
    preset = out.with_name("twin_preset.json").read_text().strip()
    cfg = resolve_train_config("mujoco/reach", "sac", overrides=[f"task.randomize={preset}"])
    env = cfg.task.make("cpu", 0, num_envs=2)
    try:
        assert isinstance(env, RandomizedVecEnv)
        env.reset(seed=0)  # parameters are drawn at every episode start
        nominal = TASKS.get("mujoco/reach")().make("cpu", 0, num_envs=1).get_params()
        params = env.get_params()
        gain = report.param("actuator_gain").value
        want = gain * nominal["actuator_gain"].numpy().repeat(2, 0)
        np.testing.assert_allclose(params["actuator_gain"].numpy(), want, rtol=1e-5)
        delay = int(report.param("action_delay").value)
        assert cfg.task.randomize.action_delay == (delay, delay)
    finally:
        env.close()


def test_the_twin_file_loads_as_randomisation_ranges_into_the_real_env(quick_twin):
    report, out = quick_twin
    dr = out.with_name("twin_dr.json").read_text().strip()
    cfg = resolve_train_config("mujoco/reach", "sac", overrides=[f"task.randomize={dr}"])
    rng = cfg.task.randomize.params["actuator_gain"]
    gain = report.param("actuator_gain")
    assert rng.low <= gain.value <= rng.high and rng.mode == "scale"
    assert (rng.low, rng.high) == pytest.approx(gain.interval(2.0), abs=1e-5)
    assert randomize_config(load_twin(out)).params["geom_friction"].high == cfg.task.randomize.params[
        "geom_friction"].high
    env = cfg.task.make("cpu", 0, num_envs=16)
    try:
        nominal = TASKS.get("mujoco/reach")().make("cpu", 0, num_envs=1).get_params()["actuator_gain"][0, 0].item()
        for seed in range(3):
            env.reset(seed=seed)
            factor = env.get_params()["actuator_gain"][:, 0].numpy() / nominal
            assert (factor >= rng.low - 1e-6).all() and (factor <= rng.high + 1e-6).all()
        assert factor.std() > 0  # really randomised
    finally:
        env.close()


def test_a_twin_file_round_trips_and_rewrites_its_ranges(quick_twin):
    report, out = quick_twin
    loaded = load_twin(out)
    assert loaded == report
    wide = randomize_section(loaded, "dr", k=4.0)["params"]["actuator_gain"]
    narrow = randomize_section(loaded, "dr", k=1.0)["params"]["actuator_gain"]
    assert override(loaded, "dr", 4.0) == "task.randomize=" + json.dumps(randomize_section(loaded, "dr", 4.0))
    assert wide["low"] <= narrow["low"] <= narrow["high"] <= wide["high"]
    with pytest.raises(ValueError, match="not a twin file"):
        out.with_name("bad.json").write_text(json.dumps({"format": "other"}))
        load_twin(out.with_name("bad.json"))


# ---- unusable logs: each error names the problem and what to do ---------------------------------------------


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy the store ``src`` to ``dst``, passing every episode through ``edit(i, episode)``."""
    store = EpisodeStore(src)
    new = EpisodeStore.create(dst, store.spec, fps=store.fps, task=store.task)
    for i, ep in enumerate(store):
        new.append(edit(i, ep))
    return dst


def _drop_frame(ep: Episode, t: int) -> Episode:
    keep = np.delete(np.arange(len(ep)), t)
    return Episode(obs={k: v[keep] for k, v in ep.obs.items()}, action=ep.action[keep], reward=ep.reward[keep],
                   terminated=ep.terminated[keep], truncated=ep.truncated[keep], intervened=ep.intervened[keep],
                   success=ep.success[keep], final_obs=ep.final_obs, task=ep.task,
                   meta={**ep.meta, "timestamps": [float(i) / 25.0 for i in keep]})


def _fit_cfg(path: Path, **kw) -> TwinFitConfig:
    return TwinFitConfig(episodes=path, fit=FitConfig(population=2, iterations=1, restarts=1), out=None, **kw)


def test_dropped_frames_are_refused_naming_the_episode_and_the_gap(real_logs: Path, tmp_path: Path):
    def edit(i: int, ep: Episode) -> Episode:
        if i == 3:
            return _drop_frame(ep, 5)
        return Episode(**{**ep.__dict__, "meta": {**ep.meta, "timestamps": [t / 25.0 for t in range(len(ep))]}})

    gappy = _rewrite(real_logs, tmp_path / "gappy", edit)
    with pytest.raises(DroppedFramesError, match=r"episode 3 .* dropped frames: 0\.08 s between steps 4 and 5.*"
                                                 r"--skip-bad"):
        prepare(_fit_cfg(gappy))
    _, logs, rep = prepare(_fit_cfg(gappy, skip_bad=True))
    rep.close()
    assert logs.num_episodes == 19 and 3 in logs.skipped and 3 not in logs.episode_ids


def test_a_frame_index_jump_is_a_dropped_frame(real_logs: Path, tmp_path: Path):
    def edit(i: int, ep: Episode) -> Episode:
        index = list(range(len(ep)))
        if i == 0:
            index = index[:4] + [j + 1 for j in index[4:]]
        return Episode(**{**ep.__dict__, "meta": {**ep.meta, "frame_index": index}})

    with pytest.raises(DroppedFramesError, match=r"episode 0 .* frame_index jumps from 3 to 5"):
        prepare(_fit_cfg(_rewrite(real_logs, tmp_path / "jump", edit)))


def test_logs_at_another_control_rate_are_refused(tmp_path: Path):
    slow = record_real(tmp_path / "slow", episodes=2, steps=4, fps=20.0)
    with pytest.raises(ControlRateError, match=r"recorded at 20 Hz but mujoco/reach steps at 25 Hz.*--fps"):
        prepare(_fit_cfg(slow))
    _, logs, rep = prepare(_fit_cfg(slow, fps=25.0))  # the metadata was wrong: say the true rate
    rep.close()
    assert logs.num_episodes == 2

    def stamps(i: int, ep: Episode) -> Episode:
        return Episode(**{**ep.__dict__, "meta": {**ep.meta, "timestamps": [t / 20.0 for t in range(len(ep))]}})

    with pytest.raises(ControlRateError, match=r"timestamps are 0\.05 s apart \(20 Hz\)"):
        prepare(_fit_cfg(_rewrite(slow, tmp_path / "stamped", stamps), fps=25.0))


def test_logs_of_another_spec_are_refused(real_logs: Path):
    with pytest.raises(SpecMismatchError, match=r"state has \[25\] numbers per step, mujoco/push has \[32\]"):
        prepare(_fit_cfg(real_logs, task="mujoco/push"))
    with pytest.raises(SpecMismatchError, match=r"action has shape \[3\], mujoco/reach takes \[6\].*task\.control"):
        prepare(_fit_cfg(real_logs, task_overrides=("task.control=joint",)))


def test_parameter_names_are_checked():
    env = TASKS.get("mujoco/reach")().make("cpu", 0, num_envs=1)
    with pytest.raises(ValueError, match=r"unknown parameter 'mass'.*body_mass"):
        parse_params("mass", env.param_names(), env.param_labels)
    with pytest.raises(ValueError, match="dof_damping has no element 'j9'; its elements: j1"):
        parse_params("dof_damping:j9", env.param_names(), env.param_labels)
    with pytest.raises(ValueError, match="names 'dof_damping' twice"):
        parse_params("dof_damping:j1,dof_damping:j2", env.param_names(), env.param_labels)
    (p,) = parse_params("dof_damping:j1+j3", env.param_names(), env.param_labels)
    assert p.indices == (0, 2) and p.key == "dof_damping:j1+j3"
    assert p.from_unit(p.to_unit(2.5)) == pytest.approx(2.5)


def test_the_replay_of_the_true_parameters_reproduces_the_logs(real_logs: Path):
    _, _, rep = prepare(_fit_cfg(real_logs, params="actuator_gain,dof_damping,action_delay"))
    try:
        assert rep.batch_candidates == 2  # population 2 × 1 restart: the third candidate is a chunk of its own
        true, neutral = [TRUE["actuator_gain"], TRUE["dof_damping"], TRUE_DELAY], [1.0, 1.0, 0.0]
        err = rep.errors(np.array([true, neutral, neutral]))
    finally:
        rep.close()
    assert err.shape == (3, 20)
    assert err[0].max() < 1e-8 < err[1].min()  # exact up to the float32 log of the start state
    np.testing.assert_array_equal(err[1], err[2])  # the same replay in a 40-world and a 20-world env


@pytest.mark.integration
def test_the_cli_verb_fits_and_writes_the_three_files(real_logs: Path, tmp_path: Path):
    # As a user types it: `robot-rl twin fit`, `robot-rl twin config`, then the train command the docs show with
    # the twin's ranges (resolved by `robot-rl config train`, which builds the same config without training).
    exe = str(Path(sys.executable).with_name("robot-rl"))
    out = tmp_path / "t" / "twin.json"
    fit = subprocess.run([exe, "twin", "fit", "--episodes", str(real_logs), "--params", "actuator_gain,action_delay",
                          "--population", "4", "--iterations", "2", "--restarts", "2", "--max-steps", "6",
                          "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stdout + fit.stderr
    assert "actuator_gain" in fit.stdout and "task.randomize=$(cat" in fit.stdout
    assert out.is_file() and out.with_name("twin_preset.json").is_file() and out.with_name("twin_dr.json").is_file()
    cfg = subprocess.run([exe, "twin", "config", str(out), "--mode", "preset"], capture_output=True, text=True,
                         timeout=120)
    assert cfg.returncode == 0 and "actuator_gain" in json.loads(cfg.stdout)["params"], cfg.stderr
    train = subprocess.run(["bash", "-c", f'{exe} config train --task mujoco/reach '
                            f'"task.randomize=$(cat {out.with_name("twin_dr.json")})"'],
                           capture_output=True, text=True, timeout=120)
    assert train.returncode == 0 and "actuator_gain" in train.stdout, train.stdout + train.stderr
    bad = subprocess.run([exe, "twin", "fit", "--episodes", str(real_logs), "--task", "mujoco/push", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "mujoco/push" in bad.stderr
