"""robot-rl beside LeRobot's HIL-SERL stack on gym_hil's Panda pick: same demos, env steps and SAC settings.

One after the other on this machine: (a) LeRobot 0.4.4's ``lerobot.rl.learner`` and actor (two processes,
gRPC), (b) ``robot-rl train`` (one process) as a user types it. Both read the same 20 scripted demos
(benchmarks/gym_hil_demos.py, written by LeRobot's own writer; robot-rl's copy differs only in the gripper
column's units) and stop when their learner holds ``--env-steps`` online transitions. Halfway, the learner is
killed with SIGKILL and resumed with the stack's own mechanism (LeRobot: ``resume=true`` from
``checkpoints/last``, then its actor, whose gRPC streams do not reconnect, restarted; robot-rl:
``robot-rl train --resume RUN``); what each lost is read from its logs and checkpoints. Every checkpoint is
copied as it appears and evaluated afterwards (benchmarks/gym_hil_eval.py): success vs env steps and wall time,
env steps and wall time to 80 %, peak RSS of each stack's processes, ratios robot-rl / LeRobot.

    MUJOCO_GL=osmesa HF_HUB_OFFLINE=1 nice -n 5 .venv-gymhil/bin/python benchmarks/lerobot_side_by_side.py \\
        --env-steps 6000 --out benchmarks/out/gym_hil   # add --lerobot-no-kill as in RESULTS_so101.md §4

The LeRobot actor runs through benchmarks/gym_hil_lerobot.py (state-only env, see there); .venv-gymhil holds
lerobot 0.4.4, gym-hil 0.1.14 (mujoco 3.8.1) and robot-rl (``pip install -e .[gym,datasets]``):
``bash benchmarks/setup_gym_hil_venv.sh`` builds it. A longer budget in two runs, one side each, then merged
(R: LeRobot's measured optimisation steps per env step, which its run prints; 1.19 on a quiet machine here):

    ... lerobot_side_by_side.py --only lerobot --env-steps 30000 --lerobot-no-kill --lerobot-save-freq 1000 --results LR
    ... lerobot_side_by_side.py --only robot_rl --env-steps 30000 --robot-rl-utd R --results RR
    ... lerobot_side_by_side.py --merge LR.json RR.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402  (before gym_hil/OSMesa: the other import order crashes in LLVM)
from gym_hil_demos import ENV_ID, ENV_KWARGS, record  # noqa: E402
from gym_hil_eval import MemoryMonitor, Snapshotter, evaluate_lerobot, evaluate_robot_rl  # noqa: E402
from gym_hil_lerobot import SAC, lerobot_config  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``proc``, and SIGKILL it if it has not exited within ``timeout`` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def spawn(cmd: list[str], log: Path, threads: int | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"), HF_HUB_OFFLINE="1")
    if threads is not None:  # LeRobot's processes: torch's default (all cores each) oversubscribes 2 cores
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    with log.open("ab") as f:
        return subprocess.Popen(["nice", "-n", "5", *cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)


def wait_for(pred: Any, timeout_s: float, what: str, period_s: float = 0.5) -> None:
    end = time.time() + timeout_s
    while not pred():
        if time.time() > end:
            raise TimeoutError(f"waited {timeout_s:.0f}s for {what}")
        time.sleep(period_s)


def text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


# ---------------------------------------------------------------- LeRobot


class LeRobotSide:
    """Learner + actor processes, the env steps their logs report, the kill and the resume."""

    def __init__(self, out: Path, demos: Path, budget: int, save_freq: int, fps: int, seed: int = 0) -> None:
        self.out, self.demos, self.budget, self.save_freq, self.fps = out, demos, budget, save_freq, fps
        self.seed = seed
        self.run_dir = out / "lerobot_run"
        self.port = free_port()
        self.steps_done = 0  # env steps of actors that have ended
        self.actor_log: Path | None = None
        self.lives = 0
        self.threads: int | None = int(os.environ.get("LEROBOT_TORCH_THREADS", "1")) or None

    def env_steps(self) -> int:
        """Env steps the actors took (counted at each episode end, as the actor logs them)."""
        found = re.findall(r"Global step (\d+):", text(self.actor_log)) if self.actor_log else []
        return self.steps_done + (int(found[-1]) + 1 if found else 0)

    def _config(self, name: str, online_steps: int, resume: bool, output_dir: Path) -> Path:
        cfg = lerobot_config(output_dir, self.demos, online_steps, self.port, self.save_freq, self.fps, self.seed,
                             resume=resume)
        path = self.out / name
        path.write_text(json.dumps(cfg, indent=1))
        return path

    def start_learner(self, resume: bool) -> subprocess.Popen[bytes]:
        self.lives += 1
        if resume:  # LeRobot resumes from the train config saved in checkpoints/last
            cfg = self.run_dir / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
            args = [f"--config_path={cfg}", "--resume=true"]
        else:
            args = [f"--config_path={self._config('lerobot_learner.json', self.budget, False, self.run_dir)}"]
        log = self.out / f"lerobot_learner_{self.lives}.log"
        proc = spawn([PY, "-m", "lerobot.rl.learner", *args], log, self.threads)
        wait_for(lambda: "Starting learner thread" in text(log) or proc.poll() is not None, 300, "the LeRobot learner")
        if proc.poll() is not None:
            raise RuntimeError(f"the LeRobot learner exited with {proc.returncode}; see {log}")
        self.learner_log = log
        return proc

    def start_actor(self, online_steps: int, n: int) -> subprocess.Popen[bytes]:
        out_dir = self.out / f"lerobot_actor_{n}"
        shutil.rmtree(out_dir, ignore_errors=True)
        cfg = self._config(f"lerobot_actor_{n}.json", online_steps, False, out_dir)
        self.actor_log = self.out / f"lerobot_actor_{n}.log"
        return spawn([PY, str(HERE / "gym_hil_lerobot.py"), "actor", f"--config_path={cfg}"], self.actor_log,
                     self.threads)

    def opt_steps(self, log: Path, offset: int) -> int:
        return offset + text(log).count("Optimization frequency loop")

    def last_checkpoint(self) -> dict[str, Any]:
        last = self.run_dir / "checkpoints" / "last"
        step = json.loads(text(last / "training_state" / "training_step.json") or '{"step": 0}')["step"]
        info = json.loads(text(self.run_dir / "dataset" / "meta" / "info.json") or '{"total_frames": 0}')
        return {"optimization_step": int(step), "replay_frames": int(info["total_frames"])}


def run_lerobot(out: Path, demos: Path, budget: int, save_freq: int, fps: int, mem: MemoryMonitor,
                kill_learner: bool, seed: int = 0) -> dict[str, Any]:
    side = LeRobotSide(out, demos, budget, save_freq, fps, seed)
    t0 = time.time()
    learner = side.start_learner(resume=False)
    mem.watch("lerobot_learner", learner.pid)
    snap = Snapshotter("lerobot", side.run_dir, out / "snapshots" / "lerobot", t0, side.env_steps)
    snap.start()
    actor = side.start_actor(budget, 1)
    mem.watch("lerobot_actor", actor.pid)
    if not kill_learner:
        actor.wait()
        return finish_lerobot(side, learner, snap, mem, t0, {"skipped": True}, side.opt_steps(side.learner_log, 0))
    wait_for(lambda: side.env_steps() >= budget // 2 or actor.poll() is not None, 3600, "half the budget")
    kill: dict[str, Any] = {"at_wall_s": time.time() - t0, "env_steps_taken": side.env_steps(),
                            "optimization_steps": side.opt_steps(side.learner_log, 0)}
    learner.send_signal(signal.SIGKILL)
    learner.wait()
    kill["restored"] = side.last_checkpoint()
    t_kill = time.time()
    learner = side.start_learner(resume=True)
    mem.watch("lerobot_learner", learner.pid)
    kill["learner_back_after_s"] = time.time() - t_kill
    time.sleep(20)  # does the running actor find the new learner?
    kill["old_actor_reconnected"] = "Received request to receive transitions" in text(side.learner_log)
    kill["old_actor_alive"] = actor.poll() is None
    stop(actor, 30)
    side.steps_done = side.env_steps()
    kill["env_steps_taken_before_actor_restart"] = side.steps_done
    kill["transitions_lost"] = side.steps_done - kill["restored"]["replay_frames"]
    kill["optimization_steps_lost"] = kill["optimization_steps"] - kill["restored"]["optimization_step"]
    remaining = max(budget - kill["restored"]["replay_frames"], 1)
    actor = side.start_actor(remaining, 2)
    mem.watch("lerobot_actor", actor.pid)
    actor.wait()
    return finish_lerobot(side, learner, snap, mem, t0, kill,
                          side.opt_steps(side.learner_log, kill["restored"]["optimization_step"]))


def finish_lerobot(side: LeRobotSide, learner: subprocess.Popen[bytes], snap: Snapshotter, mem: MemoryMonitor,
                   t0: float, kill: dict[str, Any], end_opt: int) -> dict[str, Any]:
    t_end = time.time() - t0
    restored = kill.get("restored", {}).get("replay_frames", 0)
    time.sleep(2)
    stop(learner, 60)
    snap.stop()
    mem.forget("lerobot_learner")
    mem.forget("lerobot_actor")
    return {"wall_s": t_end, "env_steps_taken": side.env_steps(), "optimization_steps": end_opt,
            "transitions_at_end": restored + side.env_steps() - side.steps_done,
            "kill": kill, "snapshots": snap.rows, "port": side.port}


# ---------------------------------------------------------------- robot-rl


def robot_rl_command(run_root: Path, demos: Path, budget: int, utd: float, seed: int = 0) -> list[str]:
    kw = ", ".join(f"{k}: {json.dumps(v)}" for k, v in ENV_KWARGS.items())
    hidden = json.dumps(SAC["hidden"]).replace(" ", "")
    return [str(BIN / "robot-rl"), "train", "--task", f"gymnasium/{ENV_ID}", "--algo", "sac", "--name", "gym_hil_sac",
            f"run.root={run_root}", f"task.env_kwargs={{{kw}}}", f"loop.demos_path={demos}",
            f"algo.demo_ratio={SAC['demo_ratio']}", f"loop.total_env_steps={budget}", "loop.success_threshold=null",
            f"loop.eval_every_env_steps={budget}", "loop.eval_episodes=1", "loop.eval_num_envs=1",
            "loop.checkpoint_every_s=30", f"algo.actor_lr={SAC['actor_lr']}", f"algo.critic_lr={SAC['critic_lr']}",
            f"algo.temperature_lr={SAC['temperature_lr']}", f"algo.gamma={SAC['gamma']}", f"algo.tau={SAC['tau']}",
            f"algo.batch_size={SAC['batch_size']}", f"algo.init_temperature={SAC['init_temperature']}",
            f"algo.num_critics={SAC['num_critics']}", f"algo.actor_hidden={hidden}", f"algo.critic_hidden={hidden}",
            "algo.critic_layer_norm=true", f"algo.learning_starts={SAC['learning_starts']}",
            f"algo.target_entropy={SAC['target_entropy']}", f"algo.utd_ratio={utd}", "run.device=cpu",
            f"run.seed={seed}", "run.progress=false"]


def last_csv_row(path: Path) -> dict[str, float]:
    lines = [ln for ln in text(path).splitlines() if ln.strip()]
    if len(lines) < 2:
        return {}
    head = lines[0].split(",")
    return {k: float(v) for k, v in zip(head, lines[-1].split(",")) if v != ""}


def run_robot_rl(out: Path, demos: Path, budget: int, utd: float, mem: MemoryMonitor,
                 seed: int = 0) -> dict[str, Any]:
    run_root = out / "robot_rl_runs"
    run_dir = run_root / "gym_hil_sac"
    shutil.rmtree(run_root, ignore_errors=True)
    cmd = robot_rl_command(run_root, demos, budget, utd, seed)
    (out / "robot_rl_command.txt").write_text(" ".join(cmd) + "\n")
    state = {"lost": 0}

    def env_steps() -> int:
        return int(last_csv_row(run_dir / "train.csv").get("env_steps", 0)) + state["lost"]

    t0 = time.time()
    proc = spawn(cmd, out / "robot_rl_1.log")
    mem.watch("robot_rl_train", proc.pid)
    wait_for(lambda: (run_dir / "config.yaml").is_file(), 300, "the robot-rl run directory")
    snap = Snapshotter("robot_rl", run_dir, out / "snapshots" / "robot_rl", t0, env_steps)
    snap.start()
    wait_for(lambda: env_steps() >= budget // 2 or proc.poll() is not None, 3600, "half the budget")
    row = last_csv_row(run_dir / "train.csv")
    kill: dict[str, Any] = {"at_wall_s": time.time() - t0, "env_steps_taken": int(row.get("env_steps", 0)),
                            "updates": int(row.get("updates", 0))}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t_kill = time.time()
    log2 = out / "robot_rl_2.log"
    proc = spawn([*cmd[:2], "--resume", str(run_dir), *cmd[2:]], log2)
    mem.watch("robot_rl_train", proc.pid)
    wait_for(lambda: re.search("resumed from|has no checkpoint yet", text(log2)) is not None or proc.poll() is not None,
             300, "the robot-rl resume")
    kill["learner_back_after_s"] = time.time() - t_kill
    m = re.search(r"resumed from \S+ at (\d+) env steps, (\d+) updates", text(log2))
    extra = re.search(r"replay holds (\d+) transitions committed after the checkpoint's (\d+)", text(log2))
    restored_steps = int(extra.group(1)) if extra else (int(m.group(1)) if m else 0)
    kill["restored"] = {"checkpoint_env_steps": int(m.group(1)) if m else None,
                        "updates": int(m.group(2)) if m else None, "replay_transitions": restored_steps}
    kill["transitions_lost"] = kill["env_steps_taken"] - restored_steps
    kill["updates_lost"] = kill["updates"] - (kill["restored"]["updates"] or 0)
    state["lost"] = max(kill["transitions_lost"], 0)
    proc.wait()
    t_end = time.time() - t0
    snap.stop()
    mem.forget("robot_rl_train")
    final = json.loads(text(run_dir / "summary.json") or "{}")
    row = last_csv_row(run_dir / "train.csv")
    return {"wall_s": t_end, "env_steps_taken": int(row.get("env_steps", 0)) + state["lost"],
            "updates": int(row.get("updates", 0)), "kill": kill, "snapshots": snap.rows, "summary": final,
            "command": " ".join(cmd), "returncode": proc.returncode}


# ---------------------------------------------------------------- evaluation, report


def evaluate_snapshots(side: str, rows: list[dict[str, Any]], episodes: int, points: int) -> list[dict[str, Any]]:
    if len(rows) > points:  # evenly spaced, the last one always
        rows = [rows[round(i * (len(rows) - 1) / (points - 1))] for i in range(points)]
    curve = []
    for row in rows:
        path = Path(row["path"])
        t = time.time()
        try:
            res = evaluate_lerobot(path / "pretrained_model", episodes) if side == "lerobot" else \
                evaluate_robot_rl(path, episodes)
        except Exception as e:  # a snapshot that does not load is reported, not fatal
            res = {"error": f"{type(e).__name__}: {e}"}
        curve.append({**row, **res, "eval_s": time.time() - t})
        print(f"[eval] {side} {row['name']}: {res}", flush=True)
    return curve


def first_reaching(curve: list[dict[str, Any]], level: float) -> dict[str, Any] | None:
    for p in curve:
        if p.get("success", 0.0) >= level:
            return {"env_steps_taken": p["env_steps_taken"], "wall_s": p["wall_s"], "checkpoint": p["name"]}
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def summarise(res: dict[str, Any]) -> dict[str, Any]:
    lr, rr = res["lerobot"], res["robot_rl"]
    for side in (lr, rr):
        side["to_80"] = first_reaching(side["curve"], 0.8)
        side["final"] = side["curve"][-1] if side["curve"] else None
        updates = side.get("updates", side.get("optimization_steps", 0))
        side["updates_per_env_step"] = updates / max(side["env_steps_taken"], 1)
    t80 = (lr["to_80"], rr["to_80"])
    res["ratios_robot_rl_over_lerobot"] = {
        "wall_s_to_80": ratio(t80[1] and t80[1]["wall_s"], t80[0] and t80[0]["wall_s"]),
        "env_steps_to_80": ratio(t80[1] and t80[1]["env_steps_taken"], t80[0] and t80[0]["env_steps_taken"]),
        "total_wall_s": ratio(rr["wall_s"], lr["wall_s"]),
        "peak_rss_total": ratio(rr["peak_rss_mb"]["total"], lr["peak_rss_mb"]["total"]),
        "final_success": ratio(rr["final"] and rr["final"].get("success"), lr["final"] and lr["final"].get("success")),
    }
    return res


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for side, label, colour in (("lerobot", "LeRobot 0.4.4 rl (learner+actor)", "tab:orange"),
                                ("robot_rl", "robot-rl train", "tab:blue")):
        curve = [p for p in res[side]["curve"] if "success" in p]
        kill = res[side]["kill"]
        marks = ((axes[0], "env_steps_taken", kill.get("env_steps_taken")), (axes[1], "wall_s", kill.get("at_wall_s")))
        for ax, key, kx in marks:
            ax.plot([p[key] for p in curve], [100 * p["success"] for p in curve], "o-", color=colour, label=label)
            if kx is not None:
                ax.axvline(kx, color=colour, ls=":", lw=1)
    for ax, xl in zip(axes, ("env steps taken (dotted: learner killed)", "wall time [s] (dotted: learner killed)")):
        ax.axhline(80, color="grey", lw=0.8)
        ax.set_xlabel(xl)
        ax.set_ylabel("policy-alone success [%]")
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"gym_hil {ENV_ID} (state), 20 demos, same SAC settings, {res['budget']} env steps, 2 CPU cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_report(res: dict[str, Any]) -> None:
    for side in ("lerobot", "robot_rl"):
        s = res[side]
        print(f"{side}: wall {s['wall_s']:.0f}s, env steps {s['env_steps_taken']}, "
              f"updates/env step {s['updates_per_env_step']:.2f}, peak RSS {s['peak_rss_mb']}, "
              f"to 80%: {s['to_80']}, final: {s['final']}, kill: {s['kill']}")
    print("ratios robot-rl / LeRobot:", json.dumps(res["ratios_robot_rl_over_lerobot"], indent=1))


def merge(lerobot_json: Path, robot_rl_json: Path, results: Path) -> None:
    """One result from a LeRobot-only and a robot-rl-only run of the same budget."""
    lr, rr = json.loads(lerobot_json.read_text()), json.loads(robot_rl_json.read_text())
    if lr["budget"] != rr["budget"] or lr["demos"]["frames"] != rr["demos"]["frames"]:
        raise SystemExit(f"{lerobot_json} and {robot_rl_json} differ in budget or demos: not comparable")
    res = {**rr, "lerobot": lr["lerobot"], "robot_rl": rr["robot_rl"],
           "date_utc": {"lerobot": lr["date_utc"], "robot_rl": rr["date_utc"]}}
    summarise(res)
    results.parent.mkdir(parents=True, exist_ok=True)
    plot(res, results.with_suffix(".png"))
    print_report(res)
    results.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    print("written:", results.with_suffix(".json"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-steps", type=int, default=6000, help="online transitions each learner trains on")
    p.add_argument("--out", type=Path, default=HERE / "out" / "gym_hil")
    p.add_argument("--results", type=Path, default=HERE / "results" / "lerobot_side_by_side")
    p.add_argument("--lerobot-save-freq", type=int, default=150, help="LeRobot checkpoint every N optimisation steps")
    p.add_argument("--lerobot-fps", type=int, default=10, help="LeRobot's env.fps: the actor's pace")
    p.add_argument("--lerobot-no-kill", action="store_true",
                   help="no kill -9 of LeRobot's learner (a kill during its checkpoint's dataset write ends the run)")
    p.add_argument("--robot-rl-utd", type=float, default=None, help="default: LeRobot's measured updates per step")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="each learner's seed (the demos and the env do not vary)")
    p.add_argument("--eval-points", type=int, default=12, help="checkpoints evaluated per side (evenly spaced)")
    p.add_argument("--only", choices=("lerobot", "robot_rl"), default=None,
                   help="run one side (and --merge the two results afterwards)")
    p.add_argument("--merge", type=Path, nargs=2, metavar=("LEROBOT_JSON", "ROBOT_RL_JSON"),
                   help="compare two --only runs (same demos and budget): the ratios, the plot and the report")
    args = p.parse_args()
    if args.merge:
        lerobot_json, robot_rl_json = args.merge
        merge(lerobot_json, robot_rl_json, args.results)
        return
    torch.set_num_threads(1)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    demos = record(args.out / "demos", 20, 40)
    print("demos:", demos, flush=True)
    res: dict[str, Any] = {"budget": args.env_steps, "env_id": ENV_ID, "env_kwargs": ENV_KWARGS, "sac": SAC,
                           "demos": demos, "seed": args.seed,
                           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                           "machine": {"cpus": os.cpu_count(), "torch": torch.__version__}}
    mem = MemoryMonitor()
    mem.start()
    if args.only != "robot_rl":
        t = time.time()
        lr = run_lerobot(args.out, Path(demos["lerobot"]), args.env_steps, args.lerobot_save_freq, args.lerobot_fps,
                         mem, not args.lerobot_no_kill, args.seed)
        lr["mean_load_1min"] = mem.mean_load(t, time.time())
        lr["fps"] = args.lerobot_fps
        lr["peak_rss_mb"] = {"learner": mem.peak.get("lerobot_learner"), "actor": mem.peak.get("lerobot_actor")}
        lr["peak_rss_mb"]["total"] = (lr["peak_rss_mb"]["learner"] or 0) + (lr["peak_rss_mb"]["actor"] or 0)
        res["lerobot"] = lr
        print("lerobot done:", {k: v for k, v in lr.items() if k != "snapshots"}, flush=True)
    if args.only != "lerobot":
        utd = args.robot_rl_utd
        if utd is None:
            lr_side = res.get("lerobot", {})
            utd = round(lr_side.get("optimization_steps", 1) / max(lr_side.get("env_steps_taken", 1), 1), 2) or 1.0
        t = time.time()
        rr = run_robot_rl(args.out, Path(demos["robot_rl"]), args.env_steps, utd, mem, args.seed)
        rr["mean_load_1min"] = mem.mean_load(t, time.time())
        rr["utd_ratio"] = utd
        rr["peak_rss_mb"] = {"total": mem.peak.get("robot_rl_train")}
        res["robot_rl"] = rr
    mem.stop()
    for side in ("lerobot", "robot_rl"):
        if side in res:
            res[side]["curve"] = evaluate_snapshots(side, res[side]["snapshots"], args.eval_episodes, args.eval_points)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    if "lerobot" in res and "robot_rl" in res:
        summarise(res)
        plot(res, args.results.with_suffix(".png"))
        print_report(res)
    args.results.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    print("written:", args.results.with_suffix(".json"))


if __name__ == "__main__":
    main()
