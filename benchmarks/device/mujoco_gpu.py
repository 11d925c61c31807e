"""GPU MuJoCo backends on CUDA (MJX; MuJoCo Warp with ``--backend warp``): CPU parity, then env steps/s.

Run through benchmarks/device/mujoco_gpu.sh (it installs the carried wheels). Prints, per task:
the largest observation/reward difference between ``backend=cpu`` and the GPU backend over 5 steps
from the same state with the same actions, then steps/s of ``MujocoVecEnv.step`` for num_envs
1..4096 (first task; the others at the largest size) with the ratio to the CPU backend's
steps/s at the same num_envs (up to 64 worlds). MuJoCo Warp needs ``warp-lang`` (a 149 MB wheel, more than the
64 MiB the device tool carries): ``--backend warp`` runs where it is installed.
"""

import argparse
import time

import torch

import robot_rl.sims.mujoco  # noqa: F401 - registers the tasks
from robot_rl.core.config import TASKS


def parity(task: str, backend: str, device: str) -> tuple[float, float]:
    """Max |obs| and |reward| differences over 5 steps, CPU backend vs ``backend`` on ``device``."""
    cpu = TASKS.get(task)(num_envs=4).make("cpu", 0)
    gpu = TASKS.get(task)(num_envs=4, backend=backend).make(device, 0)
    gpu.set_state(cpu.get_state())
    g = torch.Generator().manual_seed(0)
    d_obs = d_rew = 0.0
    for _ in range(5):
        a = torch.rand(4, *cpu.spec.action.shape, generator=g) * 2 - 1
        rc, rg = cpu.step(a), gpu.step(a.to(device))
        d_obs = max(d_obs, (rc.info["final_obs"]["state"] - rg.info["final_obs"]["state"].cpu()).abs().max().item())
        d_rew = max(d_rew, (rc.reward - rg.reward.cpu()).abs().max().item())
    return d_obs, d_rew


def steps_per_s(task: str, n: int, backend: str, device: str, seconds: float) -> float:
    """Env steps/s (summed over worlds) with random actions, after one warm-up (compile) step."""
    env = TASKS.get(task)(num_envs=n, backend=backend).make(device, 0)
    a = torch.rand(n, *env.spec.action.shape, device=device) * 2 - 1
    env.step(a)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        env.step(a)
        k += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return n * k / (time.perf_counter() - t0)


def main() -> None:
    """Parity, then the steps/s table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="+", default=["mujoco/reach", "mujoco/pick_cube"])
    ap.add_argument("--num-envs", type=int, nargs="+", default=[1, 256, 4096],
                    help="sweep for the first task; the others run the largest only (each size compiles anew)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--backend", choices=["mjx", "warp"], default="mjx")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device {device}: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}", flush=True)
    for task in args.tasks:
        t0 = time.perf_counter()
        b = args.backend
        d_obs, d_rew = parity(task, b, device)
        print(f"{task}: parity cpu vs {b} over 5 steps: max |obs| diff {d_obs:.2e}, max |reward| diff {d_rew:.2e} "
              f"({'OK' if d_obs < 1e-2 else 'MISMATCH'}; {time.perf_counter() - t0:.0f}s incl. compile)", flush=True)
        print(f"{'N':>6} {b + ' steps/s':>12} {'cpu steps/s':>12} {b + '/cpu':>8}")
        for n in args.num_envs if task == args.tasks[0] else args.num_envs[-1:]:
            fast = steps_per_s(task, n, b, device, args.seconds)
            cpu = steps_per_s(task, n, "cpu", "cpu", args.seconds) if n <= 64 else float("nan")
            print(f"{n:>6} {fast:12.0f} {cpu:12.0f} {fast / cpu:8.2f}", flush=True)


if __name__ == "__main__":
    main()
