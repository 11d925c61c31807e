"""Griffe extension for the API reference: Sphinx roles in docstrings render as code, not as literal markup.

The package's docstrings name other objects the Sphinx way (``:class:`SpecMismatchError```,
``:meth:`~Learner.ingest```); mkdocstrings renders Markdown, where the role would show as written. This turns
each role into a code span (the ``~`` form keeps the last name only, as Sphinx shows it). The source stays as
it is, so ``help()`` and IDEs show the same text as before.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _code(m: re.Match[str]) -> str:
    name = m.group(2)
    return f"`{name.rsplit('.', 1)[-1] if m.group(1) else name}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`target``` to a code span in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Walk the whole package once it is loaded."""
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
            stack += [m for m in obj.members.values() if not m.is_alias]
