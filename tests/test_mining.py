"""Macro mining: normalization, candidates, labelling, the Beta filter, the library, ``agentspec mine``."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from scipy.stats import beta
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import main
from agentspec.macros import Macro, MacroLibrary, MacroStep, lower_bound
from agentspec.mining.candidates import Candidate, enumerate_candidates, graph_statistics, transition_graph
from agentspec.mining.filter import FilterConfig, macro_score, select
from agentspec.mining.labelling import Label, ReplaySandboxes, label_candidates, sample_continuations, training_states
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.runtime.policies.protocol import Decision, History
from agentspec.runtime.policies.scripted import gold_pointer
from agentspec.snapshot import InProcessBackend, Snapshot
from agentspec.trajectories import MinedTrajectory, deduplicate, gold_trajectories, read_results
from agentspec.types import Effect, Observation, ToolCall, ToolSpec

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "macros" / "tau2-telecom.json"


def slot(name: str) -> dict[str, str]:
    return {"$slot": name}


def step(name: str, content: str = "ok", **arguments: object) -> tuple[ToolCall, Observation]:
    call = ToolCall(name=name, arguments=arguments)
    return call, Observation(call_id=call.id, name=name, content=content)


# --------------------------------------------------------------------------- normalization


def test_values_become_typed_slots_and_repeats_share_one():
    lookup = step("get_customer_by_phone", '{"customer_id": "C1001", "line_ids": ["L1002"]}', phone_number="555-123-2002")
    refuel = step("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0)
    roam = step("enable_roaming", customer_id="C1001", line_id="L1002")
    skeleton = Normalizer().skeleton([lookup, refuel, roam])
    assert [s.arguments for s in skeleton.steps] == [
        {"phone_number": slot("phone_number")},
        {"customer_id": slot("customer_id"), "line_id": slot("line_id"), "gb_amount": slot("amount")},
        {"customer_id": slot("customer_id"), "line_id": slot("line_id")},
    ]
    assert skeleton.slots == {"phone_number": "phone_number", "customer_id": "customer_id", "line_id": "line_id", "amount": "amount"}
    # The ids were read from the lookup's result; the phone number and amount are the window's inputs.
    assert skeleton.flow == {"phone_number": "steps[0].arguments.phone_number", "customer_id": "steps[0].observation",
                             "line_id": "steps[0].observation", "amount": "steps[1].arguments.gb_amount"}
    assert skeleton.bindings["customer_id"] == '"C1001"'


def test_distinct_values_get_distinct_slots_and_constants_stay():
    first = step("transfer_line", source_id="L1001", target_id="L1002", mode="4g_5g_preferred", force=True, count=3)
    skeleton = Normalizer().skeleton([first])
    assert skeleton.steps[0].arguments == {"source_id": slot("source_id"), "target_id": slot("target_id"),
                                           "mode": "4g_5g_preferred", "force": True, "count": 3}


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("customer_id", "C1001", "customer_id"), ("id", "B1234321", "id"), ("phone_number", "555-123-2002", "phone_number"),
    ("when", "2025-01-20", "date"), ("when", "2025-01-20T14:30:00", "timestamp"), ("email", "ann@example.com", "email"),
    ("gb_amount", 2.0, "amount"), ("price", 40, "amount"), ("app_name", "messaging", None), ("limit", 12, None),
    ("enabled", True, None), ("mode", "4g_5g_preferred", None),
])
def test_generic_patterns(key, value, expected):
    assert Normalizer().slot_type(key, value) == expected


def test_a_bench_table_comes_before_the_generic_patterns(bench):
    normalizer = Normalizer(patterns_from_table(bench.value_patterns()))
    assert normalizer.slot_type("id", "B1234321") == "bill_id"  # generic would say "id"
    assert normalizer.slot_type("id", "P1001") == "plan_id"
    assert normalizer.slot_type("data_used_gb", 3.5) == "amount"
    assert normalizer.slot_type("full_name", "John Smith") == "person_name"
    assert normalizer.slot_type("app_name", "messaging") is None


# --------------------------------------------------------------------------- planted macros

PLANTED_A = [  # a lookup, then two steps using what it returned: reliable (the speculator gets it 95% right)
    MacroStep(name="lookup_customer", arguments={"phone_number": slot("phone_number")}),
    MacroStep(name="suspend_line", arguments={"customer_id": slot("customer_id"), "line_id": slot("line_id")}),
    MacroStep(name="notify", arguments={"customer_id": slot("customer_id"), "message": "suspended"}),
]
PLANTED_B = [MacroStep(name="check_a"), MacroStep(name="check_b")]  # the speculator guesses check_b only 20% of the time
FILLERS = ["ping", "status", "list_plans"]


def synthetic_trajectories(count: int = 30, seed: int = 7) -> list[MinedTrajectory]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        customer, line, phone = f"C{2000 + i}", f"L{3000 + i}", f"555-{200 + i:03d}-{1000 + i:04d}"
        block_a = [step("lookup_customer", json.dumps({"customer_id": customer, "line_id": line}), phone_number=phone),
                   step("suspend_line", customer_id=customer, line_id=line),
                   step("notify", customer_id=customer, message="suspended")]
        block_b = [step("check_a"), step("check_b")]
        blocks = [block_a, block_b]
        rng.shuffle(blocks)
        steps = []
        for block in blocks:
            steps += [step(rng.choice(FILLERS)) for _ in range(rng.randint(0, 2))] + block
        out.append(MinedTrajectory(f"task-{i}", "synthetic", tuple(steps)))
    return out


@dataclass
class PlantedSpeculator:
    """A test fake: the true next call with probability 0.95 (0.2 when it is check_b), else ``ping``."""

    gold: list[ToolCall]
    sample: int

    async def decide(self, history: History) -> Decision:
        pointer = gold_pointer(self.gold, history)
        truth = self.gold[pointer] if pointer < len(self.gold) else None
        rng = random.Random(f"{self.sample}|{'|'.join(c.canonical() for c, _ in history)}")
        p = 0.2 if truth is not None and truth.name == "check_b" else 0.95
        if truth is not None and rng.random() < p:
            return Decision(call=truth)
        return Decision(call=ToolCall(name="ping"))


def mine(trajectories, speculator, samples=4, config=None):
    normalizer = Normalizer()
    graph = transition_graph(trajectories, normalizer)
    candidates = enumerate_candidates(trajectories, normalizer, graph)
    states = training_states(trajectories, candidates)
    continuations = anyio.run(lambda: sample_continuations(trajectories, states, speculator, samples=samples, depth=3))
    labels = label_candidates(candidates, trajectories, continuations)
    macros, funnel = select(candidates, labels, config or FilterConfig())
    return graph, candidates, labels, macros, funnel


def test_planted_macros_are_recovered_with_slots_and_flow_and_unreliable_ones_rejected():
    trajectories = synthetic_trajectories()
    graph, candidates, labels, macros, funnel = mine(trajectories, lambda t, s: PlantedSpeculator(t.calls, s))
    a = next(m for m in macros if m.steps == PLANTED_A)
    assert a.slots == {"phone_number": "phone_number", "customer_id": "customer_id", "line_id": "line_id"}
    assert a.flow == {"phone_number": "steps[0].arguments.phone_number", "customer_id": "steps[0].observation",
                      "line_id": "steps[0].observation"}
    assert a.support == 30 and a.n >= 120
    assert 0.8 <= a.k / a.n <= 0.97  # 0.95^2 planted
    assert a.lcb == pytest.approx(beta.ppf(0.05, a.k + 1, a.n - a.k + 1))
    # B occurs as often, but the speculator rarely reproduces it: enough labels, too low a bound.
    b_key = next(c.key for c in candidates if list(c.steps) == PLANTED_B)
    assert labels[b_key].n >= 100 and labels[b_key].k / labels[b_key].n < 0.35
    assert all(m.steps != PLANTED_B for m in macros)
    assert not any("check_b" in [s.name for s in m.steps[1:]] for m in macros)  # never after an anchor
    assert funnel.candidates == len(candidates) >= funnel.support_ge_n_min >= funnel.lcb_ge_tau >= funnel.kept == len(macros)
    assert graph.has_edge(*(Normalizer().node(c).key for c in (trajectories[0].calls[0], trajectories[0].calls[1])))
    stats = graph_statistics(graph, candidates)
    assert stats["nodes"] == 8 and stats["transitions"] == sum(len(t.steps) - 1 for t in trajectories)
    assert set(stats["candidates_by_length"]) == {"2", "3", "4"}


def test_a_perfect_speculator_keeps_every_frequent_skeleton_and_a_wrong_one_none():
    trajectories = synthetic_trajectories()

    @dataclass
    class Always:
        answer: ToolCall | None

        async def decide(self, history: History) -> Decision:
            return Decision(call=self.answer)

    *_, macros, funnel = mine(trajectories, lambda t, s: Always(None))
    assert macros == [] and funnel.lcb_ge_tau == 0  # never reproduces anything: every label is a miss

    @dataclass
    class Perfect:
        gold: list[ToolCall]

        async def decide(self, history: History) -> Decision:
            pointer = gold_pointer(self.gold, history)
            return Decision(call=self.gold[pointer] if pointer < len(self.gold) else None)

    _, candidates, labels, macros, funnel = mine(trajectories, lambda t, s: Perfect(t.calls))
    assert all(labels[c.key].k == labels[c.key].n for c in candidates)
    assert funnel.kept == sum(1 for c in candidates if labels[c.key].n >= 3 and lower_bound(labels[c.key].n, labels[c.key].n) >= 0.5)


def test_a_firing_the_reference_did_not_make_counts_against_the_macro():
    trajectories = [MinedTrajectory("t", "s", (step("a"), step("b"))), MinedTrajectory("u", "s", (step("a"), step("c")))]
    candidates = enumerate_candidates(trajectories, Normalizer(), transition_graph(trajectories, Normalizer()))
    ab = next(c for c in candidates if [s.name for s in c.steps] == ["a", "b"])
    b = ToolCall(name="b")
    labels = label_candidates([ab], trajectories, {(0, 0): [(b,), ()], (1, 0): [(b,)]})
    assert labels[ab.key] == Label(n=3, k=1, occurrences=2, false_firings=1)


# --------------------------------------------------------------------------- filter and library


@pytest.mark.parametrize("config", [FilterConfig(), FilterConfig(delta=0.1, n_min=5, tau=0.6, top=3)])
def test_filter_agrees_with_scipy_beta_quantile(config):
    grid = [(k, n) for n in range(0, 13, 2) for k in range(0, n + 1, 2)]
    candidates = [Candidate(key=f"c{k}-{n}", steps=(MacroStep(name=f"a{k}"), MacroStep(name=f"b{n}")), slots={}) for k, n in grid]
    labels = {c.key: Label(n=n, k=k) for c, (k, n) in zip(candidates, grid, strict=True)}
    macros, funnel = select(candidates, labels, config)
    expected = []
    for (k, n), candidate in zip(grid, candidates, strict=True):
        lcb = float(beta.ppf(config.delta, k + 1, n - k + 1))
        if n >= config.n_min and lcb >= config.tau:
            expected.append((-(lcb * math.log1p(k) * 2), candidate.key, lcb))
    expected.sort()
    assert [m.steps for m in macros] == [list(next(c.steps for c in candidates if c.key == key)) for _, key, _ in expected[: config.top]]
    for macro, (neg_score, _, lcb) in zip(macros, expected, strict=False):
        assert macro.lcb == pytest.approx(lcb, abs=1e-12) and macro.score == pytest.approx(-neg_score)
    assert funnel.lcb_ge_tau == len(expected) and funnel.kept == min(config.top, len(expected))
    assert funnel.support_ge_n_min == sum(1 for _, n in grid if n >= config.n_min)
    assert funnel.labels == sum(n for _, n in grid)
    assert macro_score(0.5, 3, 4) == pytest.approx(0.5 * math.log(4) * 4)


@pytest.mark.parametrize("bad", [{"delta": 0.0}, {"delta": 1.0}, {"tau": 1.5}, {"n_min": 0}, {"top": 0}])
def test_filter_rejects_bad_parameters(bad):
    from agentspec.errors import ConfigError

    with pytest.raises(ConfigError):
        FilterConfig(**bad)


def test_library_round_trips(tmp_path):
    *_, macros, _ = mine(synthetic_trajectories(), lambda t, s: PlantedSpeculator(t.calls, s))
    library = MacroLibrary(bench="synthetic", provenance={"source": ["synthetic"]}, parameters=FilterConfig().as_dict(), macros=macros)
    library.save(tmp_path / "lib.json")
    again = MacroLibrary.load(tmp_path / "lib.json")
    assert again == library and "created" not in again.provenance  # no timestamp: same library, same bytes
    assert again.macros[0].flow and again.macros[0].support > 0
    again.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == (tmp_path / "lib.json").read_text()


def test_observe_moves_lcb_as_beta_says():
    macro = Macro(id="m", steps=[MacroStep(name="a"), MacroStep(name="b")], n=10, k=9, lcb=lower_bound(9, 10))
    library = MacroLibrary(parameters={"tau": 0.5, "delta": 0.05}, macros=[macro])
    macro.observe(True)
    assert (macro.n, macro.k) == (11, 10) and macro.lcb == pytest.approx(beta.ppf(0.05, 11, 2))
    before = macro.lcb
    macro.observe(False)
    assert macro.lcb < before and macro.lcb == pytest.approx(beta.ppf(0.05, 11, 3))
    while macro.lcb >= library.tau:
        macro.observe(False)
    assert macro.lcb == pytest.approx(beta.ppf(0.05, macro.k + 1, macro.n - macro.k + 1))
    assert library.active() == []  # below tau: it stops firing


# --------------------------------------------------------------------------- trajectories


def test_results_of_runs_give_successful_agent_trajectories(tau2_dir, tmp_path, capsys):
    plain, spec = tmp_path / "plain", tmp_path / "spec"  # plain: no --mode (sequential)
    ids = "[service_issue]airplane_mode_on[PERSONA:None],[service_issue]break_apn_settings[PERSONA:None]"
    for argv in (["--solo", "--out", str(plain)], ["--solo", "--mode", "sequential,sa", "--speculator-model", "noisy-oracle:0.8", "--out", str(spec)]):
        assert main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--task-ids", ids, "--data-dir", str(tau2_dir),
                     "--no-progress", *argv]) == 0
    capsys.readouterr()
    from_plain = read_results(plain)
    from_spec = read_results(spec / "results.json")
    assert [t.task_id for t in from_plain] == ids.split(",")
    assert len(from_spec) == 4 and {t.source.rsplit("#", 1)[1] for t in from_spec} == {"sequential", "sa"}
    assert [c.name for c in from_plain[1].calls] == ["reset_apn_settings", "reboot_device"]
    assert all(obs is not None and obs.content for t in from_plain for _, obs in t.steps)
    assert len(deduplicate([*from_plain, *from_spec])) == 2
    # A failed episode is not mined.
    data = json.loads((plain / "results.json").read_text())
    data["episodes"]["sequential"][0]["reward"] = 0.0
    (plain / "results.json").write_text(json.dumps(data))
    assert [t.task_id for t in read_results(plain)] == ids.split(",")[1:]


def test_user_calls_of_a_normal_mode_run_are_not_the_agents(tmp_path):
    messages = [
        {"role": "assistant", "tool_calls": [{"name": "get_customer_by_phone", "arguments": {"phone_number": "555-123-2002"}, "id": "a1"}]},
        {"role": "tool", "content": '{"customer_id": "C1001"}', "tool_call_id": "a1"},
        {"role": "user", "tool_calls": [{"name": "toggle_airplane_mode", "id": "u1"}]},
        {"role": "tool", "content": "off", "tool_call_id": "u1", "requestor": "user"},
        {"role": "assistant", "content": "done ###STOP###"},
    ]
    (tmp_path / "results.json").write_text(json.dumps({"summary": {"bench": "tau2-telecom", "modes": {"sequential": {}}},
                                                       "episodes": {"sequential": [{"task_id": "t", "reward": 1.0, "messages": messages}]}}))
    [trajectory] = read_results(tmp_path)
    assert [c.name for c in trajectory.calls] == ["get_customer_by_phone"] and trajectory.steps[0][1].content == '{"customer_id": "C1001"}'


def test_gold_replay_and_draft_sandboxes(bench):
    [trajectory] = anyio.run(gold_trajectories, bench, "test")[:1]
    assert all(obs is not None and not obs.error for _, obs in trajectory.steps)
    second = trajectory.calls[1]

    async def two_forks() -> tuple[Observation | None, Observation | None]:
        async with ReplaySandboxes(lambda t: InProcessBackend(bench.environment(bench.task(t.task_id), solo=True))) as sandboxes:
            async with sandboxes(trajectory, 0) as first, sandboxes(trajectory, 0) as other:
                return await first(second), await other(second)

    first_fork, other_fork = anyio.run(two_forks)
    # A fork at the state after step 0 sees what the reference saw, and forks do not see each other's drafts.
    assert first_fork is not None and other_fork is not None
    assert first_fork.content == other_fork.content == trajectory.steps[1][1].content


@dataclass
class LedgerSandbox:
    id: str
    lineage: tuple[str, ...]
    token: str
    entries: tuple[int, ...]
    backend: LedgerBackend

    async def execute(self, call: ToolCall, requestor: str = "assistant") -> Observation:
        observation, self.entries = self.backend.apply(call, self.entries)
        if call.name != "total":
            self.token = self.backend.new_token()
        return observation


class LedgerBackend:
    """A snapshot backend with no :class:`agentspec.env.Environment` behind it (its state is a tuple of numbers):
    labelling may use nothing but the protocol."""

    def __init__(self) -> None:
        self.entries: tuple[int, ...] = ()
        self.tokens = 0
        self.live_token = self.new_token()
        self.open_forks: set[str] = set()
        self.forks_made = 0
        self.sent: list[ToolCall] = []
        self.closed = False

    def new_token(self) -> str:
        self.tokens += 1
        return f"t{self.tokens}"

    def apply(self, call: ToolCall, entries: tuple[int, ...]) -> tuple[Observation, tuple[int, ...]]:
        if call.name == "add":
            entries = (*entries, int(call.arguments["n"]))
        elif call.name == "notify":
            self.sent.append(call)
        return Observation(call_id=call.id, name=call.name, content=str(sum(entries))), entries

    def tool_specs(self, requestor: str = "assistant") -> list[ToolSpec]:
        return []

    def effect(self, name: str) -> Effect:
        return {"total": Effect.READ_ONLY, "notify": Effect.EXTERNAL}.get(name, Effect.MUTATING)

    async def execute(self, call: ToolCall, requestor: str = "assistant") -> Observation:
        observation, self.entries = self.apply(call, self.entries)
        self.live_token = self.new_token()
        return observation

    async def snapshot(self, source: LedgerSandbox | None = None) -> Snapshot:
        if source is None:
            return Snapshot(ref=self.entries, lineage=(self.live_token,))
        return Snapshot(ref=source.entries, lineage=(*source.lineage, source.token))

    async def fork(self, snapshot: Snapshot) -> LedgerSandbox:
        self.forks_made += 1
        box = LedgerSandbox(f"f{self.forks_made}", snapshot.lineage, snapshot.token, snapshot.ref, self)
        self.open_forks.add(box.id)
        return box

    async def commit(self, sandbox: LedgerSandbox) -> None:
        raise AssertionError("labelling never commits a draft")

    async def discard(self, sandbox: LedgerSandbox) -> None:
        self.open_forks.discard(sandbox.id)

    async def close(self) -> None:
        self.closed = True


@dataclass
class AddThenTotal:
    """Drafts add(10), total, notify; records the observations its drafts got."""

    seen: list[str | None]

    async def decide(self, history: History) -> Decision:
        drafted = [call for call, _ in history if call.name != "add" or call.arguments["n"] == 10]
        if drafted and drafted[-1].name == "total":
            self.seen.append(history[-1][1].content if history[-1][1] is not None else None)
        script = [ToolCall(name="add", arguments={"n": 10}), ToolCall(name="total"), ToolCall(name="notify")]
        return Decision(call=script[len(drafted)] if len(drafted) < len(script) else None)


def test_labelling_forks_through_any_snapshot_backend():
    trajectory = MinedTrajectory("t", "test", (step("add", "1", n=1), step("add", "3", n=2)))
    backend = LedgerBackend()
    seen: list[list[str | None]] = []

    def speculator(t: MinedTrajectory, sample: int) -> AddThenTotal:
        seen.append([])
        return AddThenTotal(seen[-1])

    async def label() -> dict:
        async with ReplaySandboxes(lambda t: backend) as sandboxes:
            return await sample_continuations([trajectory], [(0, 0), (0, 1)], speculator, samples=3, depth=4,
                                              sandboxes=sandboxes, concurrency=4)

    continuations = anyio.run(label)
    assert all(len(c) == 3 for chains in continuations.values() for c in chains)
    # Each sample drafts in its own fork of its state: after step 0 (1) or step 1 (1+2), plus its own add(10).
    assert sorted(v for values in seen for v in values) == ["11"] * 3 + ["13"] * 3
    assert backend.entries == (1, 2) and not backend.sent  # nothing reached live state; external drafts never ran
    assert backend.forks_made == 6 and not backend.open_forks and backend.closed


# --------------------------------------------------------------------------- the command


def mine_cli(capsys, *argv):
    code = main(["mine", "--bench", "tau2-telecom", "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def test_mine_prints_the_funnel_and_reproduces_the_shipped_library(tau2_dir, tmp_path, capsys):
    summary = mine_cli(capsys, "--split", "train", "--speculator-model", "noisy-oracle:0.8", "--data-dir", str(tau2_dir),
                       "--out", str(tmp_path / "lib.json"))
    funnel = summary["funnel"]
    assert list(funnel) == ["labels", "candidates", "support_ge_n_min", "lcb_ge_tau", "kept"]
    assert funnel["candidates"] >= funnel["support_ge_n_min"] >= funnel["lcb_ge_tau"] >= funnel["kept"] > 0
    assert summary["trajectories"]["used"] == 74 and summary["graph"]["nodes"] > 0
    mined = MacroLibrary.load(tmp_path / "lib.json")
    assert mined.provenance["funnel"] == funnel and mined.parameters["tau"] == 0.5
    assert all(m.lcb >= 0.5 and m.n >= 3 and 2 <= len(m.steps) <= 4 for m in mined.macros)
    shipped = MacroLibrary.load(SHIPPED)
    assert [m.model_dump() for m in mined.macros] == [m.model_dump() for m in shipped.macros], "re-mine macros/tau2-telecom.json"


def test_mine_restricts_runs_to_the_split(tau2_dir, tmp_path, capsys, bench):
    train = bench.tasks("train")[0].id
    test = bench.tasks("test")[0].id
    # solo: the agent makes every gold call (in normal play a task whose gold calls are all the user's leaves the
    # agent no trajectory to mine, inside the split or out of it)
    assert main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--solo", "--task-ids", f"{train},{test}",
                 "--data-dir", str(tau2_dir), "--no-progress", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    summary = mine_cli(capsys, "--split", "train", "--no-gold", "--runs", str(tmp_path / "run"), "--speculator-model",
                       "noisy-oracle:0.8", "--data-dir", str(tau2_dir), "--out", str(tmp_path / "lib.json"))
    assert summary["trajectories"] == {"gold": 0, "runs": 1, "outside_split": 1, "duplicates": 0, "used": 1}


def test_mine_with_a_model_speculator_over_http(tau2_dir, tmp_path, capsys):
    def responder(request):
        return {"tool_calls": [{"name": "reboot_device", "arguments": {}}]}

    with ScriptedOpenAIServer(responder, models=("spec",)) as srv:
        summary = mine_cli(capsys, "--split", "train", "--speculator-model", f"{srv.base_url}#spec", "--max-states", "3",
                           "--samples", "2", "--temperature", "0.9", "--data-dir", str(tau2_dir), "--out", str(tmp_path / "lib.json"))
        requests = list(srv.requests)
    assert summary["states"] == 3 and summary["samples"] == 6
    assert len(requests) == 6 * 3  # three drafts per chain
    assert all(r["temperature"] == 0.9 and r["tools"] for r in requests)
    assert "<ticket>" in requests[0]["messages"][0]["content"]
    assert MacroLibrary.load(tmp_path / "lib.json").parameters["temperature"] == 0.9


@pytest.mark.parametrize(("argv", "message"), [
    (["--out", "x.json"], "--speculator-model"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--tau", "2"], "tau"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--delta", "0"], "delta"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--max-length", "1"], "--max-length"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--min-length", "4", "--max-length", "3"], "--min-length"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--samples", "0"], "--samples: must be an integer >= 1"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--concurrency", "-2"], "--concurrency"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--max-states", "0"], "--max-states"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--temperature", "nan"], "--temperature"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--n-min", "0"], "--n-min"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--top", "0"], "--top"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--seed", "-1"], "--seed"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--min-reward", "1.5"], "--min-reward"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "."], "is a folder"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--runs", "/nonexistent"], "/nonexistent: no such folder or file"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--no-gold"], "--runs"),
    (["--speculator-model", "noisy-oracle:3", "--out", "x.json"], "in [0, 1]"),
    (["--speculator-model", "noisy-oracle:0.8", "--out", "x.json", "--split", "nope"], "unknown split"),
])
def test_mine_bad_flags_exit_2(tau2_dir, capsys, argv, message):
    code = main(["mine", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir), "--no-progress", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_mining_twice_gives_identical_bytes_and_records_its_inputs(tau2_dir, tmp_path, capsys):
    """Before: every save stamped provenance.created with today's date, so a re-mine rewrote a tracked file."""
    argv = ["--split", "train", "--speculator-model", "noisy-oracle:0.8", "--max-states", "40", "--data-dir", str(tau2_dir)]
    mine_cli(capsys, *argv, "--out", str(tmp_path / "a.json"))
    mine_cli(capsys, *argv, "--out", str(tmp_path / "b.json"))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    provenance = MacroLibrary.load(tmp_path / "a.json").provenance
    assert "created" not in provenance
    assert provenance["split"] == "train" and provenance["speculator"] == "noisy-oracle:0.8" and provenance["seed"] == 0
    assert len(provenance["data_sha256"]) == 64
    mine_cli(capsys, *argv, "--seed", "1", "--out", str(tmp_path / "c.json"))
    assert MacroLibrary.load(tmp_path / "c.json").provenance["data_sha256"] == provenance["data_sha256"]  # same data
    mine_cli(capsys, *argv[:-2], "--split", "test", "--data-dir", str(tau2_dir), "--out", str(tmp_path / "d.json"))
    assert MacroLibrary.load(tmp_path / "d.json").provenance["data_sha256"] != provenance["data_sha256"]


