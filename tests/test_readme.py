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


def test_the_fresh_machine_check_hides_every_system_package_the_install_script_installs():
    import re

    scripts = ROOT / "scripts"
    installs = set()
    for line in (scripts / "install-system-deps.sh").read_text().splitlines():
        if "apt-get install" in line:
            words = line.split("apt-get install", 1)[1].split(">", 1)[0].split()
            installs |= {w for w in words if not w.startswith("-") and w != "bookworm-backports"}
    hidden = re.search(r"^PACKAGES=\(([^)]*)\)", (scripts / "without-system-deps.sh").read_text(), re.M)
    assert hidden is not None
    assert installs and installs == set(hidden.group(1).split())
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("without-system-deps.sh") < ci.index("install-system-deps.sh")


def test_bare_robot_rl_commands_come_after_saying_to_activate_the_venv():
    """The first command runs `.venv/bin/robot-rl`; a later block's bare `robot-rl` needs the venv active."""
    import re

    text = (ROOT / "README.md").read_text()
    first_block_end = text.index("```", text.index("```bash") + 3)
    for block in re.finditer(r"^```bash\n(.*?)^```", text, re.M | re.S):
        if block.start() < first_block_end:
            continue
        if any(line.startswith("robot-rl ") for line in block.group(1).splitlines()):
            said = text[first_block_end:block.start()]
            assert ". .venv/bin/activate" in said, f"activate the venv before the block at offset {block.start()}"
