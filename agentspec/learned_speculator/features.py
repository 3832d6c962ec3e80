"""What a learned speculator conditions on, as plain string features.

Everything is derived from the task text, the calls made so far (normalised, see :mod:`.targets`) and the
observations they got, so the same code serves any bench::

    >>> sorted(text_words("Unable to send MMS abroad."))[:4]
    ['abroad', 'mms', 'mms abroad', 'send']
    >>> result_segments('Wi-Fi Radio: OFF | Wi-Fi Connected: No')
    ['wi-fi connected=no', 'wi-fi radio=off']
    >>> result_segments('{"status": "Active", "lines": [{"ok": true}]}')
    ['lines.0.ok=true', 'status=active']

Feature families (prefix, then the value): ``w:`` a word or word pair of the task text, ``last:`` /
``last2:`` the last / second-to-last normalised call, ``made:`` a normalised call made earlier, ``pos:`` how
many calls were made (capped), ``res:`` a field of the last observation, ``la:`` a field of a look-ahead
call's observation (``la:PROBE|FIELD``); ``match:`` / ``open:`` / ``used:`` where the task text's values and
the lists of ids read stand in the history (:func:`flow_features`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agentspec.types import Observation, ToolCall, canonical_json

_WORD = re.compile(r"[a-z][a-z0-9_'-]*[a-z0-9]|[a-z]")
_SEGMENT = re.compile(r"\s*(?:\n|\|)\s*")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
MAX_SEGMENT = 80
"""Longer observation fragments are cut: a field's value is what predicts, not a paragraph."""
MAX_POSITION = 12
STOP = frozenset({"the", "a", "an", "and", "or", "of", "to", "in", "on", "is", "are", "be", "for", "with", "it",
                  "as", "at", "by", "this", "that", "their", "they", "them", "has", "have", "been", "will", "when"})


def text_words(text: str) -> frozenset[str]:
    """The words of ``text`` (lower case, no stop words) and its pairs of adjacent words."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP]
    return frozenset([*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))])


def _flatten(value: Any, path: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flatten(value[key], f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flatten(item, f"{path}.{index}" if path else str(index), out)
    else:
        out.append((path, value))


def json_leaves(content: str) -> list[tuple[str, Any]] | None:
    """``(path, value)`` for every leaf of a JSON observation (paths like ``lines.0.id``); None if not JSON.
    Remembered per content (the same observations come back step after step): the list is shared, not to be
    changed."""
    return _leaves(content)


@lru_cache(maxsize=1024)
def _leaves(content: str) -> list[tuple[str, Any]] | None:
    stripped = content.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    out: list[tuple[str, Any]] = []
    _flatten(data, "", out)
    return out


def leaf_at(content: str, path: str) -> tuple[bool, Any]:
    """The value at ``path`` of a JSON observation: ``(found, value)``."""
    for found_path, value in json_leaves(content) or ():
        if found_path == path:
            return True, value
    return False, None


def _segment_feature(segment: str) -> str:
    key, sep, value = segment.partition(":")
    text = f"{key.strip()}={value.strip()}" if sep and key.strip() and len(key) <= 40 else segment.strip()
    return text.lower()[:MAX_SEGMENT]


def result_segments(content: str) -> list[str]:
    """An observation as short ``key=value`` fields (JSON leaves, or ``Key: Value`` lines and ``|`` parts)."""
    leaves = json_leaves(content)
    if leaves is not None:
        # Scalars only, numbers kept: a status, a flag, a count.  Long strings (messages) are cut like text.
        return sorted({f"{path}={canonical_json(value) if not isinstance(value, str) else value}".lower()[:MAX_SEGMENT]
                       for path, value in leaves})
    return sorted({_segment_feature(s) for s in _SEGMENT.split(content) if s.strip()})


def history_features(keys: Sequence[str], last_observation: str | None) -> set[str]:
    """Features of the calls made so far (their normalised ``keys``, in order) and the last observation."""
    features = {f"pos:{min(len(keys), MAX_POSITION)}"}
    if keys:
        features.add(f"last:{keys[-1]}")
        features.update(f"made:{key}" for key in keys)
    if len(keys) >= 2:
        features.add(f"last2:{keys[-2]}>{keys[-1]}")
    if last_observation is not None:
        features.update(f"res:{segment}" for segment in result_segments(last_observation))
    return features


def _wild(path: str) -> str:
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


def _scalars(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _scalars(item, out)
    elif isinstance(value, list):
        for item in value:
            _scalars(item, out)
    elif isinstance(value, str):
        out.add(value)


def flow_features(text_values: Collection[str], history: Sequence[tuple[ToolCall, Observation | None]],
                  is_value: Callable[[str], bool]) -> set[str]:
    """Where the task's own values stand in the history: ``match:PATH``, a field of the last (JSON) observation
    that holds a value of the task text (the line whose number the ticket gives); ``open:TOOL|PATH`` /
    ``used:TOOL|PATH``, a list of values (``is_value``: ids) in the latest result of a tool, some of whose items
    no call has used yet / all of which calls used (the lines not yet looked at)."""
    out: set[str] = set()
    last = history[-1][1] if history else None
    if last is not None and text_values:
        for path, value in json_leaves(last.content) or ():
            if isinstance(value, str) and value in text_values:
                out.add(f"match:{_wild(path)}")
    used: set[str] = set()
    for call, _ in history:
        _scalars(call.arguments, used)
    latest: dict[str, str] = {}
    for call, observation in history:
        if observation is not None:
            latest[call.name] = observation.content
    for tool, content in sorted(latest.items()):
        lists: dict[str, list[bool]] = {}
        for path, value in json_leaves(content) or ():
            wild = _wild(path)
            if "*" in wild and isinstance(value, str) and is_value(value):
                lists.setdefault(wild, []).append(value in used)
        for wild, flags in lists.items():
            out.add(f"{'used' if all(flags) else 'open'}:{tool}|{wild}")
    return out


def lookahead_features(observations: Mapping[str, str]) -> set[str]:
    """Features of the look-ahead calls' observations, keyed by probe key."""
    return {f"la:{probe}|{segment}" for probe, content in observations.items() for segment in result_segments(content)}


def word_features(words: Iterable[str], chosen: frozenset[str]) -> set[str]:
    """The task text's words that the fit chose as informative, as features."""
    return {f"w:{word}" for word in words if word in chosen}


def mask_numbers(text: str) -> str:
    """Digits replaced by ``#``: for features that should not memorise one task's ids."""
    return _DIGITS.sub("#", text)
