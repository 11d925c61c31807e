"""The docs site (mkdocs.yml): figures on the index, no page left out of the nav, an API page for every contract.

The full ``mkdocs build --strict`` (about 30 s here, most of it rendering the API reference) runs in ``.ci/run``;
the test below builds a two-page site through the link hook instead, to prove the hook keeps links validated.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:``); their values do not matter here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _config() -> dict[str, Any]:
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)  # a SafeLoader subclass


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def test_the_index_shows_at_least_four_figures_that_exist():
    images = _IMAGE.findall((DOCS / "index.md").read_text())
    missing = [i for i in images if not (DOCS / i).resolve().is_file()]
    assert not missing, f"docs/index.md embeds missing images: {missing}"
    assert len(images) >= 4, images


def test_the_index_shows_the_readme_commands():
    readme = (ROOT / "README.md").read_text().split("```bash", 1)[1].split("```", 1)[0].strip()
    assert readme in (DOCS / "index.md").read_text()


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = _nav_pages(_config()["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts}
    assert not pages - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(pages - set(nav))}"
    # repo/<path> entries are repository files served by docs/hooks/repo_files.py.
    absent = [p for p in nav if not (DOCS / p).is_file() and not (p.startswith("repo/") and (ROOT / p[5:]).is_file())]
    assert not absent, f"nav entries with no file: {absent}"


def _is_contract(node: ast.ClassDef) -> bool:
    bases = {ast.unparse(b) for b in node.bases}
    return node.name.endswith("Config") or bool(bases & {"Protocol", "ABC", "abc.ABC"}) or any(
        b.startswith("Protocol[") for b in bases)


def test_every_module_with_a_protocol_or_config_class_has_an_api_page():
    rendered = set()
    for page in (DOCS / "api").glob("*.md"):
        rendered |= set(re.findall(r"^::: ([\w.]+)", page.read_text(), re.MULTILINE))
    missing = []
    for path in sorted((ROOT / "robot_rl").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module.startswith("robot_rl.cli"):  # the command line is documented by --help, not as an API
            continue
        tree = ast.parse(path.read_text())
        contracts = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and _is_contract(n)]
        if contracts and not any(module == r or module.startswith(r + ".") for r in rendered):
            missing.append(f"{module} ({', '.join(contracts)})")
    assert not missing, ("add `::: <module>` to a page in docs/api/ for: " + "; ".join(missing))


@pytest.mark.integration  # runs `mkdocs build` in a subprocess
def test_the_link_hook_serves_files_outside_docs_and_still_fails_on_a_broken_link(tmp_path):
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("needs mkdocs: pip install -e '.[docs]'")
    (tmp_path / "docs").mkdir()
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "run.py").write_text("print('hi')\n")
    (tmp_path / "mkdocs.yml").write_text(textwrap.dedent(f"""\
        site_name: t
        hooks: [{DOCS / 'hooks' / 'repo_files.py'}]
        nav: [index.md]
        """))
    page = tmp_path / "docs" / "index.md"

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                               str(tmp_path / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                              capture_output=True, text=True, timeout=120)

    page.write_text("# t\n\n[the example](../examples/run.py)\n")
    ok = build()
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "site" / "repo" / "examples" / "run.py").is_file()
    assert 'href="repo/examples/run.py"' in (tmp_path / "site" / "index.html").read_text()
    page.write_text("# t\n\n[gone](../examples/missing.py)\n")
    broken = build()
    assert broken.returncode != 0 and "examples/missing.py" in broken.stderr, broken.stderr
