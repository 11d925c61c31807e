"""RESULTS_redesign.md's before/after tables, from the printouts ``before_after/run.sh`` kept.

``run.sh`` ran each benchmark on the commit before the redesign and on the redesign and saved what each printed
(``results/before_after/<name>-{before,after}.txt``). Running this module reads those printouts and writes their
figures to one result file, which the tables render (``report.py`` reads only result files):

    python benchmarks/tables_redesign.py          # writes benchmarks/results/before_after/before_after.json

The rerun for issue 51 (features as extensions; a subset, on a busy shared machine) has its own folder::

    python benchmarks/tables_redesign.py --printouts benchmarks/results/before_after_issue51 \
        --out benchmarks/results/before_after_issue51/before_after.json --measured "2026-12-07, …"

The figures are parsed from the benchmarks' own output, not typed in.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from result_file import RESULTS, markdown_table, write_result

SIDES = ("before", "after")
NUM = r"([-0-9.,]+)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def parse_default_train(text: str) -> dict[str, Any]:
    """Per seed: reached, wall s, env steps, updates, success (the script's final table, plain or markdown)."""
    rows = re.findall(r"^\s*(\d+)\s+(True|False)\s+" + r"\s+".join([NUM] * 3) + r"\s+(\d+)%", text, re.M)
    markdown = re.findall(r"^\| (\d+) \| (yes|no) \| " + r" \| ".join([NUM] * 3) + r" \| (\d+) %", text, re.M)
    rows += [(seed, "True" if ok == "yes" else "False", *rest) for seed, ok, *rest in markdown]
    return {"seeds": {seed: {"reached": ok == "True", "wall_s": _f(w), "env_steps": int(_f(e)),
                             "updates": int(_f(u)), "success": int(s) / 100} for seed, ok, w, e, u, s in rows}}


def _md_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|---")]


def parse_sac(text: str) -> dict[str, Any]:
    """Wall s and evaluation return per learner (the script's table)."""
    rows = {r[0]: r for r in _md_rows(text) if r[0] in ("sb3", "robot_rl fp32")}
    return {name: {"wall_s": _f(r[1]), "return": _f(r[5])} for name, r in rows.items()}


def parse_ppo(text: str) -> dict[str, Any]:
    """The summary table's metrics: ours and rsl_rl."""
    keys = {"training env-steps/s, wall clock": "env_steps_per_s", "env steps to threshold": "steps_to_threshold",
            "final eval success": "final_success"}
    out: dict[str, Any] = {}
    for r in _md_rows(text):
        for prefix, key in keys.items():
            if r[0].startswith(prefix):
                out[key] = {"ours": _f(r[1]), "rsl_rl": _f(r[2])}
    return out


def parse_transport(text: str) -> dict[str, Any]:
    """Per payload and method: transitions/s, MB/s, and its time relative to ours."""
    out: dict[str, Any] = {}
    for r in _md_rows(text):
        if len(r) == 6 and r[2] in ("ours", "raw", "raw_crc", "pickle_lz4"):
            out.setdefault(r[0], {"rows_per_chunk": int(r[1])})[r[2]] = {
                "transitions_per_s": _f(r[3]), "mb_per_s": _f(r[4]), "time_vs_ours": _f(r[5])}
    return out


def parse_suite(text: str) -> dict[str, Any]:
    m = re.search(r"(\d+) passed, (\d+) skipped in ([0-9.]+)s", text)
    if m is None:
        raise ValueError("no pytest summary line in the suite's printout")
    return {"passed": int(m[1]), "skipped": int(m[2]), "wall_s": float(m[3])}


def parse_fingerprint(text: str) -> dict[str, Any]:
    """``before_after/demos_fingerprint.py``'s JSON object (the printout also holds the time line)."""
    return dict(json.loads(text[text.index("{"):text.rindex("}") + 1]))


PARSERS = {"default_train": parse_default_train, "sac_vs_sb3": parse_sac, "ppo_vs_rsl_rl": parse_ppo,
           "transport": parse_transport, "suite": parse_suite, "demos_fingerprint": parse_fingerprint}


TIME = re.compile(r"^([0-9.]+) s wall, ([0-9.]+) s user$", re.M)


def parse_time(text: str) -> dict[str, float]:
    """The process's wall and user CPU seconds: ``run.sh``'s ``/usr/bin/time`` line, the printout's last."""
    m = TIME.findall(text)
    if not m:
        raise ValueError("no time line (`N s wall, M s user`) in the printout")
    return {"wall_s": float(m[-1][0]), "user_s": float(m[-1][1])}


def _finished(path: Path) -> bool:
    """A printout of a run that ended (``run.sh`` appends the time line when the process exits)."""
    return path.exists() and TIME.search(path.read_text()) is not None


def collect(folder: Path) -> dict[str, Any]:
    """Each benchmark's figures, before and after, from the printouts in ``folder`` (those it holds both of).

    ``process_time``: each printout's wall and user CPU seconds (on a busy machine the CPU time is the steadier).
    """
    names = [n for n in PARSERS if all(_finished(folder / f"{n}-{side}.txt") for side in SIDES)]
    texts = {n: {side: (folder / f"{n}-{side}.txt").read_text() for side in SIDES} for n in names}
    out: dict[str, Any] = {n: {side: PARSERS[n](texts[n][side]) for side in SIDES} for n in names}
    out["process_time"] = {n: {side: parse_time(texts[n][side]) for side in SIDES} for n in names}
    return out


def _pair(a: float, b: float, fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(a)} / {fmt.format(b)}"


def default_train_table(records: list[dict[str, Any]]) -> str:
    d = records[0]["results"]["default_train"]
    before, after = d["before"]["seeds"], d["after"]["seeds"]
    rows = [[s, _pair(before[s]["env_steps"], after[s]["env_steps"]), _pair(before[s]["updates"], after[s]["updates"]),
             f"{before[s]['success']:.0%} / {after[s]['success']:.0%}".replace("%", " %"),
             _pair(before[s]["wall_s"], after[s]["wall_s"], "{:.1f}")] for s in before]
    med = [sorted(x["wall_s"] for x in side.values())[len(side) // 2] for side in (before, after)]
    rows.append(["median", "", "", "", f"{med[0]:.1f} / {med[1]:.1f} ({med[1] / med[0]:.2f}×)"])
    return markdown_table(["seed", "env steps (before / after)", "updates (before / after)",
                           "final success (before / after)", "wall s (before / after)"], rows, "rrrrr")


def sac_table(records: list[dict[str, Any]]) -> str:
    d = records[0]["results"]["sac_vs_sb3"]
    rows = [[side, f"{d[side]['sb3']['wall_s']:.1f}", f"{d[side]['robot_rl fp32']['wall_s']:.1f}",
             f"{d[side]['sb3']['wall_s'] / d[side]['robot_rl fp32']['wall_s']:.2f}×",
             f"{d[side]['robot_rl fp32']['return']:.1f}"] for side in SIDES]
    return markdown_table(["", "sb3 wall s", "ours wall s", "ours vs sb3", "ours eval return (10 ep)"], rows, "lrrrr")


def sac_summary(records: list[dict[str, Any]]) -> str:
    """RESULTS.md's SAC against Stable-Baselines3: the redesign's 'after' run (fp32, the default)."""
    d = records[0]["results"]["sac_vs_sb3"]["after"]
    sb3, ours = d["sb3"], d["robot_rl fp32"]
    return markdown_table(["learner", "wall s", "speed-up vs SB3", "eval return (10 episodes)"], [
        ["Stable-Baselines3 2.9.2", f"{sb3['wall_s']:.1f}", "1.00×", f"{sb3['return']:.1f}"],
        ["robot_rl, fp32 (default)", f"{ours['wall_s']:.1f}", f"{sb3['wall_s'] / ours['wall_s']:.2f}×",
         f"{ours['return']:.1f}"]], "lrrr")


def ppo_table(records: list[dict[str, Any]]) -> str:
    d = records[0]["results"]["ppo_vs_rsl_rl"]
    rows = []
    for side in SIDES:
        m = d[side]
        sps = m["env_steps_per_s"]
        rows.append([side, f"{sps['ours']:,.0f}", f"{sps['rsl_rl']:,.0f}", f"{sps['ours'] / sps['rsl_rl']:.2f}",
                     f"{m['steps_to_threshold']['ours']:,.0f}", f"{m['final_success']['ours']:.2f}"])
    return markdown_table(["", "ours env-steps/s", "rsl_rl env-steps/s", "ours/rsl_rl", "env steps to threshold (ours)",
                           "final success"], rows, "lrrrrr")


def transport_table(records: list[dict[str, Any]]) -> str:
    d = records[0]["results"]["transport"]
    rows = []
    for payload, before in d["before"].items():
        after = d["after"][payload]
        rows.append([f"{payload}, {before['rows_per_chunk']} rows/chunk",
                     _pair(before["ours"]["transitions_per_s"], after["ours"]["transitions_per_s"]),
                     _pair(before["ours"]["mb_per_s"], after["ours"]["mb_per_s"], "{:,.1f}"),
                     f"{before['pickle_lz4']['time_vs_ours']:.2f}× / {after['pickle_lz4']['time_vs_ours']:.2f}×"])
    return markdown_table(["payload", "ours transitions/s (before / after)", "ours MB/s (before / after)",
                           "ours vs pickle+lz4 (before / after)"], rows, "lrrr")


def suite_table(records: list[dict[str, Any]]) -> str:
    d = records[0]["results"]["suite"]
    before, after = d["before"], d["after"]
    return markdown_table(["", "tests", "wall"], [
        ["before", f"{before['passed']} passed, {before['skipped']} skipped", f"{before['wall_s']:.0f} s"],
        ["after", f"{after['passed']} passed, {after['skipped']} skipped",
         f"{after['wall_s']:.0f} s ({after['wall_s'] / before['wall_s']:.2f}×)"]], "lrr")


def fingerprint_table(records: list[dict[str, Any]]) -> str:
    """The demos' fingerprint before and after they became an extension (issue 51), and whether each part agrees."""
    d = records[0]["results"]["demos_fingerprint"]
    before, after = d["before"], d["after"]

    def losses(side: dict[str, Any]) -> str:
        return ", ".join(f"{step['critic_loss']:.4f}" for step in side["losses"])

    parts = [("demo rows", "demo_rows"), ("digest of the demo rows", "demo_rows_digest"),
             ("digest of the actor's weights", "actor_weights"), ("digest of torch's RNG after the build",
                                                                  "rng_after_build")]
    rows = [[label, str(before[key]), str(after[key]), "yes" if before[key] == after[key] else "**no**"]
            for label, key in parts]
    rows.append([f"critic loss, first {len(before['losses'])} updates", losses(before), losses(after),
                 "yes" if before["losses"] == after["losses"] else "**no**"])
    return markdown_table(["", "before", "after", "identical"], rows, "lllc")


def process_time_table(records: list[dict[str, Any]]) -> str:
    """Each benchmark process's wall and user CPU seconds, before and after, and the ratio of CPU seconds."""
    d = records[0]["results"]["process_time"]
    rows = [[f"`{name}`", _pair(t["before"]["wall_s"], t["after"]["wall_s"], "{:.0f}"),
             _pair(t["before"]["user_s"], t["after"]["user_s"], "{:.1f}"),
             f"{t['after']['user_s'] / t['before']['user_s']:.2f}×"] for name, t in d.items()]
    return markdown_table(["benchmark", "wall s (before / after)", "user CPU s (before / after)",
                           "CPU after / before"], rows, "lrrr")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--printouts", type=Path, default=RESULTS / "before_after")
    p.add_argument("--out", type=Path, default=RESULTS / "before_after" / "before_after.json")
    p.add_argument("--measured", default="2026-12-01, by before_after/run.sh (this file's date and machine are the "
                                         "parse's)", help="when and how the printouts were measured")
    a = p.parse_args()
    figures = collect(a.printouts)
    printouts = [a.printouts / f"{name}-{side}.txt" for name in figures["process_time"] for side in SIDES]
    results = {"printouts": sorted(str(f.resolve().relative_to(RESULTS)) for f in printouts),
               "measured": a.measured, **figures}
    print(f"wrote {write_result(a.out, 'before_after', a, results)}")


if __name__ == "__main__":
    main()
