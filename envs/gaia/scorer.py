"""GAIA's answer-scoring rules: does a model's final answer match the ground truth?

The rules below are written from GAIA's published scoring description; the ground truth decides which
rule applies, checked in this order:

1. **Number.**  The ground truth parses as a float (``float(gt)``).  The model answer has ``$``, ``%`` and
   ``,`` removed and must parse as an equal float; an unparseable answer is wrong.
2. **List.**  The ground truth contains ``,`` or ``;``.  Both sides are split on ``[,;]``; the lengths must
   match and the elements are compared in order: a numeric ground-truth element by rule 1, any other
   element with all whitespace removed and lowercased, punctuation *kept*.
3. **String.**  Anything else: both sides with whitespace removed, lowercased and ``string.punctuation``
   removed.

A missing (``None``) or blank model answer is always wrong.  Non-finite numbers are not numbers here: an answer
that parses as ``inf`` or ``nan`` (``"1e999"``, ``"NaN"``) never matches a numeric ground truth, and a ground
truth such as ``"Nan"`` (a name) or ``"Infinity"`` is compared as a string.  GAIA's own scorer calls ``float()``
on such a ground truth, so no answer could ever match it there; here the word matches itself.  Rule 1 is tried first, but ``float("1,000")``
fails, so a ground truth written with a thousands separator is a *two*-element list (``1`` and ``000``):
only an answer with the same comma matches it, and ``"1000"`` is wrong.
"""

from __future__ import annotations

import math
import re
import string

__all__ = ["question_scorer"]

# Characters a model may decorate a number with; they carry no value for the comparison.
_NUMBER_NOISE = re.compile(r"[$%,]")
_LIST_SEPARATOR = re.compile(r"[,;]")
_WHITESPACE = re.compile(r"\s+")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def question_scorer(model_answer: str | None, ground_truth: str) -> bool:
    """Whether ``model_answer`` counts as correct for ``ground_truth`` under GAIA's rules.

    Numbers compare by value, after dropping ``$``, ``%`` and ``,`` from the answer::

        >>> question_scorer("$1,234.50", "1234.5")
        True
        >>> question_scorer("3", "3.0")
        True
        >>> question_scorer("about three", "3")
        False

    A ground truth with ``,`` or ``;`` is a list: same length, compared in order, numeric elements by value,
    other elements without whitespace and case but *with* punctuation::

        >>> question_scorer("Paris ; 2.0", "paris, 2")
        True
        >>> question_scorer("st. louis, boston", "St. Louis, Boston")
        True
        >>> question_scorer("st louis, boston", "St. Louis, Boston")
        False
        >>> question_scorer("a, b", "a, b, c")
        False

    Hence a number written with a thousands comma is a list, and the plain number misses it::

        >>> question_scorer("1,000", "1,000")
        True
        >>> question_scorer("1000", "1,000")
        False

    Any other string ignores whitespace, case and punctuation::

        >>> question_scorer("Saint-Louis!", "saint louis")
        True

    A missing or blank answer is wrong::

        >>> question_scorer(None, "x"), question_scorer("  ", "x")
        (False, False)
    """
    if model_answer is None or not model_answer.strip():
        return False
    if _is_number(ground_truth):
        return _number_matches(model_answer, float(ground_truth))
    if _LIST_SEPARATOR.search(ground_truth):
        return _list_matches(model_answer, ground_truth)
    return _squash(model_answer, keep_punctuation=False) == _squash(ground_truth, keep_punctuation=False)


def _is_number(text: str) -> bool:
    """Whether ``text`` is a finite number (``"inf"``, ``"nan"`` and ``"1e999"`` are not)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _number_matches(model_answer: str, expected: float) -> bool:
    """Rule 1: the answer, stripped of ``$ % ,``, must parse as a float equal to ``expected``."""
    cleaned = _NUMBER_NOISE.sub("", model_answer)
    return _is_number(cleaned) and float(cleaned) == expected


def _list_matches(model_answer: str, ground_truth: str) -> bool:
    """Rule 2: element-wise comparison of two ``[,;]``-separated lists of equal length."""
    expected = _LIST_SEPARATOR.split(ground_truth)
    given = _LIST_SEPARATOR.split(model_answer)
    if len(expected) != len(given):
        return False
    return all(_element_matches(answer, truth) for answer, truth in zip(given, expected, strict=True))


def _element_matches(answer: str, truth: str) -> bool:
    if _is_number(truth):
        return _number_matches(answer, float(truth))
    # Punctuation is kept inside lists: "St. Louis" and "St Louis" are different list elements.
    return _squash(answer, keep_punctuation=True) == _squash(truth, keep_punctuation=True)


def _squash(text: str, *, keep_punctuation: bool) -> str:
    """``text`` without any whitespace, lowercased, and without punctuation unless asked to keep it."""
    squashed = _WHITESPACE.sub("", text).lower()
    return squashed if keep_punctuation else squashed.translate(_PUNCTUATION)
