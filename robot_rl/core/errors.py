"""What a user's mistake is, as a type: the command line prints it as one line, anything else is a bug.

`robot-rl` exits 2 with ``robot-rl: error: <message>`` for a :class:`UserError` (and for a missing file or a
deadline, :class:`FileNotFoundError` / :class:`TimeoutError`); any other exception keeps its traceback, a
``ValueError`` from deep inside the library included. Library code that rejects what the user gave raises
:class:`~robot_rl.core.config.ConfigError` (a ``ValueError`` and a ``UserError``), or its own error class with
``UserError`` among its bases, so that ``except ValueError`` callers keep working.
"""

from __future__ import annotations


class UserError(Exception):
    """The user's input is wrong (a key, an option, a name, a file or the data it holds); the message says what to do.

    A marker base: domain errors inherit it beside their builtin base (``class StoreError(RuntimeError,
    UserError)``), and a third-party extension's errors can too.
    """
