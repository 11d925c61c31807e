"""docs/deploy.md's HIL-SERL workflow, run as written: the docs and the behaviour cannot drift apart.

The four commands are read from the docs' shell block and run as a user runs them (real processes, no
terminal, Ctrl-C to stop the learner), with the simulated arm at 4x real time and a fixed seed. The actor runs a
budget of episodes instead of the docs' 10 minutes, and learner and actor get ``max_unlearned_chunks`` (the docs'
key for a busy machine), so every robot step gets the recipe's 4 updates: neither the robot data nor the learning
shrinks on a busy machine, only the wall-clock time grows. The policy alone must then reach the docs' bar.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from docs_workflow import hil_cli_workflow

from robot_rl.transport.config import ZmqTransportConfig

pytest.importorskip("mujoco")  # the simulated arm
pytest.importorskip("msgpack")

pytestmark = [pytest.mark.sim, pytest.mark.slow]

EPISODES = 60
"""The actor's budget (the docs' actor runs until Ctrl-C)."""
MORE_EPISODES = 30
"""The resumed actor's budget, when the policy after EPISODES is short of the bar."""
SEED = 1
"""Appended to every step but the evaluation (the docs' evaluation scenes are fixed)."""
UPDATE_RATIO = ("max_unlearned_chunks=8",)
"""Given to the learner and the actor: the robot waits between episodes for the learner's updates, so that a busy
machine runs the recipe's 4 updates per robot step too instead of fewer (docs/deploy.md)."""

def _workflow():
    return hil_cli_workflow()


def test_the_docs_block_is_what_runs():
    cmds = _workflow().workflow_commands()
    assert [c.split()[1] for c in cmds] == ["record", "deploy", "deploy", "deploy"]
    assert "--teleop pick_demonstrator" in cmds[0] and "--role learner" in cmds[1] and "--mode learn" in cmds[2]
    assert "--mode eval" in cmds[3] and "--teleop scripted" in cmds[3]


def test_the_actor_connects_where_the_learner_bound_and_runs_its_budget():
    wf = _workflow()
    actor = wf.scaled(wf.workflow_commands()[2], 4.0)
    argv = wf.with_episodes(wf.at_address([*actor, "transport.address=tcp://h:1"], "tcp://10.0.0.2:4321"), 7)
    assert [a for a in argv if a.startswith("transport.address=")] == ["transport.address=tcp://10.0.0.2:4321"]
    assert argv[argv.index("--episodes") + 1] == "7" and argv.count("--episodes") == 1
    assert wf.at_address(["deploy", "--connect", "tcp://h:1"], "tcp://127.0.0.1:*") == [
        "deploy", "--connect", "tcp://127.0.0.1:*"]


def test_a_seed_reaches_every_step_but_the_evaluation_and_the_table_reads_the_results():
    wf = _workflow()
    steps = [wf.with_seed(wf.scaled(c, 1.0), 3) for c in wf.workflow_commands("so101")]
    record, fumble, wander, classifier, learner, actor, evaluate = steps
    assert all(argv[-1] == "record.seed=3" for argv in (record, fumble, wander))
    assert classifier[-2:] == ["--seed", "3"] and learner[-1] == actor[-1] == "seed=3"
    assert not any("seed" in a for a in evaluate), "the evaluation's scenes are the documented ones for every seed"
    run = {"seed": 3, "preparation": {"reward train-classifier demos/so101": "calibrated: threshold 0.5368, "
                                      "precision 0.995, recall 0.991; target precision 0.95 reached"},
           "eval": "20 episodes: success 95% (alone 19/20 (95%), with help 0/0), mean intervention rate 0%",
           "actor": "504 episodes: success 95% (alone 310/310 (100%), with help 164/194), mean intervention rate "
                    "16%, policy v466; 10 Hz: period p50 100.0 ms, p99 100.9 ms, max 130.0 ms, 3 overruns in 11906 "
                    "ticks; safety events change_limit 3884, watchdog 1",
           "learner": "stopped after 11402 transitions (3096 intervened), 45608 updates, weights v466",
           "load_average": {"mean": 4.1, "max": 5.2}}
    row = wf.markdown_table({"runs": [run]}).splitlines()[-1]
    assert row == ("| 3 | 0.5368 (0.995, 0.991) | 310/310 / 164/194 | 16% | 45608 | 100.9 ms, 3 of 11906, 1 | 4.1, "
                   "5.2 | **19/20** |"), row


def test_runs_are_read_back_from_the_printout_of_a_crashed_invocation():
    wf = _workflow()
    printout = (Path(wf.__file__).parent / "results" / "so101_workflow" / "seed1_load2_printout.log").read_text()
    [run] = wf.runs_from_printout(printout)  # seed 2's run in that log crashed before its evaluation
    assert run["seed"] == 1 and run["alone_success"] == 0.6 and run["from_printout"]
    assert "threshold 0.8504" in run["preparation"]["reward (step 4)"] and run["load_average"]["mean"] == 7.64
    assert "| 1 | 0.8504 (0.951, 0.995) |" in wf.markdown_table({"runs": [run]})


def _transitions(result: dict) -> int:
    """The learner's transitions at its end (a resumed learner counts its earlier run's too)."""
    found = re.search(r"stopped after (\d+) transitions", str(result["learner"]))
    assert found, result
    return int(found.group(1))


@contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """Something else listens on ``port`` for the block (unless something already does)."""
    with socket.socket() as squatter:
        try:
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        except OSError:  # taken already: the case this stands for
            pass
        yield


@pytest.mark.timeout(600)  # the hang limits are run_once's: 4 minutes of learning, 3 more when it resumes
def test_the_documented_commands_learn_the_pick(tmp_path: Path):
    wf = _workflow()
    docs_port = int(ZmqTransportConfig().address.rsplit(":", 1)[1])  # the block names no address: the default
    with _port_taken(docs_port):  # the learner must not need it (the test failed beside a service on it)
        # A budget of robot steps, each with the recipe's 4 updates whatever the load: what is learned does not
        # depend on the machine's speed, only how long it takes (about 100 s of CPU in all its processes); 4
        # minutes is only the limit past which the run has hung.
        result = wf.run_once(tmp_path, minutes=4.0, scale=4.0, log=print, episodes=EPISODES, seed=SEED,
                             overrides=UPDATE_RATIO)
        print(result)
        assert result["episodes"] == 20 and result["actor"].startswith(f"{EPISODES} episodes:"), result
        assert result["updates_per_step"] is not None and result["updates_per_step"] >= 3.5, result
        if result["alone_success"] < wf.TARGET:
            learned = _transitions(result)
            # The simulated arm runs against the clock, so one seed's runs differ; after EPISODES, policies
            # alone scored 65-100 % (one in about ten below the bar). The docs' learner would go on learning:
            # so does this one, from its checkpoint and replay (the documented --resume), for MORE_EPISODES.
            result = wf.run_once(tmp_path, minutes=3.0, scale=4.0, log=print, prepared=True, episodes=MORE_EPISODES,
                                 seed=SEED, overrides=UPDATE_RATIO, learner_flags=("--resume",))
            print("went on learning:", result)
            assert _transitions(result) > learned, result  # it went on from the first run's replay
    # The docs' bar: 80 % alone after 10 minutes of robot time at real-time pace (6,000 steps); here a budget
    # of at most EPISODES + MORE_EPISODES (about 1,700 steps) at the same 4 updates per step.
    assert result["alone_success"] >= wf.TARGET, result
