"""GAIA's answer-scoring rules, on made-up questions (GAIA's own data may not be reshared)."""

from __future__ import annotations

import doctest

import pytest

import envs.gaia.scorer
from envs.gaia.scorer import question_scorer


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("42", "42"),
        ("3", "3.0"),  # equal floats, whatever their spelling
        ("3.0", "3"),
        ("$17", "17"),
        ("12%", "12"),
        ("1,234,567", "1234567"),
        ("$1,250.50", "1250.5"),
        (" 7 ", "7"),
        ("-0.25", "-.25"),
    ],
)
def test_numeric_truth_accepts_the_same_number_with_symbols(answer: str, truth: str) -> None:
    assert question_scorer(answer, truth)


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("43", "42"),
        ("forty-two", "42"),  # unparseable is wrong, not an error
        ("42 apples", "42"),
        ("3.01", "3"),
        ("€5", "5"),  # only $, % and , are dropped
    ],
)
def test_numeric_truth_rejects_other_or_unparseable_answers(answer: str, truth: str) -> None:
    assert not question_scorer(answer, truth)


def test_list_compares_elements_in_order_ignoring_spaces_and_case() -> None:
    assert question_scorer("Apple,BANANA , cherry", "apple, banana, cherry")
    assert question_scorer("red;green", "red; green")
    assert not question_scorer("banana, apple, cherry", "apple, banana, cherry")


def test_list_separators_are_interchangeable() -> None:
    assert question_scorer("red, green", "red; green")


def test_list_length_must_match() -> None:
    assert not question_scorer("apple, banana", "apple, banana, cherry")
    assert not question_scorer("apple, banana, cherry, date", "apple, banana, cherry")


def test_list_numeric_elements_compare_as_numbers() -> None:
    assert question_scorer("$3, 4.0%, Oslo", "3, 4, oslo")
    assert not question_scorer("3, 5, oslo", "3, 4, oslo")
    assert not question_scorer("three, 4, oslo", "3, 4, oslo")


def test_list_keeps_punctuation_but_plain_string_drops_it() -> None:
    assert question_scorer("mt. fuji, k2", "Mt. Fuji, K2")
    assert not question_scorer("mt fuji, k2", "Mt. Fuji, K2")
    assert question_scorer("mt fuji", "Mt. Fuji")


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("blue whale", "Blue Whale"),
        ("bluewhale", "blue whale"),  # all whitespace goes, not only the ends
        ("Blue-Whale!", "blue whale"),
        ("  blue\twhale\n", "blue whale"),
        ("O'Neill", "oneill"),
    ],
)
def test_plain_string_ignores_case_whitespace_and_punctuation(answer: str, truth: str) -> None:
    assert question_scorer(answer, truth)


def test_plain_string_still_needs_the_same_letters() -> None:
    assert not question_scorer("grey whale", "blue whale")
    assert not question_scorer("blue whales", "blue whale")


def test_thousands_comma_truth_is_a_list() -> None:
    # float("1,000") fails, so the list rule applies: the comma must be there.
    assert question_scorer("1,000", "1,000")
    assert question_scorer("1, 000", "1,000")
    assert not question_scorer("1000", "1,000")


@pytest.mark.parametrize("answer", [None, "", "   "])
def test_missing_or_blank_answer_is_wrong(answer: str | None) -> None:
    assert not question_scorer(answer, "anything")
    assert not question_scorer(answer, "0")


def test_docstring_examples_hold() -> None:
    failures, tried = doctest.testmod(envs.gaia.scorer)
    assert tried > 5 and failures == 0
