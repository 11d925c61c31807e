"""`robot-rl launch`: the process layout, the SLURM script (run against stand-in `scontrol`/`srun`), local launches."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_rl.launch.plan import LaunchPlan, parse_listening
from robot_rl.launch.ray_host import ProcessHost

EXE = str(Path(sys.executable).with_name("robot-rl"))


def test_plan_gives_every_role_the_run_options() -> None:
    plan = LaunchPlan(3, ["--task", "reach", "algo.batch_size=64"], python="py")
    learner = plan.learner_argv("tcp://127.0.0.1:*")
    assert learner[:4] == ["py", "-m", "robot_rl.cli", "learner"] and learner[-1] == "loop.remote_actors=3"
    assert "algo.batch_size=64" in learner and learner[learner.index("--bind") + 1] == "tcp://127.0.0.1:*"
    actor = plan.actor_argv(2, "tcp://h:1")
    assert actor[actor.index("--actor-id") + 1] == "2" and actor[actor.index("--connect") + 1] == "tcp://h:1"
    assert parse_listening("learner listening on tcp://10.0.0.2:4000 (run directory runs/a b)\n") == \
        ("tcp://10.0.0.2:4000", Path("runs/a b"))
    assert parse_listening("eval @ 0 steps") is None
    with pytest.raises(ValueError, match="at least one actor"):
        LaunchPlan(0)


def _fake_slurm(bin_dir: Path, calls: Path) -> None:
    """`scontrol` printing three nodes and an `srun` that records its node and command, as SLURM would run them.

    The stand-in learner step lasts until every step has been recorded, as a real learner outlives the actors'
    start: otherwise the script's closing SIGTERM to the actors could land before a stand-in actor wrote its line.
    """
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\nprintf 'gpu-a\\ngpu-b\\ngpu-c\\n'\n")
    (bin_dir / "srun").write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$* | learner=$ROBOT_RL_LEARNER" >> {calls}\n'
        'if [[ " $* " == *" learner "* ]]; then\n'
        f'  for _ in $(seq 200); do [ "$(wc -l < {calls})" -ge 4 ] && break; sleep 0.05; done\n'
        "fi\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)


@pytest.mark.integration
def test_slurm_dry_run_script_places_every_role(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    out = subprocess.run([EXE, "launch", "--backend", "slurm", "--dry-run", "--script", str(script), "--actors", "3",
                          "--nodes", "3", "--partition", "gpu", "--gpus-per-node", "1", "--port", "6000",
                          "--task", "reach", "algo.batch_size=64"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = script.read_text()
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks=4", "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1"):
        assert line in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    calls = tmp_path / "calls.txt"
    _fake_slurm(tmp_path / "bin", calls)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-c]"}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=60)
    runs = calls.read_text().splitlines()
    assert len(runs) == 4
    learner = [r for r in runs if " learner " in r]
    assert len(learner) == 1 and "--nodelist=gpu-a" in learner[0] and "--bind tcp://0.0.0.0:6000" in learner[0]
    actors = sorted((r for r in runs if " actor " in r), key=lambda r: re.search(r"--actor-id (\d)", r).group(1))
    assert [re.search(r"--nodelist=(\S+)", r).group(1) for r in actors] == ["gpu-b", "gpu-c", "gpu-b"]
    for i, r in enumerate(actors):
        assert f"--actor-id {i}" in r and "--connect tcp://gpu-a:6000" in r and "learner=tcp://gpu-a:6000" in r
        assert "algo.batch_size=64" in r and "loop.remote_actors=3" in r


@pytest.mark.integration
def test_slurm_without_sbatch_says_how(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    out = subprocess.run([EXE, "launch", "--backend", "slurm", "--task", "reach"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 2 and "--dry-run --script" in out.stdout


@pytest.mark.integration
def test_launch_refuses_a_bad_config_before_starting_anything(tmp_path: Path) -> None:
    out = subprocess.run([EXE, "launch", "--task", "no_such_task"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode != 0 and "no_such_task" in out.stdout + out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_process_host_restarts_and_stops(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    host = ProcessHost([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], str(log))
    deadline = time.monotonic() + 20
    while not host.new_output() and time.monotonic() < deadline:
        time.sleep(0.1)
    host.process.send_signal(signal.SIGKILL)
    host.process.wait(10)
    assert host.poll() == -signal.SIGKILL
    host.restart()
    assert host.poll() is None
    assert host.stop(grace_s=5.0) == -signal.SIGTERM


def _actor_pids(run_name: str, actor_id: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"actor" in cmd and b"--actor-id" in cmd and cmd[cmd.index(b"--actor-id") + 1] == str(actor_id).encode() \
                and f"run.name={run_name}".encode() in cmd:
            pids.append(int(d.name))
    return pids


def _launch_and_kill_actor_1(tmp_path: Path, name: str, overrides: list[str]) -> str:
    """`robot-rl launch --backend local --actors 2 --task reach …` as docs/scale-out.md shows it; actor 1 is
    SIGKILLed once it runs. The launcher's whole output, after checking it ended well and restarted actor 1."""
    p = subprocess.Popen([EXE, "launch", "--backend", "local", "--actors", "2", "--task", "reach", "run.progress=false",
                          f"run.name={name}", *overrides],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (pids := _actor_pids(name, 1)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert pids, "actor 1 never started"
        time.sleep(5.0)
        os.kill(pids[0], signal.SIGKILL)
        out, _ = p.communicate(timeout=900)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert "launch: actor 1 exited with code -9" in out and "launch: restarting actor 1 (1/5)" in out
    assert re.search(r"actors restarted: \{1: 1\}", out), out
    logs = tmp_path / "runs" / name / "launch"
    assert (logs / "actor-0.log").exists() and (logs / "actor-1.log").exists()
    return out


@pytest.mark.slow
def test_local_launch_runs_its_budget_through_a_killed_actor(tmp_path: Path) -> None:
    # No updates (learning_starts beyond the budget): what is the launcher's own is checked here, the restart and
    # every step of the budget arriving; learning through the same commands is the slow test below.
    name = f"launchb{os.getpid()}"
    out = _launch_and_kill_actor_1(tmp_path, name, ["loop.eval_episodes=10", "loop.eval_num_envs=10",
                                                    "loop.eval_every_env_steps=4000", "loop.total_env_steps=8000",
                                                    "loop.actor_hz=20", "algo.learning_starts=1000000"])
    assert re.search(r"stopped \(budget\) after 8,\d{3} env steps", out), out  # the whole budget arrived
    assert "eval @" in out, out


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ROBOT_RL_SLOW_TESTS"), reason="learns reach to its threshold through "
                    "`robot-rl launch` (~75 s on 2 cores; benchmarks/scale_out.py measures it): ROBOT_RL_SLOW_TESTS=1")
def test_local_launch_trains_reach_to_its_threshold_through_a_killed_actor(tmp_path: Path) -> None:
    name = f"launch{os.getpid()}"
    out = _launch_and_kill_actor_1(tmp_path, name, ["loop.eval_episodes=50", "loop.eval_num_envs=50",
                                                    "loop.eval_every_env_steps=2000", "loop.total_env_steps=200000"])
    assert "stopped (threshold)" in out, out  # the learner's own stop rule, not just a good evaluation on the way
