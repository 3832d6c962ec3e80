"""The one declared table of AppWorld API effects.

AppWorld marks no API read-only, so agentspec derives each effect from the API docs, by one rule: an API is
``read_only`` iff it is an HTTP ``GET`` and its name starts with a reading verb (``show_``, ``search_``, ``get_``,
``list_``); everything else, and anything unknown, is ``mutating`` (fail closed).  A login is a ``POST`` (it writes
``last_logged_in``), so it is mutating, as is ``supervisor.complete_task``.

    >>> api_effect("spotify", "show_song", "GET")
    <Effect.READ_ONLY: 'read_only'>
    >>> api_effect("simple_note", "create_note", "POST")
    <Effect.MUTATING: 'mutating'>
"""

from __future__ import annotations

from agentspec.types import Effect

READ_PREFIXES = ("show_", "search_", "get_", "list_")
"""API-name prefixes of reading APIs (with method GET)."""
OVERRIDES: dict[tuple[str, str], Effect] = {}
"""(app, api) -> effect, where the rule above is wrong for an API (none known so far)."""


def api_effect(app: str, api: str, method: str | None) -> Effect:
    """The effect of ``apis.<app>.<api>`` served with HTTP ``method`` (None: unknown, so mutating)."""
    if (app, api) in OVERRIDES:
        return OVERRIDES[(app, api)]
    if method is not None and method.upper() == "GET" and api.startswith(READ_PREFIXES):
        return Effect.READ_ONLY
    return Effect.MUTATING
