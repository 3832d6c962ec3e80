"""Resuming a logged task: the state its committed steps left, given back (restored from a checkpoint, or run again
on a fresh environment and checked against the log), and what to do with a call the stopped run started and never
confirmed where the world outside keeps its effects.

Kept apart from the journal (:mod:`agentspec.runtime.journal`), which adopts the steps: these checks refuse a resume
that would lose an effect or apply one twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from agentspec.errors import ConfigError
from agentspec.runtime.conversation import SAY
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.snapshot import Checkpointable, ResumeBy, SnapshotBackend, resume_by
from agentspec.types import Effect, Observation, Requestor, Step, ToolCall

Uncertain = Literal["stop", "retry", "skip"]
"""What a resume does with a call the stopped run started and never confirmed, where its effect may have happened
(``--resume-retry-uncertain``, ``--resume-skip-uncertain``; stop by default)."""


def restore_state(backend: SnapshotBackend, task_id: str, resumed: TaskLog) -> ResumeBy:
    """Give ``backend`` the state ``resumed``'s steps left where a checkpoint holds it; how this backend resumes
    (:data:`~agentspec.snapshot.ResumeBy`).  :class:`ConfigError` when the log's checkpoint is not trusted data or
    cannot be restored here, or when steps were logged without one on a backend that resumes only from one."""
    kind = resume_by(backend)
    if resumed.checkpoint is not None:
        if kind != "checkpoint":
            raise ConfigError(f"task {task_id!r}: the log holds a checkpoint this backend cannot restore")
        assert isinstance(backend, Checkpointable)
        backend.restore_checkpoint(resumed.checkpoint)
    elif resumed.steps and kind == "checkpoint":
        raise ConfigError(
            f"task {task_id!r}: the log holds {len(resumed.steps)} committed steps but no checkpoint of the "
            "state they left (this environment's state cannot be serialised), so resuming would lose their effects"
        )
    return kind


def not_done(backend: SnapshotBackend, task_id: str, resumed: TaskLog,
             uncertain: Uncertain) -> tuple[ToolCall, Observation] | None:
    """The world outside: the call the stopped run started and never confirmed, with the error observation that
    records it as not done (``skip``); None when there is nothing to record (none, read-only or idempotent, or
    ``retry``); :class:`ConfigError` naming the call for ``stop``."""
    for intent in resumed.uncertain[:1]:  # only the next step's: a later one was never reached
        call = ToolCall.model_validate(intent["call"])
        if backend.effect(call.name) in (Effect.READ_ONLY, Effect.IDEMPOTENT) or uncertain == "retry":
            continue
        if uncertain == "stop":
            arguments = json.dumps(call.arguments, sort_keys=True)[:200]
            raise ConfigError(
                f"task {task_id!r}: the stopped run started {call.name}({arguments}) (step {intent['step']}) "
                "and never confirmed it, and this environment keeps its effects: it may or may not have happened. "
                "Check, then resume with --resume-retry-uncertain (run it again) or --resume-skip-uncertain "
                "(record it as not done)")
        return call, Observation(call_id=call.id, name=call.name, error=True, content=(
            "Error: not done: the run stopped before this call's result, and it was resumed without running it "
            "again (--resume-skip-uncertain)"))
    return None


async def replay_steps(backend: SnapshotBackend, task_id: str, steps: list[Step]) -> None:
    """Run ``steps``' calls again on a fresh environment, the agent's and its user's, in order, each checked against
    its logged answer (:class:`ConfigError` where one differs: the environment does not replay deterministically).
    Read-only calls change nothing, so they are not run."""
    for step in steps:
        if step.source == "invalid":
            continue  # never executed: unusable model output
        for call, requestor, logged in _effects(step):
            if backend.effect(call.name) is Effect.READ_ONLY:
                continue
            got = await backend.execute(call, requestor)
            if logged is not None and _parsed(got.content) != _parsed(logged.content):
                raise ConfigError(
                    f"task {task_id!r}: resuming ran step {step.index} ({call.name}) again on a fresh "
                    f"environment and it answered {got.content[:200]!r}, where the log has "
                    f"{logged.content[:200]!r}: this environment does not replay its steps the same way; "
                    "start afresh with --overwrite")


def _effects(step: Step) -> Iterator[tuple[ToolCall, Requestor, Observation | None]]:
    """The calls a committed step made on the environment, with who made them and their logged answers: the call
    itself, or for a message to the user, the user's calls in its turn."""
    if step.call.name != SAY:
        yield step.call, step.observation.requestor, step.observation
        return
    answers = {m.tool_call_id: m for m in step.observation.turn if m.role == "tool"}
    for message in step.observation.turn:
        for call in message.tool_calls:
            answer = answers.get(call.id)
            logged = Observation(call_id=call.id, name=call.name, content=answer.content or "") if answer else None
            yield call, "user", logged


def _parsed(content: str) -> Any:
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        return content
