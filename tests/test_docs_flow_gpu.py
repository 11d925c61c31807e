"""docs/flow-vla.md's GPU block for `lang_push`: both commands resolve as typed, with the measured settings.

Running them needs a CUDA GPU and minutes; `robot-rl config VERB …` resolves options, overrides and registries
without training, so a renamed key or option breaks this test, not a reader's run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robot_rl.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "flow-vla.md"


def _commands() -> list[str]:
    block = re.search(r"<!-- gpu-lang-push -->\n```bash\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/flow-vla.md lost its gpu-lang-push block"
    return [line for line in block.group(1).splitlines() if line.startswith("robot-rl ")]


def test_the_gpu_lang_push_commands_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    sft, train = _commands()
    for cmd in (sft, train):
        assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    out = capsys.readouterr().out
    # The benchmark's settings (benchmarks/RESULTS_flow.md, "On a GPU"): 1,024 sub-envs, 4 of 8 steps executed,
    # rollout 4, on cuda, from the SFT run the first command writes.
    for key, value in (("task.num_envs", "1024"), ("task.execute_steps", "4"), ("algo.rollout_length", "4"),
                       ("run.device", "'cuda'"), ("algo.init_from", "'runs/flow-sft-push'"),
                       ("sft.steps", "1500"), ("sft.device", "'cuda'")):
        assert re.search(rf"│ {re.escape(key)} +│ {re.escape(value)} ", out), key
    assert "--out runs/flow-sft-push" in sft and "--task lang_push" in sft