def test_shipped_library_is_the_readme_mine_command_output():
    """macros/tau2-telecom.json records its inputs, not a date (it was re-mined with the README's command)."""
    shipped = json.loads(SHIPPED.read_text())
    assert "created" not in shipped["provenance"] and len(shipped["provenance"]["data_sha256"]) == 64


# --------------------------------------------------------------------------- end to end


def test_the_shipped_library_commits_macros_on_the_test_split_and_keeps_reward(tau2_dir, capsys):
    code = main(["run", "--json", "--bench", "tau2-telecom", "--split", "test", "--solo", "--agent", "oracle", "--mode", "sequential,sa,smc",
                 "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper", "--macros", str(SHIPPED),
                 "--data-dir", str(tau2_dir), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    modes = json.loads(out.strip().splitlines()[-1])["modes"]
    assert all(modes[m]["reward_mean"] == 1.0 and modes[m]["tasks"] == 40 for m in ("sequential", "sa", "smc"))
    assert modes["smc"]["commits_macro"] > 0 and modes["sa"]["commits_macro"] == 0
    assert modes["smc"]["authority_calls"] < modes["sa"]["authority_calls"]
    assert modes["smc"]["mean_task_wall_s"] < modes["sa"]["mean_task_wall_s"] < modes["sequential"]["mean_task_wall_s"]
