"""The learned speculator on small synthetic trajectories: fitting, prediction, argument sources, back-off,
look-ahead through forks, the artifact, and that the package knows no bench."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import anyio
import pytest
from toy_env import KVEnvironment

from agentspec.cli import main
from agentspec.learned_speculator.artifact import Artifact, FittedOn, load
from agentspec.learned_speculator.fit import (
    HISTORY_MIN_SCORE,
    HISTORY_SCORE,
    LOOKAHEAD_MIN_SCORE,
    LOOKAHEAD_SCORE,
    decision_list,
    fit,
)
from agentspec.learned_speculator.lookahead import ForkLookahead, Probe
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.sources import Source
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.runtime.policies.protocol import DraftedHistory
from agentspec.snapshot import InProcessBackend
from agentspec.types import Observation, ToolCall

REPO = Path(__file__).resolve().parents[1]
PATTERNS = [("account", r"A\d{4,}", None)]


def obs(name: str, content: str) -> Observation:
    return Observation(call_id=name, name=name, content=content)


def episode(number: int, *, vip: bool) -> Trajectory:
    """A task: look the customer up by the phone number in the text, then refund that account (its id comes from
    the lookup's result), note the refund (its id from the refund call's argument), and a VIP gets a voucher."""
    phone = f"555-010-{1000 + number}"
    account = f"A{5000 + number}"
    text = f"Customer at {phone} wants a refund." + (" They are a gold member." if vip else "")
    steps = [
        (ToolCall(name="lookup", arguments={"phone_number": phone}), obs("lookup", json.dumps({"account": account, "tier": "x"}))),
        (ToolCall(name="refund", arguments={"account": account, "amount": 20.0}), obs("refund", "Refunded.")),
        (ToolCall(name="note", arguments={"account_ref": account, "kind": "refund"}), obs("note", "Noted.")),
    ]
    if vip:
        steps.append((ToolCall(name="voucher", arguments={"account": account}), obs("voucher", "Sent.")))
    return Trajectory(f"task{number}", text, tuple(steps), "synthetic")


def fitted(trajectories: list[Trajectory], probes: list[Probe] | None = None):
    return fit(trajectories, Normalizer(patterns_from_table(PATTERNS)), PATTERNS, probes or [])


def test_every_argument_source_and_the_task_words_are_learned() -> None:
    model = fitted([episode(i, vip=i % 2 == 0) for i in range(8)])
    held_out = episode(42, vip=True)
    history: list = []
    for step, (call, observation) in enumerate(held_out.steps):
        guesses = model.predict(held_out.text, history, None)
        assert guesses[0].call == call, f"step {step}: {guesses[0].call} != {call}"
        history.append((call, observation))
    sources = {slot: ranked[0].source.kind for slot, ranked in model.sources.items()}
    # The phone number from the task text, the account from the lookup's result, the note's reference from the
    # refund call's argument, the amount a constant.
    assert sources["lookup.phone_number"] == "text"
    assert sources["refund.account"] == "result"
    assert sources["refund.amount"] == "const"
    assert sources["note.account_ref"] in {"arg", "result"}
    # A task without the word that marks a VIP ends after the note; with it, the voucher comes next.
    plain = episode(43, vip=False)
    assert model.predict(plain.text, list(plain.steps), None)[0].call is None
    # strict: ids from data flow; an amount from a constant is not strict.
    assert model.predict(held_out.text, list(held_out.steps[:1]), None)[0].strict is False
    assert model.predict(held_out.text, [], None)[0].strict is True


def test_back_off_to_shorter_contexts_when_the_history_is_new() -> None:
    model = fitted([episode(i, vip=False) for i in range(4)])
    text = "Customer at 555-010-9999 wants a refund."
    # A history the fit never saw (a call of an unknown tool): the rules and the two-call context miss, the
    # back-off still ranks guesses rather than none.
    strange = [(ToolCall(name="unknown_tool", arguments={}), obs("unknown_tool", "??"))]
    guesses = model.predict(text, strange, None, k=3)
    assert guesses, "no guess after an unseen history"
    assert {g.call.name for g in guesses if g.call is not None} <= {"lookup", "refund", "note"}


def test_the_usual_first_call_is_guessed_though_most_tasks_start_otherwise() -> None:
    # Three of seven tasks start with ``check``, the rest with one of four other calls; every task ends once, so
    # the back-off's empty context ranks the end first.  The history rules keep "first call: check" (right 3 of
    # 7, less often than wrong) before that back-off; the look-ahead rules' floor would drop it.
    firsts = ["check", "check", "check", "reset", "restart", "renew", "refill"]
    trajectories = [Trajectory(f"t{i}", "the same text for every task",
                               ((ToolCall(name=name, arguments={}), obs(name, "ok")),), "synthetic")
                    for i, name in enumerate(firsts)]
    model = fitted(trajectories)
    assert model.predict("the same text for every task", [], None)[0].call == ToolCall(name="check", arguments={})
    examples = [(frozenset({"pos:0"}), name) for name in firsts]
    assert [r.then for r in decision_list(examples, score=HISTORY_SCORE, min_score=HISTORY_MIN_SCORE)] == ["check"]
    assert decision_list(examples, score=LOOKAHEAD_SCORE, min_score=LOOKAHEAD_MIN_SCORE) == []


def lookahead_trajectories() -> list[Trajectory]:
    """The next call depends on state the history does not show; a read-only probe (``get`` of key ``mode``)
    sees it."""
    out = []
    for i in range(6):
        broken = i % 2 == 0
        seen = {'get{"key":"mode"}': "mode=1" if broken else "mode=0"}
        steps = [(ToolCall(name="put", arguments={"key": "x", "value": 1}), obs("put", "ok"))]
        if broken:
            steps.append((ToolCall(name="reset", arguments={"key": "mode"}), obs("reset", "ok")))
        after = {'get{"key":"mode"}': "mode=0"}
        out.append(Trajectory(f"t{i}", "same text for every task", tuple(steps), "synthetic",
                              (seen, seen, after) if broken else (seen, after)))
    return out


def test_lookahead_features_decide_what_history_cannot() -> None:
    probe = Probe(name="get", arguments={"key": Source(kind="const", value="mode")})
    model = fitted(lookahead_trajectories(), [probe])
    assert [p.key for p in model.probes] == ['get{"key":"mode"}']
    history = [(ToolCall(name="put", arguments={"key": "x", "value": 1}), obs("put", "ok"))]
    broken = model.predict("same text for every task", history, {'get{"key":"mode"}': "mode=1"})
    fine = model.predict("same text for every task", history, {'get{"key":"mode"}': "mode=0"})
    assert broken[0].call == ToolCall(name="reset", arguments={"key": "mode"})
    assert fine[0].call is None


def test_lookahead_runs_only_read_only_calls_and_only_in_a_fork() -> None:
    async def scenario() -> None:
        backend = InProcessBackend(KVEnvironment({"mode": 1}))
        look = ForkLookahead(backend)
        calls = [ToolCall(name="get", arguments={"key": "mode"}), ToolCall(name="put", arguments={"key": "mode", "value": 9}),
                 ToolCall(name="notify", arguments={"message": "hi"})]
        seen = await look(calls)
        assert seen[0] is not None and seen[0].content == "mode=1"
        assert seen[1] is None and seen[2] is None  # mutating and external calls are never run, not even forked
        assert look.calls == 1
        live = backend.live.state
        assert live == {"data": {"mode": 1}, "journal": []}

        # A learned speculator's look-ahead goes through the same fork, and only at a committed state.
        model = fitted(lookahead_trajectories(), [Probe(name="get", arguments={"key": Source(kind="const", value="mode")})])
        speculator = LearnedSpeculator(model, "same text for every task", lookahead=look)
        history = [(ToolCall(name="put", arguments={"key": "x", "value": 1}), obs("put", "ok"))]
        decision = await speculator.decide(history)
        assert decision.call == ToolCall(name="reset", arguments={"key": "mode"})
        assert look.calls == 2
        await speculator.decide(DraftedHistory(history[:0], history))  # a draft chain: no look-ahead
        assert look.calls == 2
        assert backend.live.state == {"data": {"mode": 1}, "journal": []}

    anyio.run(scenario)


def artifact_of(trajectories: list[Trajectory]) -> Artifact:
    return Artifact(seed=3, fitted_on=FittedOn(task_ids=sorted(t.task_id for t in trajectories)), model=fitted(trajectories))


def test_artifact_round_trips_and_refits_to_the_same_bytes(tmp_path: Path) -> None:
    trajectories = [episode(i, vip=i % 3 == 0) for i in range(6)]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    artifact_of(trajectories).save(first)
    artifact_of(list(reversed(trajectories))).save(second)  # input order does not matter either
    assert first.read_bytes() == second.read_bytes()
    loaded = load(first)
    assert loaded.dumps() == first.read_text(encoding="utf-8")
    text, steps = trajectories[0].text, list(trajectories[0].steps[:1])
    assert loaded.model.predict(text, steps, None)[0].call == artifact_of(trajectories).model.predict(text, steps, None)[0].call


@pytest.mark.parametrize("content", ["not json at all", json.dumps({"format": "agentspec.macros/v1", "macros": []}),
                                     json.dumps({"format": "agentspec.speculator/v1", "model": {"rules": [{"when": 3}]}}),
                                     json.dumps({"format": "agentspec.speculator/v1",
                                                 "model": {"value_patterns": [["id", "(", None]]}}),
                                     json.dumps({"format": "agentspec.speculator/v1", "model": {"sources": {"a.b": [
                                         {"source": {"kind": "text", "type": "id", "index": -1}, "hits": 1,
                                          "available": 1}]}}})])
def test_a_malformed_or_foreign_speculator_file_exits_2_with_one_line(tmp_path: Path, content: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text(content, encoding="utf-8")
    code = main(["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--speculator", str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "speculator file" in err and "Traceback" not in err


def test_the_models_caches_stay_bounded_however_many_calls_and_texts_it_sees() -> None:
    from agentspec.learned_speculator.model import CACHE_SIZE

    model = fitted([episode(i, vip=i % 3 == 0) for i in range(6)])
    first = ToolCall(name="lookup", arguments={"phone_number": "555-010-0"})
    key = model.key(first)
    for i in range(CACHE_SIZE + 50):
        call = ToolCall(name="lookup", arguments={"phone_number": f"555-010-{i}"})
        model.features(f"ticket {i}", [(call, None)], None)
    assert len(model._keys) == len(model._texts) == CACHE_SIZE
    assert model.key(first) == key  # dropped from the cache, then made again the same


def _tool_names() -> set[str]:
    """Every tool any bench in the repository defines: the methods its toolkits mark with ``@tool``."""
    names = set()
    for path in (REPO / "envs").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if isinstance(target, ast.Name) and target.id == "tool" or isinstance(target, ast.Attribute) and target.attr == "tool":
                        names.add(node.name)
    return names


def test_the_speculator_package_names_no_bench_and_no_tool(bench) -> None:
    from agentspec.bench.registry import bench_names

    tools = _tool_names() | {spec.name for spec in bench.tools(bench.tasks("base")[0], solo=True)}
    assert len(tools) > 40  # the check sees the benches' tools (tau2's alone are over 40)
    benches = bench_names()
    words = set(benches) | {part for name in benches for part in re.split(r"[-_]", name)} | {"tau2", "telecom"}
    source = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "agentspec" / "speculator").glob("*.py")))
    found = sorted(w for w in tools | words if len(w) > 3 and re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", source))
    assert not found, f"the speculator package names a bench or tool: {found}"
