"""Learning curves of docs/so101.md's simulated block, read back from each run's replay on disk.

The block's actor prints one line at the end; its learner's replay (``runs/so101/replay/online``) keeps every
transition in the order it arrived, with who acted (``intervened``) and how the episode ended. This script reads
the replays of kept runs (``hil_cli_workflow.py --keep DIR``) and writes, per seed and per block of 50 episodes:
the episodes a person helped with, the successes (the learned reward's), the successes the policy reached alone,
and where the scripted person first took over (the cube still on the table or lifted; the gripper open or closing).

    python benchmarks/so101_replay_curves.py /work/so101_audit --seeds 3 1 2 \\
        --out benchmarks/results/so101_workflow/audit2_curves.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, write_result

BLOCK = 50
#: sim_so101's state with ``robot.object_in_state``: 5 joints, tool x y z, roll pitch yaw, gripper, cube x y z.
TOOL, GRIPPER, CUBE = slice(5, 8), 11, slice(12, 15)


def read_replay(directory: Path) -> dict[str, torch.Tensor]:
    """Every row of a segment log, in order: ``intervened``, ``terminated``, ``truncated`` and the observed state."""
    from robot_rl.replay.segments import decode_segment

    parts: dict[str, list[torch.Tensor]] = {"intervened": [], "terminated": [], "truncated": [], "slot": [],
                                            "state": []}
    first_slot = None
    for path in sorted(directory.glob("seg_*.rrs")):
        header, arrays = decode_segment(path.read_bytes(), path.name)
        first_slot = header["o0"] if first_slot is None else first_slot
        for key in ("intervened", "terminated", "truncated"):
            parts[key].append(arrays[f"row.{key}"].clone())
        parts["slot"].append(arrays["row.obs_slot"].clone())
        parts["state"].append(arrays["obs.state"].clone())
    if not parts["state"]:
        raise FileNotFoundError(f"{directory} holds no replay segment")
    rows = {k: torch.cat(v) for k, v in parts.items()}
    rows["state"] = rows["state"][rows.pop("slot").long() - int(first_slot or 0)]
    return rows


def episode_curve(rows: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Per block of :data:`BLOCK` episodes: helped, successes, successes alone, and where takeovers began."""
    ends = (rows["terminated"] | rows["truncated"]).nonzero().flatten().tolist()
    episodes, start = [], 0
    for end in ends:
        acted = rows["intervened"][start:end + 1]
        first = int(acted.nonzero()[0]) if bool(acted.any()) else None
        where = None
        if first is not None:
            s, s0 = rows["state"][start + first], rows["state"][start]
            lifted = float(s[CUBE][2] - s0[CUBE][2]) > 0.005
            where = f"{'cube lifted' if lifted else 'cube on the table'}, gripper " \
                    f"{'closing' if float(s[GRIPPER]) < 0.7 else 'open'}"
        episodes.append({"helped": first is not None, "success": bool(rows["terminated"][end]), "where": where,
                         "steps": end + 1 - start})
        start = end + 1
    curve = []
    for i in range(0, len(episodes), BLOCK):
        block = episodes[i:i + BLOCK]
        curve.append({"episodes": [i, i + len(block)], "helped": sum(e["helped"] for e in block),
                      "successes": sum(e["success"] for e in block),
                      "alone_successes": sum(e["success"] and not e["helped"] for e in block),
                      "mean_steps": sum(e["steps"] for e in block) / len(block),
                      "takeovers_began": dict(Counter(e["where"] for e in block if e["where"] is not None))})
    return curve


def curves_table(records: list[dict[str, Any]]) -> str:
    """Per seed and block of episodes: helped / successes alone (benchmarks/report.py's table)."""
    seeds = records[0]["results"]["seeds"]
    blocks = max(len(c) for c in seeds.values())
    head = ["seed"] + [f"episodes {BLOCK * b}–{BLOCK * (b + 1)}" for b in range(blocks)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for seed, curve in seeds.items():
        cells = [f"{c['helped']} helped, {c['alone_successes']} alone" for c in curve]
        lines.append(f"| {seed} | " + " | ".join(cells + [""] * (blocks - len(cells))) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("keep", type=Path, help="the --keep directory of hil_cli_workflow.py (seed<N>/runs/so101 inside)")
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    add_out_argument(p, "so101_replay_curves")
    a = p.parse_args()
    seeds = {str(s): episode_curve(read_replay(a.keep / f"seed{s}" / "runs" / "so101" / "replay" / "online"))
             for s in a.seeds}
    path = write_result(a.out or default_path("so101_replay_curves"), "so101_replay_curves", a,
                        {"block": BLOCK, "seeds": seeds})
    print(curves_table([{"results": {"seeds": seeds}}]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
