"""Argument sources without look-ahead: a data-flow source that agrees with a constant goes before it, the sources
that need no look-ahead survive the cut, and a number written in the task text is a source."""

from __future__ import annotations

import json

from agentspec.learned_speculator.fit import MAX_SOURCES, fit, keep_sources
from agentspec.learned_speculator.model import RankedSource
from agentspec.learned_speculator.sources import NUMBER, Context, Source, TypedValues, candidate_sources, evaluate
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.types import Observation, ToolCall

PATTERNS = [("account", r"A\d{4,}", None), ("amount", r"-?\d+(\.\d+)?", "amount|_gb$")]


def obs(name: str, content: str) -> Observation:
    return Observation(call_id=name, name=name, content=content)


def fitted(trajectories: list[Trajectory]):
    return fit(trajectories, Normalizer(patterns_from_table(PATTERNS)), PATTERNS, [])


def test_an_argument_copied_from_an_earlier_call_goes_before_the_constant_it_equals() -> None:
    # Every task has the same account, never in the text: the first call can only take it from a constant.  Half
    # of the tasks then repeat it in a second call; the constant was right more often (8 of 8) than the earlier
    # argument (4 of 4), but the argument was never wrong, so it goes first and the second call is strict.
    account = "A5000"
    trajectories = []
    for i in range(8):
        steps = [(ToolCall(name="block", arguments={"account": account}), obs("block", "Blocked."))]
        if i % 2 == 0:
            steps.append((ToolCall(name="unblock", arguments={"account": account}), obs("unblock", "Unblocked.")))
        trajectories.append(Trajectory(f"task{i}", "Card problem" + (" twice." if i % 2 == 0 else "."), tuple(steps)))
    model = fitted(trajectories)
    assert [r.source.kind for r in model.sources["unblock.account"]] == ["arg", "const"]
    assert [r.source.kind for r in model.sources["block.account"]] == ["const"]
    first = model.predict("Card problem twice.", [], None)[0]
    assert first.call == trajectories[0].steps[0][0] and first.strict is False
    second = model.predict("Card problem twice.", list(trajectories[0].steps[:1]), None)[0]
    assert second.call == trajectories[0].steps[1][0] and second.strict is True


def _ranked(kind: str, hits: int, available: int, tag: str) -> RankedSource:
    source = Source(kind="const", value=tag) if kind == "const" else Source(kind=kind, tool=tag, path="id")  # type: ignore[arg-type]
    return RankedSource(source=source, hits=hits, available=available)


def test_sources_that_need_no_lookahead_survive_the_cut_and_the_constant_waits_for_the_sure_ones() -> None:
    lookahead = [_ranked("lookahead", 30, 30, f"probe{i}") for i in range(MAX_SOURCES + 2)]
    history = _ranked("arg", 15, 15, "earlier")
    unsure = _ranked("result", 9, 12, "answer")
    constant = _ranked("const", 30, 30, "C1")
    kept = keep_sources([*lookahead, unsure, history, constant])
    kinds = [r.source.kind for r in kept]
    # The best look-ahead ones first (unchanged with look-ahead), then the history's never-wrong source, then the
    # constant, and only then the source that was sometimes wrong.
    assert kinds[:MAX_SOURCES] == ["lookahead"] * MAX_SOURCES
    assert kinds[MAX_SOURCES:] == ["arg", "const", "result"]
    # Without a sure data-flow source the order is the ranking's: a constant right 30 of 30 before one right 9 of 12.
    assert [r.source.kind for r in keep_sources([unsure, constant])] == ["const", "result"]
    # A source right once is not sure enough to pass a constant.
    once = _ranked("arg", 1, 1, "once")
    assert [r.source.kind for r in keep_sources([once, constant])] == ["const", "arg"]


def test_a_number_written_in_the_task_text_is_a_source_and_follows_the_text() -> None:
    typed = TypedValues(Normalizer(patterns_from_table(PATTERNS)).patterns)
    context = Context("Account A5001, phone 555-010-2002: add 2.5 GB, not 10.", [], {}, typed)
    assert context.numbers_in("<text>", context.text) == [555, 2.5, 10]
    found = [s for s in candidate_sources(2.5, context) if s.kind == "text"]
    assert found == [Source(kind="text", type=NUMBER, index=1)]
    assert evaluate(found[0], context) == (True, 2.5)
    assert not [s for s in candidate_sources("2.5", context) if s.kind == "text"]  # a string is no number
    assert not [s for s in candidate_sources(True, context) if s.kind == "text"]

    def task(i: int, gb: float) -> Trajectory:
        call = ToolCall(name="top_up", arguments={"account": f"A{5000 + i}", "amount_gb": gb})
        text = f"Customer A{5000 + i} asks to add {gb} GB of data."
        return Trajectory(f"task{i}", text, ((call, obs("top_up", json.dumps({"ok": True}))),))

    model = fitted([task(i, 2.0) for i in range(6)])
    ranked = model.sources["top_up.amount_gb"]
    # The id's digits are no number of their own: the amount is the text's first.
    assert ranked[0].source == Source(kind="text", type=NUMBER, index=0) and ranked[-1].source.kind == "const"
    # A task asking for another amount gets that amount (the constant would say 2.0), from data flow.
    guess = model.predict("Customer A6000 asks to add 3.5 GB of data.", [], None)[0]
    assert guess.call is not None and guess.call.arguments == {"account": "A6000", "amount_gb": 3.5}
    assert guess.strict is True
