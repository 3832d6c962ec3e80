"""Progress lines on stderr for the commands that work a while before their one result line (``mine``,
``speculator fit``, ``bench setup``): ``COMMAND: what it is doing``, silenced by ``--no-progress``.

stdout stays the result alone, so ``agentspec mine ... | tail -1`` reads the same with or without them.
"""

from __future__ import annotations

import sys


class Progress:
    """Writes ``COMMAND: text`` lines to stderr, flushed at once (a person is waiting on them), unless disabled."""

    def __init__(self, command: str, *, enabled: bool = True) -> None:
        self.command = command
        self.enabled = enabled

    def __call__(self, text: str) -> None:
        """Say ``text``, one line."""
        if self.enabled:
            print(f"{self.command}: {text}", file=sys.stderr, flush=True)
