"""docs/practice.md's workflow, run as written: demos, two learners, the robot practising, the evaluation.

Every command resolves as typed (`robot-rl config VERB …`: options, overrides and registries, nothing connected).
Then the block runs as a user runs it (real processes, no terminal): the learners bind ports the OS picks (the
docs' 5555 and 5556 replaced by those), the actor is stopped with Ctrl-C after a few attempts, the learners
after it, and the simulated arm runs at 2x real time (the same robot time per step).
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest
from docs_workflow import hil_cli_workflow

pytest.importorskip("mujoco")  # the simulated arm
pytest.importorskip("msgpack")

from robot_rl.cli import main
from robot_rl.human_loop.practice.config import PracticeConfig
from robot_rl.transport.config import ZmqTransportConfig

# The block names the two learners' default addresses; the run below binds ports the OS picks instead.
TASK_ADDRESS, RESET_ADDRESS = ZmqTransportConfig().address, PracticeConfig().reset_address

ROOT = Path(__file__).resolve().parents[1]
SCALE = 2.0


def _commands() -> list[str]:
    text = (ROOT / "docs" / "practice.md").read_text()
    block = re.search(r"## The workflow on the simulated arm\n.*?```bash\n(.*?)```", text, re.S)
    assert block is not None, "docs/practice.md has its workflow block"
    return [c.strip() for c in block.group(1).splitlines() if c.strip().startswith("robot-rl ")]


@pytest.mark.sim
@pytest.mark.integration  # resolving five commands imports the simulators and the learner: seconds
def test_every_command_of_the_block_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    cmds = _commands()
    assert [c.split()[1] for c in cmds] == ["record", "deploy", "deploy", "deploy", "deploy"]
    for cmd in cmds:
        assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    out = capsys.readouterr().out
    assert "resets" in out and "physical" in out
    _record, task, reset, actor, evaluate = cmds
    assert f"--connect {TASK_ADDRESS}" in task and f"transport.address={TASK_ADDRESS}" in actor
    assert f"--connect {RESET_ADDRESS}" in reset and f"practice.reset_address={RESET_ADDRESS}" in actor
    assert "--run-dir runs/practice_task" in task and "--run-dir runs/practice_task" in evaluate


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_block_runs_as_written(tmp_path: Path) -> None:
    wf = hil_cli_workflow()
    record, task, reset, actor, evaluate = [wf.scaled(c, SCALE) for c in _commands()]
    done = wf.start_logged(record, tmp_path / "record.log").wait(timeout=300)
    assert done == 0, (tmp_path / "record.log").read_text()[-2000:]
    learners, addresses = [], {}
    for name, argv, docs_address in (("task", task, TASK_ADDRESS), ("reset", reset, RESET_ADDRESS)):
        argv = [a.replace(docs_address, "tcp://127.0.0.1:*") for a in argv]
        proc = wf.start_logged(argv, tmp_path / f"{name}_learner.log")
        learners.append(proc)
        addresses[docs_address] = wf.learner_address(proc, tmp_path / f"{name}_learner.log")
    try:
        pattern = "|".join(re.escape(a) for a in addresses)
        argv = [re.sub(pattern, lambda m: addresses[m.group(0)], a) for a in actor]
        proc = wf.start_logged(argv, tmp_path / "actor.log")
        attempts = tmp_path / "runs" / "practice.jsonl"
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if attempts.exists() and len(attempts.read_text().splitlines()) >= 4:
                break
            time.sleep(0.2)
        assert wf.ctrl_c(proc) == 0, (tmp_path / "actor.log").read_text()[-3000:]
    finally:
        codes = [wf.ctrl_c(p) for p in learners]
    actor_log = (tmp_path / "actor.log").read_text()
    assert codes == [0, 0] and re.search(r"practice: \d+ task attempts", actor_log), actor_log[-3000:]
    assert [line for line in attempts.read_text().splitlines() if '"policy": "reset"' in line]
    for run in ("practice_task", "practice_reset"):  # each learner checkpointed on Ctrl-C
        assert list((tmp_path / "runs" / run).glob("checkpoints/*")), run
    out = wf.start_logged(evaluate, tmp_path / "eval.log").wait(timeout=300)
    assert out == 0 and "10 episodes" in (tmp_path / "eval.log").read_text(), (tmp_path / "eval.log").read_text()


@pytest.mark.integration
def test_practice_refuses_what_it_cannot_run_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--mode", "practice", "--fleet", "2", "--teleop", "scripted", "robot.cameras={}"]) == 2
    assert "a fleet sharing one person for resets is not built yet" in capsys.readouterr().err
    # A real arm cannot say whether the scene is back at its start: the reset policy needs a classifier there.
    assert main(["deploy", "--mode", "practice", "--teleop", "scripted", "--robot", "xarm",
                 "robot.ip=192.0.2.1"]) == 2
    assert "practice.reset_reward=classifier" in capsys.readouterr().err
