"""Hints for a request that is already running, sent from outside it (``POST /v1/agentspec/hints``).

A speculator usually finishes its guess at the authority's next call *while* the authority is decoding that
call, too late for the request's ``agentspec_predicted_calls``.  The executor then posts the guess here, naming
the authority's request by its ``agentspec_request_id``; the request's ToolSpec decoder drafts it from its next
tree on (:mod:`agentspec.decoding.hint_drafter`), so the rest of a right guess is verified in a forward or two.
The guess may come from another model than the one that is decoding, so it travels as a call and is rendered
the way the target's tool grammar writes calls.  Like every hint, it changes how fast the answer comes, never
what it is.  A request that has ended (or never registered: it is not on a ToolSpec decoder) is not an error:
the answer says ``delivered: false``.
"""

from __future__ import annotations

from typing import Any

from agentspec.decoding.grammar import render_call
from agentspec.serve.engine import Engine
from agentspec.serve.protocol import HintDelivery

__all__ = ["deliver_hints"]


def deliver_hints(engines: dict[str, Engine], delivery: HintDelivery) -> dict[str, Any]:
    """Put ``delivery``'s calls into the running request it names, on whichever engine runs it."""
    for name, engine in engines.items():
        context = engine.contexts.get(delivery.request_id)
        if context is None:
            continue
        for call in delivery.predicted_calls:
            context.put_hint(render_call(call.name, call.arguments), f"hint.{call.source}")
        engine.stats.hints_delivered += len(delivery.predicted_calls)
        return {"delivered": True, "model": name}
    return {"delivered": False}
