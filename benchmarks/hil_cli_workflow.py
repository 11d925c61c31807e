"""Run a documented HIL-SERL workflow exactly as written and measure the policy alone at the end.

The shell block is read from the docs (so the docs cannot drift from what is measured): docs/deploy.md's
"The HIL-SERL workflow" (``--workflow task``: the task's own success) or docs/rewards.md's "HIL-SERL with a
success classifier" (``--workflow classifier``: demos with cameras, a classifier trained on them, the policy on
the state). The preparation steps run in order (record demos, train the classifier), then the learner and the
actor run side by side for ``--minutes`` of learning (or until the actor has run ``--episodes``), both are
stopped with Ctrl-C (SIGINT to their process groups, as a terminal sends it), and the last step scores the
policy alone. The learner binds a port the OS picks (the docs' default may be taken) and the actor connects to
the address it prints. ``--time-scale S`` runs the simulated arm S times faster than real time (the control
rate and wall-clock speed limits scaled with it, the robot time the same): what the tests in CI use. Compares
the success against the docs' target and prints the ratio; results go to
benchmarks/results/hil_cli_workflow[_classifier].json.

    python benchmarks/hil_cli_workflow.py                  # 10 minutes of learning at real-time pace
    python benchmarks/hil_cli_workflow.py --runs 3         # the measurement of benchmarks/RESULTS_hil.md
    python benchmarks/hil_cli_workflow.py --minutes 2.5 --time-scale 4   # 10 minutes of robot time, faster
    python benchmarks/hil_cli_workflow.py --workflow classifier --runs 3  # docs/rewards.md's block
    MUJOCO_GL=osmesa python benchmarks/hil_cli_workflow.py --workflow so101 --minutes 20 --seeds 1 2 3 --load 2
                                                           # docs/so101.md's block, 3 seeds, 2 busy CPU loops beside

``--seeds`` runs the block once per seed, the seed appended to every step that draws at random (the recordings'
scenes, the classifier's split and initialisation, the learner and the actor); the evaluation's 20 scenes stay
the documented ones, the same for every seed. ``--load N`` keeps N pure-Python busy loops running beside the
whole block (a machine doing other work), and the load average is sampled throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deploy.md"
TARGET = 0.8  # the issue's bar and the docs' promise: ≥ 80 % alone after 10 minutes of learning


WORKFLOWS = {
    # name: (doc, heading of the section whose first bash block is the workflow)
    "task": (DOC, "## The HIL-SERL workflow"),
    "classifier": (ROOT / "docs" / "rewards.md", "## HIL-SERL with a success classifier"),
    "so101": (ROOT / "docs" / "so101.md", "## 8. The same commands on the simulated SO-101"),
    "help": (ROOT / "docs" / "ask-for-help.md", "## The workflow on the simulated arm"),
}


def workflow_commands(workflow: str = "task") -> list[str]:
    """The `robot-rl` lines of a documented HIL-SERL workflow block, in order.

    The block's shape is checked: preparation steps, then ``deploy --role learner``, ``deploy --mode learn``
    and ``deploy --mode eval``, in that order.
    """
    doc, heading = WORKFLOWS[workflow]
    text = doc.read_text()
    if heading not in text:
        raise ValueError(f"{doc}: no section {heading!r}")
    block = text.split(heading, 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    cmds = [line.strip() for line in block.splitlines() if line.strip().startswith("robot-rl ")]
    roles = ["--role learner", "--mode learn", "--mode eval"]
    if len(cmds) < 4 or any(role not in cmd for role, cmd in zip(roles, cmds[-3:], strict=True)):
        raise ValueError(f"{doc} ({heading}): expected preparation steps, then deploy {', '.join(roles)}; "
                         f"found {cmds}")
    return cmds


def scaled(cmd: str, scale: float) -> list[str]:
    """``cmd`` as argv, run ``scale`` times faster than real time (same robot time per step)."""
    argv = shlex.split(cmd)
    argv[0] = str(Path(sys.executable).with_name("robot-rl"))
    if scale == 1.0 or argv[1] not in ("record", "deploy"):  # only the verbs that drive the robot run faster
        return argv
    if "--hz" in argv:
        i = argv.index("--hz") + 1
        argv[i] = f"{float(argv[i]) * scale:g}"
    else:
        argv.append(f"safety.control_hz={10.0 * scale:g}")
    return [*argv, f"robot.time_scale={scale:g}", f"safety.max_linear_speed={0.25 * scale:g}",
            f"safety.max_angular_speed={1.0 * scale:g}"]


def with_seed(argv: list[str], seed: int | None) -> list[str]:
    """``argv`` with ``seed`` appended where the step draws at random (the evaluation keeps its documented seed)."""
    if seed is None or ("--mode" in argv and argv[argv.index("--mode") + 1] == "eval"):
        return argv
    if argv[1] == "record":
        return [*argv, f"record.seed={seed}"]
    if argv[1:3] == ["reward", "train-classifier"]:
        return [*argv, "--seed", str(seed)]
    if argv[1] == "deploy":
        return [*argv, f"seed={seed}"]
    return argv


class LoadSampler:
    """``n`` busy CPU loops (pure-Python spins) while it is open, and the 1-minute load average every 5 s."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._spinners: list[subprocess.Popen[bytes]] = []
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(5.0):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for proc in self._spinners:
            proc.kill()
            proc.wait()

    def summary(self) -> dict[str, float]:
        xs = self.samples or [os.getloadavg()[0]]
        return {"mean": round(sum(xs) / len(xs), 2), "max": round(max(xs), 2)}


