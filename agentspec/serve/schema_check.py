"""Whether a tool's parameter schema has any finite value: an unsatisfiable one is a 400, not a stuck grammar.

A schema whose required properties refer back to themselves without a way out
(``A`` requires ``b``, and ``b`` is an ``A``) has no finite JSON value.  The
tool grammar built from it never lets a call end: llguidance gives up at its
item limit in the middle of a generation.  :func:`unsatisfiable` finds such
schemas before any model work (a least fixpoint over local ``$ref``s)::

    >>> loop = {"type": "object", "properties": {"b": {"$ref": "#"}}, "required": ["b"]}
    >>> unsatisfiable(loop)
    "its required values refer back to '#' without end: no finite value matches"
    >>> unsatisfiable({**loop, "required": []}) is None
    True

It answers "unsatisfiable" only when sure: keywords it does not model
(``patternProperties``, ``not``, remote ``$ref``s) count as satisfiable, and
so does a schema too large to check within a small budget.  A schema nested
past :data:`MAX_DEPTH` levels (objects and arrays, or subschemas and
``$ref``s as they expand) raises :class:`TooDeep` (a 400, where recursing
through it would overflow the stack: a 500)::

    >>> deep = {"type": "object"}
    >>> for _ in range(MAX_DEPTH):
    ...     deep = {"allOf": [deep]}
    >>> check_depth(deep)
    Traceback (most recent call last):
    ...
    agentspec.serve.schema_check.TooDeep: more than 200 levels of objects and arrays
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_DEPTH", "TooDeep", "check_depth", "unsatisfiable"]

_BUDGET = 20_000
"""Subschemas visited at most (shared refs are visited again per path; past this the schema counts as fine)."""

MAX_DEPTH = 200
"""Levels a tool's parameter schema may nest (far past any real tool's; llguidance refuses fewer already).
Checking and compiling a schema recurse once per level, so the cap keeps them within Python's stack."""

_SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})


class _OverBudget(Exception):
    pass


class TooDeep(ValueError):
    """A schema nested past :data:`MAX_DEPTH` levels; the message says of what."""


def check_depth(schema: Any) -> None:
    """Raise :class:`TooDeep` when ``schema``'s JSON nests more than :data:`MAX_DEPTH` objects and arrays.

    Iterative, so it cannot overflow the stack itself; run it before anything that recurses through the schema.
    """
    pending: list[tuple[Any, int]] = [(schema, 0)]
    while pending:
        node, depth = pending.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise TooDeep(f"more than {MAX_DEPTH} levels of objects and arrays")
        children = node.values() if isinstance(node, dict) else node
        pending.extend((child, depth + 1) for child in children)


def unsatisfiable(schema: Any) -> str | None:
    """Why no finite JSON value matches ``schema`` (one line), or None when one may.

    Raises :class:`TooDeep` when its subschemas and ``$ref``s expand past :data:`MAX_DEPTH` levels.
    """
    checker = _Checker(schema)
    try:
        if checker.satisfiable(schema, ()):
            return None
    except _OverBudget:
        return None
    except RecursionError:  # a deep caller's stack may run out before the cap: the same answer
        raise TooDeep(f"more than {MAX_DEPTH} levels of subschemas and $refs") from None
    where = f"refer back to {checker.cycle!r} without end" if checker.cycle else "cannot all be given"
    return f"its required values {where}: no finite value matches"


class _Checker:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.visited = 0
        self.depth = 0
        self.cycle: str | None = None
        """A ``$ref`` found inside its own required value (for the message)."""

    def satisfiable(self, schema: Any, refs: tuple[str, ...]) -> bool:
        """Whether some finite value matches ``schema``; ``refs`` are the ``$ref``s being expanded above it."""
        self.visited += 1
        if self.visited > _BUDGET:
            raise _OverBudget
        if self.depth >= MAX_DEPTH:  # a chain of $refs nests without nesting the JSON: check_depth misses it
            raise TooDeep(f"more than {MAX_DEPTH} levels of subschemas and $refs")
        self.depth += 1
        try:
            return self._satisfiable(schema, refs)
        finally:
            self.depth -= 1

    def _satisfiable(self, schema: Any, refs: tuple[str, ...]) -> bool:
        if schema is False:
            return False
        if not isinstance(schema, dict):
            return True
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in refs:  # a value of this schema would have to contain itself: no finite one along this path
                self.cycle = self.cycle or ref
                return False
            target = self._resolve(ref)
            if target is not None and not self.satisfiable(target, (*refs, ref)):
                return False
        if not all(self.satisfiable(part, refs) for part in _list(schema.get("allOf"))):
            return False
        for key in ("anyOf", "oneOf"):  # oneOf as anyOf: exclusivity is not modelled (errs towards "fine")
            options = _list(schema.get(key))
            if key in schema and not any(self.satisfiable(option, refs) for option in options):
                return False
        if "const" in schema:
            return True
        if "enum" in schema:
            return bool(_list(schema["enum"]))
        kinds = schema.get("type")
        kinds = {kinds} if isinstance(kinds, str) else set(kinds) if isinstance(kinds, list) else None
        if kinds is None or kinds & _SCALARS or not kinds & {"object", "array"}:
            return True
        return ("object" in kinds and self._object(schema, refs)) or ("array" in kinds and self._array(schema, refs))

    def _object(self, schema: dict[str, Any], refs: tuple[str, ...]) -> bool:
        if "patternProperties" in schema:
            return True
        given = schema.get("properties")
        properties = given if isinstance(given, dict) else {}
        extra = schema.get("additionalProperties", True)
        return all(self.satisfiable(properties.get(name, extra), refs) for name in _list(schema.get("required")))

    def _array(self, schema: dict[str, Any], refs: tuple[str, ...]) -> bool:
        needed = schema.get("minItems", 0)
        if not isinstance(needed, int) or needed <= 0:
            return True
        prefix = _list(schema.get("prefixItems"))
        items = schema.get("items", True)
        if isinstance(items, list):  # draft-07 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        firsts = prefix[:needed]
        return all(self.satisfiable(part, refs) for part in firsts) and (
            needed <= len(prefix) or self.satisfiable(items, refs))

    def _resolve(self, ref: str) -> Any:
        """The subschema a local ``$ref`` (``#`` or ``#/a/b``) points to; None when it is not one."""
        if ref == "#":
            return self.root
        if not ref.startswith("#/"):
            return None
        node = self.root
        for raw in ref[2:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
