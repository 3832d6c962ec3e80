"""Hints for a request that is already running, sent from outside it (``POST /v1/agentspec/hints``).

A speculator usually finishes its guess at the authority's next call *while* the authority is decoding that
call, too late for the request's ``agentspec_predicted_calls``.  The executor then posts the guess here, naming
the authority's request by its ``agentspec_request_id``; the request's ToolSpec decoder drafts it from its next
tree on (:mod:`agentspec.decoding.hint_drafter`), so the rest of a right guess is verified in a forward or two.
The guess may come from another model than the one that is decoding, so it travels as a call and is rendered
the way the target's tool grammar writes calls.  Like every hint, it changes how fast the answer comes, never
what it is.  A request that has ended (or never registered: it is not on a ToolSpec decoder) is not an error:
the answer says ``delivered: false``.

Ownership: one running request owns an ``agentspec_request_id`` across every served model
(:class:`HintTargets`); a second request naming an id in use is refused (409 ``request_id_in_use``), so hints go
only to the request that registered the id.  Bounds: a delivery holds at most
:data:`~agentspec.serve.protocol.MAX_HINTS` calls of bounded size, and a running request takes at most
:data:`~agentspec.decoding.drafter.MAX_BOX_HINTS` hints over its life (past that: 413 ``hints_too_large``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentspec.decoding.drafter import Hint, text_bytes
from agentspec.decoding.serving import RequestContext
from agentspec.engine.scheduler import Engine
from agentspec.serve.protocol import APIError, HintDelivery

__all__ = ["HintTarget", "HintTargets", "deliver_hints"]


@dataclass(frozen=True)
class HintTarget:
    """A running request that takes hints: the model serving it, its engine and its decoder context."""

    model: str
    engine: Engine
    context: RequestContext


class HintTargets:
    """The running requests that take hints, by ``agentspec_request_id``, across every served model.

    :meth:`claim` and :meth:`release` run on the server's event loop; :meth:`get` may run in any thread.
    """

    def __init__(self) -> None:
        self._running: dict[str, HintTarget] = {}

    def claim(self, request_id: str, target: HintTarget) -> None:
        """Register ``target`` under ``request_id``; a 409 :class:`APIError` when a running request owns it."""
        if request_id in self._running:
            raise APIError(
                409, f"agentspec_request_id {request_id!r} names a request that is still running; "
                "a running request's id must be unique (hints go to the request that owns it)",
                code="request_id_in_use", param="agentspec_request_id",
            )
        self._running[request_id] = target

    def release(self, request_id: str, target: HintTarget) -> None:
        """Drop ``request_id`` if ``target`` still owns it."""
        if self._running.get(request_id) is target:
            del self._running[request_id]

    def get(self, request_id: str) -> HintTarget | None:
        return self._running.get(request_id)


def deliver_hints(targets: HintTargets, delivery: HintDelivery) -> dict[str, Any]:
    """Put ``delivery``'s calls into the running request it names (blocking: the hints are indexed here, so run it
    in a worker thread, never in the event loop or an engine step)."""
    target = targets.get(delivery.request_id)
    if target is None:
        return {"delivered": False}
    texts = [(text, source) for _, text, source in delivery.hints()]
    box = target.context.hints
    # Checked before indexing (the costly part), so a delivery to a full box is refused at once; put_all checks
    # again, as another delivery may fill the box meanwhile.
    if not box.fits(len(texts), sum(text_bytes(text) for text, _ in texts)) \
            or not box.put_all([Hint.indexed(text, source) for text, source in texts]):
        count, size = box.size
        raise APIError(
            413, f"the request {delivery.request_id!r} holds {count} hints of {size} bytes; with these "
            f"{len(texts)} it would pass its limit of {box.max_hints} hints or {box.max_bytes} bytes",
            code="hints_too_large", param="predicted_calls",
        )
    target.engine.stats.hints_delivered += len(texts)
    return {"delivered": True, "model": target.model}