def machine() -> dict[str, object]:
    """What ran it: CPU, cores, the commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "host": platform.node(),
            "python": platform.python_version(), "commit": commit.stdout.strip()}


def at_address(argv: list[str], address: str) -> list[str]:
    """``argv`` with the learner's address ``address`` (a ``--connect`` or ``transport.address=`` in it replaced)."""
    argv = [a for a in argv if not a.startswith("transport.address=")]
    if "--connect" in argv:
        argv[argv.index("--connect") + 1] = address
        return argv
    return [*argv, f"transport.address={address}"]


def with_episodes(argv: list[str], episodes: int) -> list[str]:
    """``argv`` with ``--episodes episodes`` (the docs' actor runs until Ctrl-C: ``--episodes 0``)."""
    if "--episodes" in argv:
        argv = list(argv)
        argv[argv.index("--episodes") + 1] = str(episodes)
        return argv
    return [*argv, "--episodes", str(episodes)]


def learner_address(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> str:
    """The address the learner bound, from its first line (``HIL learner listening on ADDRESS …``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"listening on (tcp://\S+)", log.read_text(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.1)
    raise RuntimeError(f"the learner printed no address in {timeout_s:.0f}s (exit code {proc.poll()}):\n"
                       f"{log.read_text(errors='replace')[-2000:]}")


def start_logged(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group, output to ``log``, with Ctrl-C as in a terminal."""
    # SIGINT at its default, as in a terminal, even when this script runs as a background job (whose shell
    # starts children with SIGINT ignored): Ctrl-C is how the docs stop steps 1 and 2.
    return subprocess.Popen(argv, cwd=log.parent, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def ctrl_c(proc: subprocess.Popen[bytes], timeout: float = 120.0) -> int:
    """Ctrl-C ``proc``'s process group (as a terminal does) and wait for its exit code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=timeout)


def run_once(workdir: Path, minutes: float, scale: float, log=print, workflow: str = "task",
             prepared: bool = False, overrides: tuple[str, ...] = (), episodes: int | None = None,
             seed: int | None = None, learner_flags: tuple[str, ...] = ()) -> dict[str, object]:
    """The documented commands in ``workdir``; the eval's policy-alone success and what each step printed.

    ``prepared``: the preparation steps (demos, classifier) already ran in ``workdir``: only learn and score.
    ``overrides``: ``key=value`` appended to the learner's and the actor's commands (an ablation of the block).
    ``episodes``: the actor stops itself after this many episodes (a budget of robot steps, the same on a busy
    machine: what the tests use) instead of being stopped after ``minutes`` of wall clock (the docs' "after 10
    minutes"); ``minutes`` is then how long it may take.
    ``seed``: appended to every step but the evaluation (:func:`with_seed`).
    ``learner_flags``: given to the learner only (``--resume``: go on learning in ``workdir``'s run).
    The learner binds a port the OS picks and the actor connects to the address it prints: the docs' default
    port (transport.address) may be taken on this machine.
    """
    *prepare, learner_cmd, actor_cmd, evaluate = (with_seed(scaled(c, scale), seed)
                                                  for c in workflow_commands(workflow))
    steps: dict[str, str] = {}
    learner_cmd = at_address([*learner_cmd[:2], *learner_flags, *learner_cmd[2:], *overrides], "tcp://127.0.0.1:*")
    actor_cmd = [*actor_cmd, *overrides] if episodes is None else with_episodes([*actor_cmd, *overrides], episodes)
    for argv in [] if prepared else prepare:
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{shlex.join(argv[1:])} exited with {done.returncode}:\n{done.stdout[-3000:]}")
        last = done.stdout.strip().splitlines()[:1]
        log(f"  robot-rl {argv[1]} done in {time.monotonic() - t0:.0f}s: {last[0] if last else ''}")
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        key = shlex.join(argv[1:4])  # two steps of one verb (demos, then failed grasps) keep both their lines
        steps[key if key not in steps else f"{key} (step {len(steps) + 1})"] = f"{time.monotonic() - t0:.0f}s: {tail}"
    learner = start_logged(learner_cmd, workdir / "learner.log")
    actor: subprocess.Popen[bytes] | None = None
    try:  # whatever stops this (an error, a test's timeout), no learner, actor or simulator is left running
        try:
            address = learner_address(learner, workdir / "learner.log")
        except RuntimeError:
            ctrl_c(learner)
            raise
        actor = start_logged(at_address(actor_cmd, address), workdir / "actor.log")
        started = time.monotonic()
        deadline = started + 60 * minutes
        while time.monotonic() < deadline and learner.poll() is None and actor.poll() is None:
            time.sleep(1.0)
        learn_min = (time.monotonic() - started) / 60
        if episodes is not None and actor.poll() is None:
            rc_actor, rc_learner = ctrl_c(actor), ctrl_c(learner)
            raise RuntimeError(f"the actor had not run its {episodes} episodes after {minutes:g} min (actor rc "
                               f"{rc_actor}, learner rc {rc_learner}):\n"
                               f"{(workdir / 'actor.log').read_text(errors='replace')[-2000:]}")
        rc_actor, rc_learner = ctrl_c(actor), ctrl_c(learner)
    finally:
        for proc in (actor, learner):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    actor_out = (workdir / "actor.log").read_text(errors="replace")
    learner_out = (workdir / "learner.log").read_text(errors="replace")
    if rc_actor or rc_learner:
        raise RuntimeError(f"actor rc {rc_actor}, learner rc {rc_learner}\n{actor_out[-2000:]}\n{learner_out[-2000:]}")
    done = subprocess.run(evaluate, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    (workdir / "eval.log").write_text(done.stdout + done.stderr)  # kept with the learner's and the actor's logs
    if done.returncode:  # say why: the output is all there is of a failed evaluation
        raise RuntimeError(f"{shlex.join(evaluate[1:])} exited with {done.returncode}:\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if " episodes" in x and "success" in x)
    alone_ok, alone_n = (int(v) for v in re.search(r"alone (\d+)/(\d+)", line).groups())  # type: ignore[union-attr]
    learned = re.search(r"stopped after (\d+) transitions .*?, (\d+) updates", learner_out)
    return {"alone_success": alone_ok / alone_n, "episodes": alone_n, "eval": line,
            "actor": next((x for x in actor_out.splitlines() if " episodes" in x and "success" in x), ""),
            "learner": next((x for x in learner_out.splitlines() if x.startswith("stopped after")), ""),
            "updates_per_step": int(learned[2]) / max(int(learned[1]), 1) if learned else None,
            "learn_minutes_wall": learn_min, "robot_minutes": learn_min * scale, "seed": seed, "preparation": steps,
            "watchdog_trips": sum(len(re.findall(r"watchdog: no command", out)) for out in (actor_out, learner_out))}


def markdown_table(results: dict[str, Any]) -> str:
    """The per-run table of a results file (RESULTS_so101.md and docs/so101.md take it from here)."""

    def grab(pattern: str, text: str) -> str:
        found = re.search(pattern, text)
        return found.group(1) if found else "?"

    rows = ["| seed | classifier threshold (held-out precision, recall) | training episodes: alone (the classifier's "
            "success) / with help | intervention rate | learner updates | 10 Hz loop while learning: p99, late "
            "ticks, watchdog trips | load average (mean, max) | **policy alone (the task's success)** |",
            "|---|---|---|---|---|---|---|---|"]
    num, frac, count = r"([0-9.]+)", r"(\d+/\d+)", r"(\d+)"
    for r in results["runs"]:
        prep = " ".join(str(v) for k, v in r.get("preparation", {}).items() if k.startswith("reward"))
        actor, learner, ev = str(r["actor"]), str(r["learner"]), str(r["eval"])
        load = r.get("load_average", {})
        classifier = (f"{grab('threshold ' + num, prep)} ({grab('precision ' + num, prep)}, "
                      f"{grab('recall ' + num, prep)})" if r.get("preparation") else "reused (`--prepared`)")
        episodes = f"{grab('alone ' + frac, actor)} / {grab('with help ' + frac, actor)}"
        late, ticks = grab(count + " overruns", actor), grab("overruns in " + count + " ticks", actor)
        trips = grab(r"watchdog'?:? (\d+)", actor) if "watchdog" in actor else "0"  # the safety events by kind
        loop = f"{grab('p99 ' + num, actor)} ms, {late} of {ticks}, {trips}"
        rate, updates = grab("intervention rate " + r"(\d+ ?%)", actor), grab(count + " updates", learner)
        rows.append(f"| {'-' if r.get('seed') is None else r['seed']} | {classifier} | {episodes} | "
                    f"{rate} | {updates} | {loop} | "
                    f"{load.get('mean', '?')}, {load.get('max', '?')} | **{grab('alone ' + frac, ev)}** |")
    return "\n".join(rows)


def runs_table(records: list[dict[str, Any]]) -> str:
    """:func:`markdown_table` of every run in the result files, in order (``benchmarks/report.py``'s tables)."""
    return markdown_table({"runs": [r for rec in records for r in rec["results"]["runs"]]})


def _audit_answers(record: dict[str, Any], seed: Any) -> list[dict[str, Any]]:
    """The questions of one audited run: ``<prefix>_seed<N>_reward_audit.jsonl`` beside its result file, the prefix
    being the file's name before ``_seeds`` (``audit_seeds312_load2.json`` -> ``audit_seed3_reward_audit.jsonl``)."""
    prefix = str(record["benchmark"]).split("_seeds")[0]
    path = ROOT / "benchmarks" / "results" / "so101_workflow" / f"{prefix}_seed{seed}_reward_audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def audit_rounds(records: list[dict[str, Any]]) -> str:
    """Per seed, the policy alone without the audit (the files whose name does not start with ``audit``) and in
    each audited round (the others, in order), with the questions asked and answered "no" in each round."""
    base = [rec for rec in records if not str(rec["benchmark"]).startswith("audit")]
    rounds = [rec for rec in records if str(rec["benchmark"]).startswith("audit")]
    without = {r.get("seed"): r for rec in base for r in rec["results"]["runs"]}
    seeds = [r.get("seed") for r in rounds[0]["results"]["runs"]]
    head = ["seed", "without the audit"] + [f"audit, {rec['benchmark']}" for rec in rounds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def alone(run: dict[str, Any] | None) -> str:
        found = re.search(r"alone (\d+/\d+)", str((run or {}).get("eval", "")))
        return found.group(1) if found else "?"

    for seed in seeds:
        cells = [str(seed), alone(without.get(seed))]
        for rec in rounds:
            run = next((r for r in rec["results"]["runs"] if r.get("seed") == seed), None)
            answers = _audit_answers(rec, seed) if run is not None else []
            cells.append(f"**{alone(run)}** ({len(answers)} questions, "
                         f"{sum(a['answer'] is False for a in answers)} \"no\")")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def learned_vs_task(records: list[dict[str, Any]]) -> str:
    """Per run, the classifier's successes during learning checked against the task's own verdict (the actor's
    ``learned reward vs the task`` line), the episodes a person helped with, and the policy alone at the end."""
    lines = ["| seed | episodes (with help) | the classifier's successes: the task agreed (alone: agreed of "
             "successes) | random questions: \"no\" of asked | **policy alone at the end** |", "|---|---|---|---|---|"]
    for rec in records:
        for r in rec["results"]["runs"]:
            actor = str(r.get("actor", ""))
            check = re.search(r"(\d+) successes, the task agreed on (\d+) \(alone (\d+) of (\d+)\)", actor)
            helped = re.search(r"^(\d+) episodes.*with help \d+/(\d+)", actor)
            answers = [a for a in _audit_answers(rec, r.get("seed")) if a.get("kind") == "random"]
            if check is None or helped is None:
                raise ValueError(f"seed {r.get('seed')}: the actor's line has no 'learned reward vs the task'")
            said, agreed, alone_ok, alone_n = (int(g) for g in check.groups())
            ev = re.search(r"alone (\d+/\d+)", str(r.get("eval", "")))
            lines.append(f"| {r.get('seed')} | {helped[1]} ({helped[2]}) | {agreed} of {said} ({agreed / said:.0%}; "
                         f"alone {alone_ok} of {alone_n}) | {sum(a['answer'] is False for a in answers)} of "
                         f"{len(answers)} | **{ev.group(1) if ev else '?'}** |")
    return "\n".join(lines)


def task_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_hil.md's table of docs/deploy.md's workflow (``--workflow task``): per run the learner and the actor
    at the end of learning and the policy alone."""
    lines = ["| run | learner at the end | actor during learning (alone / with help) | "
             "**policy alone, 20 eval episodes** |", "|---|---|---|---|"]
    for i, r in enumerate((r for rec in records for r in rec["results"]["runs"]), 1):
        learned = re.search(r"(\d+) transitions \((\d+) intervened\), (\d+) updates, weights (v\d+)",
                            str(r["learner"]))
        acted = re.search(r"(\d+) episodes.*alone (\d+/\d+).*with help (\d+/\d+)", str(r["actor"]))
        alone = re.search(r"alone (\d+)/(\d+)", str(r["eval"]))
        if not (learned and acted and alone):
            raise ValueError(f"run {i}: the learner's, actor's or evaluation's line is not the workflow's")
        ok, n = int(alone[1]), int(alone[2])
        lines.append(f"| {i} | {int(learned[1]):,} transitions ({int(learned[2]):,} intervened), {int(learned[3]):,} "
                     f"updates, {learned[4]} | {acted[2]} alone, {acted[3]} with help; {acted[1]} episodes | "
                     f"**{ok}/{n} ({100 * ok / n:.0f} %)** |")
    return "\n".join(lines)


_RUN_LABELS = {"run4_change_limit_20min": "run B (2026-12-04, 07:50–08:12 UTC)",
               "hil_cli_workflow_so101": "the first run (2026-12-01, 23:33–23:54 UTC)"}


def _events(text: str) -> str:
    """A line's safety events (``{'change_limit': 42}`` or ``change_limit 42, workspace 3``) as ``change_limit 42``."""
    found = re.search(r"safety events \{?([^}]*)\}?$", text)
    if not found or not found.group(1).strip():
        return "none"
    return ", ".join(f"{k} {v}" for k, v in re.findall(r"'?(\w+)'?:? (\d+)", found.group(1)))


def block_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_so101.md's single runs of docs/so101.md's block, one column per run: the actor and the learner while
    learning, the policy alone and its safety events (what the result file's lines say)."""
    head, cols = [""], []
    for rec in records:
        label = _RUN_LABELS.get(Path(str(rec["benchmark"])).stem, str(rec["results"].get("date", "?")))
        for r in rec["results"]["runs"]:
            head.append(label)
            actor, learner, ev = str(r["actor"]), str(r["learner"]), str(r["eval"])
            acted = re.search(r"^(\d+) episodes.*alone (\d+)/(\d+).*with help (\d+)/(\d+)\), mean intervention rate "
                              r"(\d+)%", actor)
            loop = re.search(r"p99 ([0-9.]+) ms, max [0-9.]+ ms, (\d+) overruns in (\d+) ticks", actor)
            learned = re.search(r"(\d+) transitions \((\d+) intervened\), (\d+) updates", learner)
            alone = re.search(r"alone (\d+)/(\d+)", ev)
            if not (acted and loop and learned and alone):
                raise ValueError(f"{label}: the actor's, learner's or evaluation's line is not the workflow's")
            trips = re.search(r"'?watchdog'?:? (\d+)", actor)
            ok, n = int(alone[1]), int(alone[2])
            cols.append([f"{int(acted[1]):,} ({acted[2]} of {acted[3]} / {acted[4]} of {acted[5]})", f"{acted[6]} %",
                         f"p99 {loop[1]} ms, {int(loop[2]):,} overruns in {int(loop[3]):,} ticks"
                         + (f", {int(trips[1]):,} watchdog trips" if trips else ""),
                         f"{int(learned[1]):,} transitions ({int(learned[2]):,} intervened), "
                         f"{int(learned[3]):,} updates",
                         f"{ok} / {n} ({100 * ok / n:.0f} %)", _events(ev)])
    names = ["training episodes (alone / with help)", "intervention rate", "10 Hz loop while learning", "learner",
             "policy alone, 20 episodes (the task's success)", "safety events in the evaluation"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [f"| {name} | " + " | ".join(c[i] for c in cols) + " |" for i, name in enumerate(names)]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="wall-clock minutes of learning (steps 1+2)")
    p.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall-clock second")
    p.add_argument("--runs", type=int, default=1, help="independent repetitions")
    p.add_argument("--episodes", type=int, default=None,
                   help="the actor stops itself after this many episodes (a budget of robot steps); --minutes "
                        "is then the most it may take")
    p.add_argument("--workflow", choices=sorted(WORKFLOWS), default="task",
                   help="task: docs/deploy.md (the task's own success); classifier: docs/rewards.md (cameras, a "
                        "success classifier as the reward, the policy on the state)")
    p.add_argument("--keep", type=Path, default=None,
                   help="run in KEEP/run<i> and keep the demos, models, checkpoints and logs (default: a temp dir)")
    p.add_argument("--prepared", action="store_true",
                   help="with --keep: the demos and classifier of an earlier run are there; learn and score only "
                        "(the learner's run directory is moved aside first)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides appended to the learner's and the actor's commands, e.g. "
                        "safety.max_action_change=0.5 (the evaluation runs as documented)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="one run per seed, appended to every step but the evaluation (replaces --runs)")
    p.add_argument("--load", type=int, default=0,
                   help="busy CPU loops (a pure-Python spin each) beside the whole run: a machine doing other work")
    p.add_argument("--out", type=Path, default=None,
                   help="results JSON (default benchmarks/results/hil_cli_workflow[_classifier].json)")
    p.add_argument("--table", type=Path, nargs="+", default=None, metavar="JSON",
                   help="print the markdown table of earlier results files (their runs in order) and exit")
    p.add_argument("--from-printout", type=Path, default=None, metavar="LOG",
                   help="write the results file (--out) from this script's printed log, for runs whose file was lost "
                        "(each record says so: from_printout)")
    a = p.parse_args()
    if a.from_printout is not None:
        runs = runs_from_printout(a.from_printout.read_text())
        write_results(a, runs)
        print(f"{len(runs)} finished runs from {a.from_printout}")
        return
    if a.table is not None:
        print(markdown_table({"runs": [r for f in a.table for r in json.loads(f.read_text())["runs"]]}))
        return
    results = []
    seeds: list[int | None] = list(a.seeds) if a.seeds else [None] * a.runs
    for i, seed in enumerate(seeds):
        with tempfile.TemporaryDirectory() as tmp, LoadSampler(a.load) as load:
            work = Path(tmp) if a.keep is None else a.keep / (f"seed{seed}" if seed is not None else f"run{i + 1}")
            work.mkdir(parents=True, exist_ok=True)
            print(f"run {i + 1}/{len(seeds)}{'' if seed is None else f' (seed {seed})'}: {a.minutes:g} min of "
                  f"learning at {a.time_scale:g}x real time, {a.load} busy loops beside, in {work}", flush=True)
            if a.prepared:
                for run_dir in (work / "runs").glob("*"):
                    if (run_dir / "checkpoints").exists() or (run_dir / "replay").exists():
                        run_dir.rename(run_dir.with_name(f"{run_dir.name}.{time.strftime('%H%M%S')}"))
            t0 = time.strftime("%Y-%m-%dT%H:%M:%S")
            r = run_once(work, a.minutes, a.time_scale, workflow=a.workflow, prepared=a.prepared,
                         overrides=tuple(a.set), episodes=a.episodes, seed=seed)
            r.update(started=t0, busy_loops=a.load, load_average=load.summary())
            print(f"  {r['eval']}\n  actor: {r['actor']}\n  learner: {r['learner']}\n  load average "
                  f"{r['load_average']}", flush=True)
            results.append(r)
            write_results(a, results)  # after every run: a later run that fails keeps the finished ones
    rates = [float(r["alone_success"]) for r in results]  # type: ignore[arg-type]
    print(f"policy alone: {', '.join(f'{x:.0%}' for x in rates)}; target {TARGET:.0%}; "
          f"ratio to target {min(rates) / TARGET:.2f} (worst run), {sum(rates) / len(rates) / TARGET:.2f} (mean)")


def runs_from_printout(text: str) -> list[dict[str, Any]]:
    """Each run's record from what this script printed (its log), for a results file lost with its process.

    The record holds what the printout has: the steps' summaries, the evaluation, the actor's and the learner's
    closing lines, the load average; ``"from_printout": true`` says where it came from.
    """
    runs = []
    for block in re.split(r"^run \d+/\d+", text, flags=re.M)[1:]:
        lines = [x.strip() for x in block.splitlines()]
        seed = re.match(r" \(seed (\d+)\)", block)
        ev = next((x for x in lines if x.startswith("20 episodes") or re.match(r"\d+ episodes:", x)), None)
        actor = next((x[len("actor: "):] for x in lines if x.startswith("actor: ")), None)
        learner = next((x[len("learner: "):] for x in lines if x.startswith("learner: ")), None)
        if ev is None or actor is None or learner is None:
            continue  # a run that did not finish
        alone = re.search(r"alone (\d+)/(\d+)", ev)
        load = re.search(r"load average \{'mean': ([0-9.]+), 'max': ([0-9.]+)\}", block)
        done = re.finditer(r"robot-rl (\S+) done in (\d+)s: (.*)", block)
        prep = {f"{m.group(1)} (step {i + 1})": f"{m.group(2)}s: {m.group(3)}" for i, m in enumerate(done)}
        runs.append({"seed": int(seed.group(1)) if seed else None, "eval": ev, "actor": actor, "learner": learner,
                     "alone_success": int(alone.group(1)) / int(alone.group(2)) if alone else None,
                     "preparation": prep, "from_printout": True,
                     "load_average": {"mean": float(load.group(1)), "max": float(load.group(2))} if load else {}})
    return runs


def write_results(a: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    """The results file of this invocation (``--out``, or benchmarks/results/hil_cli_workflow[_WORKFLOW].json)."""
    suffix = "" if a.workflow == "task" else f"_{a.workflow}"
    out = a.out or ROOT / "benchmarks" / "results" / f"hil_cli_workflow{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "workflow": a.workflow, "machine": machine(),
                               "argv": sys.argv[1:], "busy_loops": a.load, "commands": workflow_commands(a.workflow),
                               "overrides": a.set, "minutes": a.minutes, "episodes": a.episodes,
                               "time_scale": a.time_scale, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
