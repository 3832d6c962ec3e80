"""Late hints: the speculator's next call, handed to an authority decision that is already running.

A decision that starts after the speculator's guess gets the guess with its request
(:class:`~agentspec.runtime.policies.protocol.PredictedHistory`).  One already running missed that; if its policy still
takes hints (:class:`~agentspec.runtime.policies.protocol.TakesHints`, ``agentspec serve --decoder toolspec``), its decoder
drafts the call from its next forward.  A hint changes the authority's speed, never its output.
"""

from __future__ import annotations

import anyio.abc

from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.runtime.policies.protocol import Policy, TakesHints
from agentspec.types import ToolCall


class LateHints:
    """Sends predicted calls into the authority's running decision, counted in ``metrics``."""

    def __init__(self, authority: Policy, metrics: ExecutionMetrics) -> None:
        self.authority, self.metrics = authority, metrics

    def offer(self, call: ToolCall, steps: int, group: anyio.abc.TaskGroup) -> None:
        """Hand ``call``, predicted after ``steps`` committed steps, to the decision of it if that is running.
        Decided now, sent in the background (``group``): a decision that starts later gets it with its request."""
        authority = self.authority
        if not isinstance(authority, TakesHints) or not authority.deciding(steps):
            return
        self.metrics.observe_late_hint()

        async def send() -> None:
            self.metrics.observe_hint_delivered(await authority.hint([call], steps))

        group.start_soon(send)
