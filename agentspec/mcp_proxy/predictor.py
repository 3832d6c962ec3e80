"""The proxy's speculator: agentspec's learned speculator, fitted online on the session's own calls.

After each client call the speculator is re-learned from the latest ``window`` calls (an
:class:`~agentspec.learned_speculator.online.OnlineLearner` over a copy of the base, so nothing is counted twice), and a
:class:`~agentspec.learned_speculator.policy.LearnedSpeculator` guesses the next calls among the tools the proxy may
pre-execute.  The base is a file of ``agentspec speculator fit`` (``--speculator``), or an empty speculator whose
value patterns make every argument a slot (a string or a number): a session has no task text and no bench's id formats, and with
slots, "read the file just written" is one target learned from any file, not one per path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio

from agentspec.learned_speculator.artifact import Artifact, load
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.trajectories import Step
from agentspec.normalize import KEY_TYPE
from agentspec.types import ToolCall

#: The value patterns of the speculator the proxy starts from without a file: any string or number argument is a slot
#: named after its argument (``path``, ``repo_path``...).
SESSION_VALUE_PATTERNS: list[tuple[str, str, str | None]] = [(KEY_TYPE, r"(?s).+", r".")]
#: The task id the session's calls are learned under (a session is one task with no text).
SESSION = "mcp-proxy-session"


def base_artifact(path: Path | None) -> Artifact:
    """The speculator the session's learning starts from: ``path``'s (a ConfigError line if it is not one), else
    an empty one with :data:`SESSION_VALUE_PATTERNS`."""
    if path is not None:
        return load(path)
    return Artifact(model=SpeculatorModel(value_patterns=SESSION_VALUE_PATTERNS))


class OnlinePredictor:
    """Guesses the session's next calls among ``tools`` (the ones the proxy may pre-execute)."""

    def __init__(self, base: Artifact, tools: frozenset[str], *, width: int, window: int) -> None:
        self.base = base
        self.tools = tools
        self.width = width
        self.window = window

    def learned(self, history: Sequence[Step]) -> OnlineLearner:
        """A learner over the base that has learned the latest ``window`` calls of ``history``."""
        learner = OnlineLearner(self.base)
        if history:
            learner.learn(SESSION, "", list(history[-self.window:]))
        return learner

    async def guesses(self, history: Sequence[Step]) -> list[ToolCall]:
        """Up to ``width`` calls the client may make next, best first.  The learning runs in a worker thread (a
        few milliseconds of counting, which the event loop forwarding calls should not wait for)."""
        if not self.tools:
            return []
        window = list(history[-self.window:])
        learner = await anyio.to_thread.run_sync(self.learned, window)
        speculator = LearnedSpeculator(learner.model, text="", width=self.width, tools=self.tools)
        return [guess.call for guess in await speculator.guesses(window) if guess.call is not None]
