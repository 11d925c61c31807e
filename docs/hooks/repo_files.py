"""MkDocs hook: links from docs/ to repository files outside it work in the site as they do on GitHub.

A page may link ``../examples/custom_task.py`` or embed ``../benchmarks/results/hil_learning.png``; on GitHub
the relative path resolves in the repository, but MkDocs serves only ``docs/``. This hook

- follows every relative link of the docs pages (and, transitively, of the Markdown files they reach) to files
  outside ``docs/`` and adds each one to the site as ``repo/<its path in the repository>``: Markdown files
  become pages (``benchmarks/RESULTS_hil.md`` is rendered, its plots shown), anything else is copied as is,
  and a linked folder gets a generated page listing its files;
- rewrites those links before MkDocs resolves them, so MkDocs still validates every one: a link to a file
  that does not exist is left as written, and ``mkdocs build --strict`` fails on it.

The Markdown files themselves are never edited: the same relative links keep working on GitHub.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

PREFIX = "repo"  # where files from outside docs/ appear in the site

# An inline link or image target: `](target)` or `](target "title")`; a reference definition: `[id]: target`.
_INLINE = re.compile(r"(\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
_REFDEF = re.compile(r"^( {0,3}\[[^\]]+\]:\s*<?)(\S+?)(>?(?:\s.*)?)$", re.MULTILINE)
# Fenced code blocks and inline code spans are left alone.
_CODE = re.compile(r"^( {0,3})(```+|~~~+).*?^\1\2[ \t]*$|`+[^`\n]*`+", re.MULTILINE | re.DOTALL)

_included: dict[Path, str] = {}  # repository file or folder -> its src_uri in the site
_listings: dict[str, str] = {}  # src_uri of a generated folder page -> its Markdown


def _roots(config: MkDocsConfig) -> tuple[Path, Path]:
    docs = Path(config.docs_dir).resolve()
    return docs, Path(config.config_file_path).resolve().parent


def _outside_code(text: str) -> list[tuple[int, int]]:
    """The (start, end) spans of ``text`` that are not code."""
    spans, pos = [], 0
    for m in _CODE.finditer(text):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(text)))
    return spans


def _targets(text: str) -> list[str]:
    found = []
    for start, end in _outside_code(text):
        chunk = text[start:end]
        found += [m.group(2) for m in _INLINE.finditer(chunk)] + [m.group(2) for m in _REFDEF.finditer(chunk)]
    return found


def _local_path(target: str) -> str | None:
    """The path part of a relative link, or None for a URL, an absolute path or an anchor alone."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path or parts.path.startswith("/"):
        return None
    return unquote(parts.path)


def _source_path(src_uri: str, docs: Path, root: Path) -> Path:
    """Where a page's Markdown lives on disk (a mirrored repository file or a docs page)."""
    if src_uri.startswith(PREFIX + "/"):
        return root / src_uri[len(PREFIX) + 1:]
    return docs / src_uri


def _listing(folder: Path, root: Path) -> str:
    rel = folder.relative_to(root).as_posix()
    lines = [f"# `{rel}/`", "", "The files in this folder of the repository:", ""]
    for child in sorted(folder.iterdir()):
        if child.is_file():
            lines.append(f"- [{child.name}]({child.name})")
        elif child.is_dir() and not child.name.startswith((".", "__")):
            lines.append(f"- `{child.name}/`")
    return "\n".join(lines) + "\n"


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    """Add every repository file that the docs reach by relative links, under ``repo/``."""
    docs, root = _roots(config)
    _included.clear()
    _listings.clear()
    queue = [Path(f.abs_src_path).resolve() for f in files.documentation_pages() if f.abs_src_path]
    seen: set[Path] = set()
    while queue:
        page = queue.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in _targets(page.read_text(encoding="utf-8")):
            path = _local_path(target)
            if path is None:
                continue
            dest = (page.parent / path).resolve()
            if dest.is_relative_to(docs) or not dest.is_relative_to(root) or not dest.exists():
                continue  # docs/ is MkDocs' own; a missing file stays a broken link for MkDocs to report
            if dest in _included:
                continue
            uri = f"{PREFIX}/{dest.relative_to(root).as_posix()}"
            if dest.is_dir():
                uri += "/index.md"
                _listings[uri] = _listing(dest, root)
                files.append(File.generated(config, uri, content=_listings[uri]))
                for child in sorted(dest.iterdir()):
                    if child.is_file() and child.resolve() not in _included:
                        child_uri = f"{PREFIX}/{child.resolve().relative_to(root).as_posix()}"
                        _included[child.resolve()] = child_uri
                        files.append(File.generated(config, child_uri, abs_src_path=str(child)))
                _included[dest] = uri
                continue
            _included[dest] = uri
            files.append(File.generated(config, uri, abs_src_path=str(dest)))
            if dest.suffix == ".md":
                queue.append(dest)
    return files


def _site_uri(dest: Path, docs: Path) -> str | None:
    if dest.is_relative_to(docs):
        return dest.relative_to(docs).as_posix()
    return _included.get(dest)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point each link that leaves docs/ (or leaves a mirrored file's folder) at the file's place in the site."""
    docs, root = _roots(config)
    if page.file.src_uri in _listings:
        return markdown
    here = _source_path(page.file.src_uri, docs, root).parent
    page_dir = posixpath.dirname(page.file.src_uri)

    def fix(m: re.Match[str]) -> str:
        target = m.group(2)
        path = _local_path(target)
        if path is None:
            return m.group(0)
        site = _site_uri((here / path).resolve(), docs)
        if site is None:
            return m.group(0)
        anchor = target[target.index("#"):] if "#" in target else ""
        new = posixpath.relpath(site, page_dir or ".") + anchor
        return m.group(1) + new + m.group(3)

    out, pos = [], 0
    for start, end in _outside_code(markdown):
        out.append(markdown[pos:start])
        out.append(_REFDEF.sub(fix, _INLINE.sub(fix, markdown[start:end])))
        pos = end
    return "".join(out)
