"""One operator, three simulated arms that ask for help, vs one arm with an operator always watching (issue 23).

Both setups are the documented HIL-SERL workflow (docs/deploy.md) run as a user types it, from the same 10
scripted demonstrations, for the same wall-clock minutes of learning at real-time pace (10 Hz):

- ``watching``: one arm, `robot-rl deploy --mode learn --teleop pick_intervener`: HIL-SERL today, the person
  watches the whole run and takes over when the policy stalls. Attention: the whole time the arm runs.
- ``fleet``: three arms, `robot-rl deploy --fleet 3 --mode learn --teleop pick_helper help.enabled=true
  help.budget=0.1`, one learner: the person helps only the arm the operator queue sends them to. Attention: the
  time the operator spends with a robot (from the queue's grant to the robot's release, fleet_summary.json).

Both run the safety layer's watchdog at 0.5 s (the default 0.2 s trips on this 2-core machine when seven processes
share it, which ends episodes early; the same setting for both). Printed: total successes (with or without help),
the operator's attention minutes, successes per attention minute and the fleet/watching ratio; then each learner's
policy alone on 20 seeded episodes (`--mode eval --teleop scripted`), so a fleet that scores by leaning on help
would show. Both learners and actors are stopped with Ctrl-C (SIGINT to their process groups, as a terminal does).

    MUJOCO_GL=osmesa python benchmarks/ask_for_help_fleet.py                # 6 minutes each, 1 seed
    MUJOCO_GL=osmesa python benchmarks/ask_for_help_fleet.py --minutes 10 --seeds 2

Results: benchmarks/results/ask_for_help_fleet.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hil_cli_workflow import ctrl_c, start_logged

OUT = Path(__file__).parent / "results"
EXE = str(Path(sys.executable).with_name("robot-rl"))
ARM = ["robot.type=sim_arm", "robot.cameras={}", "safety.watchdog_timeout_s=0.5"]


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[1:])} exited with {done.returncode}:\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def _episodes(paths: list[Path]) -> list[dict[str, object]]:
    return [json.loads(x) for p in paths if p.exists() for x in p.read_text().splitlines()]


def run_setup(work: Path, setup: str, minutes: float, seed: int, port: int, log=print) -> dict[str, object]:
    """Learner and actor(s) of one setup for ``minutes``; its successes, attention and the policy alone after."""
    work.mkdir(parents=True)
    address = f"transport.address=tcp://127.0.0.1:{port}"
    # The learner at a lower priority, as on a shared machine: the control loops are the real-time part.
    helped = ["help.enabled=true"] if setup == "fleet" else []
    learner = start_logged(["nice", "-n", "10", EXE, "deploy", "--role", "learner", "--run-dir", "run", "--demos",
                            "../demos", "--no-status", *ARM, address, f"seed={seed}", *helped], work / "learner.log")
    time.sleep(3.0)
    actor_cmd = [EXE, "deploy", "--mode", "learn", "--episodes", "0", "--no-status", "--episode-log", "episodes.jsonl"]
    if setup == "fleet":  # the overrides last: tyro takes the positional ones as one group
        actor_cmd += ["--fleet", "3", "--teleop", "pick_helper", *ARM, address, f"seed={seed}", "help.enabled=true",
                      "help.budget=0.1"]
    else:
        actor_cmd += ["--teleop", "pick_intervener", *ARM, address, f"seed={seed}"]
    t0 = time.monotonic()
    actor = start_logged(actor_cmd, work / "actor.log")
    deadline = t0 + 60 * minutes
    while time.monotonic() < deadline and learner.poll() is None and actor.poll() is None:
        time.sleep(1.0)
    rc_actor = ctrl_c(actor, 150.0)
    wall_s = time.monotonic() - t0
    rc_learner = ctrl_c(learner, 150.0)
    actor_out = (work / "actor.log").read_text(errors="replace")
    if rc_actor or rc_learner:
        raise RuntimeError(f"{setup}: actor rc {rc_actor}, learner rc {rc_learner}\n{actor_out[-3000:]}")
    logs = [work / f"episodes-robot{i}.jsonl" for i in range(3)] if setup == "fleet" else [work / "episodes.jsonl"]
    eps = _episodes(logs)
    if setup == "fleet":
        summary = json.loads((work / "fleet_summary.json").read_text())
        attention_min = float(summary["attention_min"])
    else:  # the person watches every moment the arm runs an episode
        summary = {}
        attention_min = sum(float(e["wall_s"]) for e in eps) / 60.0  # type: ignore[arg-type]
    out = _run([EXE, "deploy", "--mode", "eval", "--run-dir", "run", "--teleop", "scripted", "--episodes", "20",
                "--no-status", *ARM, f"seed={1000 + seed}"], work)
    line = next(x for x in out.splitlines() if " episodes" in x and "success" in x)
    alone_ok, alone_n = (int(v) for v in re.search(r"alone (\d+)/(\d+)", line).groups())  # type: ignore[union-attr]
    successes = sum(bool(e["success"]) for e in eps)
    result = {"setup": setup, "robots": len(logs), "wall_s": wall_s, "episodes": len(eps), "successes": successes,
              "steps": sum(int(e["steps"]) for e in eps), "acted_steps": sum(int(e["intervened_steps"]) for e in eps),
              "requests": sum(int(e.get("help_requests", 0)) for e in eps),
              "timeouts": sum(int(e.get("help_timeouts", 0)) for e in eps),
              "attention_min": attention_min,
              "successes_per_attention_min": successes / attention_min if attention_min > 0 else None,
              "policy_alone": alone_ok / alone_n, "fleet_summary": summary,
              "actor_summary": [x for x in actor_out.splitlines() if " episodes" in x and "success" in x]}
    log(f"  [{setup}] {result['episodes']} episodes, {successes} successes, attention {attention_min:.2f} min "
        f"-> {result['successes_per_attention_min'] or 0:.1f} successes per attention minute; policy alone "
        f"{alone_ok}/{alone_n}")
    return result


def run_seed(seed: int, minutes: float, log=print) -> dict[str, object]:
    """The demos, then watching and fleet from them."""
    with tempfile.TemporaryDirectory(prefix=f"fleet_bench_{seed}_") as tmp:
        work = Path(tmp)
        _run([EXE, "record", "--robot", "sim_arm", "--teleop", "pick_demonstrator", "--out", "demos", "--format",
              "episodes", "--episodes", "10", "--hz", "10", "--no-status", "robot.cameras={}", f"robot.seed={seed}"],
             work)
        runs = {setup: run_setup(work / setup, setup, minutes, seed, 5700 + 2 * seed + i, log)
                for i, setup in enumerate(("watching", "fleet"))}
    w, f = runs["watching"]["successes_per_attention_min"], runs["fleet"]["successes_per_attention_min"]
    ratio = (f / w) if (w and f) else None  # type: ignore[operator]
    shown = f"{ratio:.1f}x" if ratio is not None else "n/a"
    log(f"seed {seed}: successes per attention minute, fleet / watching = {shown}")
    return {"seed": seed, "minutes": minutes, "runs": runs, "ratio": ratio}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=21)
    p.add_argument("--minutes", type=float, default=6.0, help="wall-clock minutes of learning per setup")
    p.add_argument("--out", type=Path, default=OUT / "ask_for_help_fleet.json")
    a = p.parse_args()
    results = [run_seed(a.first_seed + i, a.minutes) for i in range(a.seeds)]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine":
                                 f"{os.cpu_count()} CPUs", "results": results}, indent=1))
    print(f"results: {a.out}")



def fleet_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_ask_for_help.md's fleet table: per setup, what the learning run produced and what it cost the
    operator, and the policy alone after it."""
    lines = ["| setup | arms | episodes | successes (any) | operator attention | successes per attention minute | "
             "steps the person acted | requests (timed out) | policy alone after, 20 episodes |", "|" + "---|" * 9]
    for result in records[0]["results"]["results"]:
        for name, r in result["runs"].items():
            label = name if name == "watching" else f"{name}, budget {result.get('budget', 0.1):g}"
            requests = "–" if name == "watching" else f"{r['requests']} ({r['timeouts']})"
            lines.append(f"| {label} | {r['robots']} | {r['episodes']} | {r['successes']} | "
                         f"{r['attention_min']:.2f} min | {r['successes_per_attention_min']:.1f} | "
                         f"{r['acted_steps']} | {requests} | {round(20 * r['policy_alone'])}/20 |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
