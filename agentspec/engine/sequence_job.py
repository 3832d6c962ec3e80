"""The cache side shared by the engine's forward jobs: one key/value sequence and the tokens it holds.

A :class:`~agentspec.engine.scheduler.ForwardJob` (a chain verification, prompt
log-probabilities) runs on one :class:`~agentspec.engine.kv_cache.TargetSequence`:
it opens it over what the prefix cache found, prefills the tokens it computes
ahead a chunk at a time, and at the end hands ``covered`` and :meth:`layers`
back to the prefix cache.  :class:`SequenceJob` holds that state; a job adds
what it computes and reads.

    >>> job = PromptLogprobJob(lm, prompt=[1, 2, 3, 4, 5], top=0, prefill_chunk=2)  # ahead: [1, 2, 3, 4]
    >>> job.start((0, [])); job.prefill(); job.covered
    [1, 2]
    >>> job.prefill(); job.covered, job.prefilled
    ([1, 2, 3, 4], True)
"""

from __future__ import annotations

from typing import Any

from agentspec.engine.kv_cache import Reuse, TargetSequence
from agentspec.engine.model import LocalModel

__all__ = ["SequenceJob"]


class SequenceJob:
    """A forward job's sequence: ``ahead`` (the tokens prefilled before its run) and those of them computed.

    Subclasses give ``lookup_tokens``, ``runs_model``, ``prefilled``, ``start`` (through :meth:`_open`),
    ``prefill`` (through :meth:`_next_chunk`) and ``run``.
    """

    def __init__(self, lm: LocalModel, ahead: list[int], *, prefill_chunk: int) -> None:
        self.lm = lm
        self.ahead = ahead
        self.chunk = prefill_chunk
        self.seq: TargetSequence | None = None
        self._covered: list[int] = []

    @property
    def covered(self) -> list[int]:
        """The tokens whose key/values ``seq`` holds (what goes back into the prefix cache)."""
        return list(self._covered)

    def layers(self) -> list[tuple[Any, Any]]:
        return self.seq.layers() if self.seq is not None else []

    @property
    def _remaining(self) -> int:
        """Tokens of ``ahead`` not computed yet."""
        return len(self.ahead) - len(self._covered)

    def _open(self, reuse: Reuse) -> int:
        """Open ``seq`` over the cached prefix of ``ahead`` that ``reuse`` holds; how many tokens it reuses."""
        cached = min(reuse[0], len(self.ahead))
        self.seq = TargetSequence(self.lm, (cached, reuse[1]))
        self._covered = self.ahead[:cached]
        return cached

    def _next_chunk(self) -> list[int]:
        """The next up to ``chunk`` tokens of ``ahead`` to compute (the caller covers them once computed)."""
        start = len(self._covered)
        return self.ahead[start: start + self.chunk]
