"""Benches come from the ``agentspec.benches`` entry point group: the library never names where a bench lives, and a
bench in a package of its own registers itself and runs like the shipped ones."""

from __future__ import annotations

import json
import re
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from agentspec.bench import registry
from agentspec.bench.protocol import PinnedData, SetUp, ShippedMacros
from agentspec.cli import main
from agentspec.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

# A whole bench in a package of its own: a counter to bring to a target, scored from the committed calls.
TINY_BENCH = '''
from contextlib import asynccontextmanager

from pydantic import BaseModel

from agentspec.bench.protocol import distractors, done_tool
from agentspec.env import ToolkitEnvironment
from agentspec.snapshot import InProcessBackend
from agentspec.tools import Toolkit, tool
from agentspec.types import ToolCall


class Counter(Toolkit):
    def __init__(self):
        self.value = 0

    @tool("read_only")
    def read(self) -> int:
        """The counter's value."""
        return self.value

    @tool("mutating")
    def add(self, n: int) -> int:
        """Add n to the counter; its new value."""
        self.value += n
        return self.value


class Task(BaseModel):
    id: str
    target: int


class Score(BaseModel):
    reward: float


class CounterBench:
    name = "counter"
    default_split = "all"
    in_process = True
    TASKS = {t.id: t for t in (Task(id="to-2", target=2), Task(id="to-3", target=3))}

    @classmethod
    def from_data_dir(cls, data_dir=None):
        return cls()

    def tasks(self, split, task_ids=None, limit=None):
        chosen = [self.TASKS[t] for t in task_ids] if task_ids else list(self.TASKS.values())
        return chosen[:limit] if limit is not None else chosen

    def task(self, task_id):
        return self.TASKS[task_id]

    @asynccontextmanager
    async def open_backend(self, task, *, solo):
        yield InProcessBackend(ToolkitEnvironment(Counter()))

    def tools(self, task, *, solo):
        return [*Counter().specs(), done_tool("Call this once the counter shows the target.")]

    def system_prompt(self, task, *, solo):
        return f"Bring the counter to {task.target}, one at a time, reading it after each step."

    def gold_actions(self, task):
        steps = [ToolCall(name="add", arguments={"n": 1}), ToolCall(name="read")] * task.target
        return [("assistant", call) for call in [*steps, ToolCall(name="done")]]

    def distractors(self):
        return distractors([ToolCall(name="add", arguments={"n": 2}), ToolCall(name="read")])

    def value_patterns(self):
        return []

    async def evaluate(self, task, steps, termination, *, solo, live, final=None):
        added = sum(s.call.arguments["n"] for s in steps if s.call.name == "add" and not s.observation.error)
        return Score(reward=1.0 if added == task.target else 0.0)
'''


def install_bench(folder: Path, monkeypatch: pytest.MonkeyPatch, distribution: str, entry_points: str) -> Path:
    """A distribution installed into ``folder`` the way pip leaves one (a ``.dist-info`` with its
    ``entry_points.txt``, here the ``agentspec.benches`` lines given), ``folder`` put on ``sys.path``."""
    info = folder / f"{distribution}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[agentspec.benches]\n{entry_points}\n")
    monkeypatch.syspath_prepend(str(folder))
    return info


@pytest.fixture
def tiny_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``tinybench``, installed with its module: its entry point registers ``counter``."""
    (tmp_path / "tinybench.py").write_text(textwrap.dedent(TINY_BENCH))
    install_bench(tmp_path, monkeypatch, "tinybench", "counter = tinybench:CounterBench")
    return "counter"


def test_no_module_of_the_library_names_envs() -> None:
    # Strings and docstrings included: where a bench lives is its distribution's business (its entry point).
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for path in sorted((REPO / "agentspec").rglob("*"))
             if path.is_file() and path.suffix in (".py", ".md", ".toml", ".j2", ".json")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"(?<![\w-])envs(?![\w-])", line)]
    assert not found, "agentspec names envs:\n" + "\n".join(found)


def test_the_shipped_benches_are_this_distributions_entry_points() -> None:
    ours = {point.name: point.value for point in entry_points(group=registry.GROUP) if point.dist is not None
            and point.dist.name == "agentspec"}
    assert registry.bench_names() == sorted(ours) == ["appworld", "gaia", "mcp", "tau2-telecom", "workspace-demo"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert all(f'{name} = "{value}"' in pyproject for name, value in ours.items())
    # What each class offers is read from the class: data, a setup, a macro library.
    assert registry.names_with(PinnedData) == ["tau2-telecom"] and registry.names_with(SetUp) == ["appworld"]
    assert registry.names_with(ShippedMacros) == ["tau2-telecom"]
    assert registry.shipped_macros("tau2-telecom") == REPO / "macros" / "tau2-telecom.json"


def test_a_bench_in_its_own_package_registers_through_its_entry_point_and_runs(
        tiny_bench: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_bench in registry.bench_names()
    out = tmp_path / "out"
    code = main(["run", "--bench", tiny_bench, "--solo", "--agent", "oracle", "--mode", "sequential,sa",
                 "--speculator-model", "noisy-oracle:1.0", "--latency-model", "smc-paper", "--out", str(out),
                 "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["bench"] == tiny_bench and summary["tasks"] == 2
    assert {name: mode["reward_mean"] for name, mode in summary["modes"].items()} == {"sequential": 1.0, "sa": 1.0}
    assert summary["modes"]["sa"]["mean_task_wall_s"] < summary["modes"]["sequential"]["mean_task_wall_s"]
    # Its help lists it beside the shipped ones; it has no data, setup or macros, and says so.
    with pytest.raises(ConfigError, match="needs no setup"):
        registry.setup_bench(tiny_bench)
    with pytest.raises(ConfigError, match="ships no macro library"):
        registry.shipped_macros(tiny_bench)
    assert registry.bench_data(tiny_bench) is None


def test_an_unknown_or_broken_registration_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"unknown bench 'nope'; known: appworld, gaia, mcp, tau2-telecom"):
        registry.bench_class("nope")
    info = install_bench(tmp_path, monkeypatch, "broken", "broken = no_such_module:Bench\nmcp = other.place:MCPBench")
    with pytest.raises(ConfigError, match="bench 'mcp' is registered twice, as .* and as "):
        registry.bench_names()
    (info / "entry_points.txt").write_text("[agentspec.benches]\nbroken = no_such_module:Bench\n")
    with pytest.raises(ConfigError, match=r"registered as no_such_module:Bench, which cannot be loaded: "
                                          r"ModuleNotFoundError"):
        registry.bench_class("broken")
