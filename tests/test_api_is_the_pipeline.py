"""The Python API runs on the pipeline ``agentspec run`` runs on: the README's example and a CLI run of the same
task with the same settings give the same results (episodes, rewards, the speculator's hits), and the API opens its
endpoints through the one role opener (no client of its own)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted_openai_server import ScriptedOpenAIServer
from test_bench_registry import install_bench
from test_readme_example import _scripted_endpoints, example_code, responder

from agentspec import Executor, ModelConfig
from agentspec.cli import main
from agentspec.runtime.policies.scripted import OracleAuthority

REPO = Path(__file__).resolve().parents[1]
TASK = "Write down 'buy milk', then tell me how many notes there are."

# The README's tools and task as a bench of their own: a fresh notebook per task, registered by an entry point.
NOTES_BENCH = '''
from agentspec.bench.user_tasks import UserTasks
from agentspec.env import ToolkitEnvironment
from agentspec.snapshot import InProcessBackend
from readme_notes import Notes


class NotesBench(UserTasks):
    name = "readme-notes"

    @classmethod
    def from_data_dir(cls, data_dir=None):
        return cls(lambda: InProcessBackend(ToolkitEnvironment(Notes())), tasks=[{task!r}], name="readme-notes")
'''


def _readme_tools() -> str:
    """The README example's code up to the line that makes the notebook: its imports and its Notes toolkit."""
    code = example_code()
    return code[:code.index("notes = Notes()")]


@pytest.fixture
def notes_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "readme_notes.py").write_text(_readme_tools())
    (tmp_path / "notes_bench.py").write_text(textwrap.dedent(NOTES_BENCH.format(task=TASK)))
    install_bench(tmp_path, monkeypatch, "notes_bench", "readme-notes = notes_bench:NotesBench")
    return "readme-notes"


def _without_ids(value: Any) -> Any:
    """``value`` without call ids (each run draws its own)."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "tool_call_id")}
    return [_without_ids(v) for v in value] if isinstance(value, list) else value


def _episodes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What must match between two runs of one task: the outcome and what the speculator did, not the times."""
    keep = ("task_id", "trial", "reward", "termination", "steps", "num_errors", "tool_calls", "evaluation", "messages")
    return [_without_ids({key: record[key] for key in keep}) | {"sources": record["execution"]["sources"]}
            for record in records]


def _figures(mode: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mode.items() if re.search(r"hit|commits|reward|tasks|episodes", key)}


def test_the_readme_example_and_the_cli_give_the_same_results(notes_bench: str, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        _scripted_endpoints(monkeypatch, srv)
        example: dict[str, Any] = {"__name__": "readme_example"}
        exec(compile(example_code(), "README.md", "exec"), example)
        capsys.readouterr()
        out = tmp_path / "cli"
        code = main(["run", "--bench", notes_bench, "--agent", "llm", "--mode", "sa", "--max-steps", "101", "--out", str(out),
                     "--no-progress", "--json"])
        assert code == 0, capsys.readouterr().err
    api = example["executor"].results()
    cli = json.loads((out / "results.json").read_text())
    assert _episodes(api.records("sa")) == _episodes(cli["episodes"]["sa"])
    assert api.records("sa")[0]["reward"] == 1.0
    assert api.records("sa")[0]["execution"]["sources"] == ["sa", "sa"]
    assert _figures(api.summary.modes["sa"].as_dict()) == _figures(cli["summary"]["modes"]["sa"])
    assert _figures(api.summary.modes["sa"].as_dict())  # the comparison saw the hit figures


def test_the_api_opens_no_client_of_its_own() -> None:
    source = (REPO / "agentspec" / "api.py").read_text(encoding="utf-8")
    assert "ModelClient(" not in source


def test_one_executor_opens_its_endpoints_once_for_many_tasks(tmp_path: Path) -> None:
    tools: dict[str, Any] = {}
    exec(compile(_readme_tools(), "README.md", "exec"), tools)
    Notes = tools["Notes"]
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        # Endpoints as the command line takes them, or as a ModelConfig: the same thing.
        executor = Executor(Notes(), authority=f"{srv.base_url}#authority",
                            speculator=ModelConfig(base_url=srv.base_url, model="speculator"), mode="sa",
                            out=tmp_path / "out")

        async def two() -> list[str | None]:
            async with executor:
                return [(await executor.run(task)).answer for task in ("one", "two")]

        answers = anyio.run(two)
        checks = srv.model_list_requests
    assert answers == ["1 note", "1 note"]
    assert checks == 2  # each endpoint checked once, when the executor opened, not once per task
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [e["reward"] for e in saved["episodes"]["sa"]] == [1.0, 1.0]

    # The folder is held for as long as an executor is open: a run into it from another process is refused at once.
    async def clash() -> subprocess.CompletedProcess[str]:
        async with Executor(Notes(), authority=OracleAuthority([]), mode="sequential", out=tmp_path / "held"):
            command = [sys.executable, "-m", "agentspec.cli", "run", "--bench", "workspace-demo", "--agent", "oracle",
                       "--out", str(tmp_path / "held")]
            return await anyio.run_process(command, check=False)

    refused = anyio.run(clash)
    assert refused.returncode == 2 and b"is in use by another run" in refused.stderr
