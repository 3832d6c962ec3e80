"""What a speculator predicts: a normalised call (the miner's normaliser), and how it becomes a concrete call.

A target is a call whose task-specific values (ids, amounts, phone numbers: the value patterns) are slots, and
whose other values are constants it always has::

    >>> from agentspec.normalize import Normalizer
    >>> target = Target.of(Normalizer(), ToolCall(name="pay", arguments={"bill": "B1234", "method": "card"}))
    >>> target.name, target.slots
    ('pay', ('bill',))
    >>> target.key
    'pay({"bill":{"$slot":"id"},"method":"card"})'

The end of a task is the target :data:`END`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentspec.normalize import Normalizer
from agentspec.types import ToolCall, canonical_json

END = "<end>"
"""The target "the task is over": no further call."""


def _has_slot(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"$slot"} or any(_has_slot(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_slot(v) for v in value)
    return False


class Target(BaseModel):
    """A normalised call: its tool, its argument template, and which top-level arguments hold a slot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, normalizer: Normalizer, call: ToolCall) -> Target:
        """The target ``call`` is an instance of."""
        step = normalizer.node(call).steps[0]
        return cls(name=step.name, arguments=step.arguments)

    @property
    def key(self) -> str:
        """The target's canonical text: equal for equal targets."""
        return f"{self.name}({canonical_json(self.arguments)})"

    @property
    def slots(self) -> tuple[str, ...]:
        """The top-level arguments whose value comes from a source (they hold a task-specific value)."""
        return tuple(sorted(name for name, value in self.arguments.items() if _has_slot(value)))


def target_key(normalizer: Normalizer, call: ToolCall | None) -> str:
    """The key of ``call``'s target (:data:`END` for None)."""
    return END if call is None else Target.of(normalizer, call).key
