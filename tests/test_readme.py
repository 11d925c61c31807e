"""The README's two commands are what CI runs and what users copy."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def test_readme_starts_with_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("```bash") < 40, "the commands come first"
    cmds = _readme_commands()
    assert len(cmds) == 2
    assert cmds[0].endswith("robot-rl train") and "torch==2.13.0" in cmds[0]
    assert "pytest" in cmds[1] and "torch==2.13.0" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci.splitlines()


def test_readme_links_resolve():
    import re

    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
