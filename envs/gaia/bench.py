"""GAIA as a bench: a question, its attachment, file, web and Python tools, and the official scorer.

GAIA's questions are gated on the Hugging Face hub and may not be reshared, so the data is the user's own folder
(:mod:`envs.gaia.dataset`); ``tests/data/gaia-format`` holds a few questions of our own in the same format, with
the calls an oracle agent makes, so the harness runs in CI.

The agent works alone (solo): it reads the attachment, searches and fetches pages, runs Python, and ends with
``done(answer=...)``; the answer is scored with GAIA's rules (:mod:`envs.gaia.scorer`).  The reading tools only
read (files, a search index, pages cached per run): they are ``read_only`` and run in this process whichever
branch asks.  ``run_python`` runs in a workspace sandbox (:mod:`envs.workspace`: Docker by default, no network,
limits, an unprivileged user; or an overlay/copy jail) whose folder holds a copy of the attachment; it may write
files there, so it is ``mutating`` and a speculative run happens in a fork of the sandbox.  ``--backend none``
drops the Python tool and runs everything in this process.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
from pydantic import BaseModel

from agentspec import WithTools
from agentspec.bench.protocol import DONE, distractors, done_tool
from agentspec.env import ToolkitEnvironment
from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox.overlay import run_folder
from agentspec.snapshot import InProcessBackend, SnapshotBackend
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect, Requestor, Step, TerminationReason, ToolCall, ToolSpec
from envs.gaia.dataset import GaiaData, GaiaTask, read_answers, score
from envs.gaia.files import read_file
from envs.gaia.scorer import question_scorer
from envs.gaia.web import CachedWeb, WebBackend, web_backend
from envs.workspace.environment import dev_image, open_workspace
from envs.workspace.tools import WorkspaceTools

Sandbox = Literal["docker", "overlay", "copy", "none"]
PYTHON_TOOL = "run_python"

INSTRUCTIONS = (
    "You are a general assistant answering a question with tools: read the attached file, search the web, "
    "read pages and run Python code as your tools allow. When you know the answer, call `done` with it (or "
    "reply `FINAL ANSWER: ` and the answer). The answer must be as short as possible: a number (digits, no "
    "thousands separators, no units unless asked), a few words (no articles, no abbreviations), or a comma "
    "separated list of such items."
)
DONE_TOOL = done_tool("Give the final answer and finish.", answer=True, required=["answer"])


class GaiaScore(BaseModel):
    """One question's score: the answer given, the reference, and GAIA's verdict."""

    reward: float
    correct: bool | None
    """None where the split has no reference answers (GAIA's test split: its leaderboard scores them)."""
    answer: str | None
    ground_truth: str | None
    level: int
    termination: TerminationReason


def _closed(spec: ToolSpec) -> ToolSpec:
    """``spec`` taking only its declared arguments: without ``additionalProperties: false`` a constrained decoder
    lets a model invent one (qwen2.5-coder-1.5b called ``read_attachment(file=...)`` on every try, each an error)."""
    return spec.model_copy(update={"parameters": {**spec.parameters, "additionalProperties": False}})


class GaiaTools(Toolkit):
    """What the agent can do for one question: its attachment, web search and page fetch (all read-only)."""

    def __init__(self, task: GaiaTask, web: WebBackend | None) -> None:
        self.task = task
        self.web = web

    @tool(Effect.READ_ONLY)
    def read_attachment(self) -> str:
        """Read the file attached to the question (text, tables, documents, slides, PDFs, images, archives)."""
        if self.task.file_path is None:
            raise ConfigError("this question has no attached file")
        return read_file(self.task.file_path)

    @tool(Effect.READ_ONLY)
    def web_search(self, query: str, k: int = 5) -> list[dict[str, str]]:
        """Search the web.

        Args:
            query: What to search for.
            k: How many results to return.
        """
        if self.web is None:
            raise ConfigError("no search backend is configured (--search-backend local|brave|serper|tavily)")
        return [{"title": r.title, "url": r.url, "snippet": r.snippet} for r in self.web.search(query, k)]

    @tool(Effect.READ_ONLY)
    def fetch_page(self, url: str) -> str:
        """Read a web page as text.

        Args:
            url: The page's address (from a search result).
        """
        if self.web is None:
            raise ConfigError("no search backend is configured (--search-backend local|brave|serper|tavily)")
        return self.web.fetch(url)


class GaiaBench:
    """GAIA questions from the user's folder, played solo (the :class:`agentspec.Bench` protocol)."""

    name = "gaia"
    default_split = "validation"

    def __init__(self, data: GaiaData, *, levels: Sequence[int] | None = None, search: str | None = None,
                 sandbox: Sandbox = "docker", fetch_allow: str | Sequence[str] | None = None,
                 **sandbox_options: Any) -> None:
        if sandbox not in ("docker", "overlay", "copy", "none"):
            raise ConfigError(f"unknown sandbox {sandbox!r} for GAIA's Python tool (docker, overlay, copy or none)")
        self.data = data
        self.levels = list(levels) if levels else None
        self.sandbox: Sandbox = sandbox
        self.sandbox_options = sandbox_options
        self.in_process = sandbox == "none"
        corpus = data.root / "corpus"
        name = search or ("local" if corpus.is_dir() else None)
        # One cache per run: a page a speculative call fetched is not fetched again when the authority asks.
        # fetch_page reaches public addresses only; fetch_allow names the local servers it may reach too.
        self.web: WebBackend | None = (
            CachedWeb(web_backend(name, corpus if corpus.is_dir() else None, fetch_allow=fetch_allow)) if name else None
        )

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None, *, levels: str | Sequence[int] | None = None,
                      search: str | None = None, backend: Sandbox = "docker", fetch_allow: str | None = None,
                      **ignored: Any) -> GaiaBench:
        """The user's GAIA folder (``--data-dir`` or ``$AGENTSPEC_GAIA_DATA``); ``levels`` like ``"1,2"``;
        ``backend`` is the Python tool's sandbox (``--backend``); ``fetch_allow`` (``--bench-option
        fetch_allow=127.0.0.1:8080,[::1]:8080``) the non-public servers ``fetch_page`` may reach, such as a
        local search corpus server."""
        if isinstance(levels, str):
            try:
                levels = [int(level) for level in levels.split(",") if level.strip()]
            except ValueError:
                raise ConfigError(f"--level {levels!r}: give levels 1, 2 or 3, comma-separated") from None
        if levels and any(level not in (1, 2, 3) for level in levels):
            raise ConfigError(f"--level {levels}: GAIA's levels are 1, 2 and 3")
        return cls(GaiaData.locate(data_dir), levels=levels, search=search, sandbox=backend, fetch_allow=fetch_allow)

    # --- the Bench protocol --------------------------------------------------------

    def tasks(self, split: str = "validation", task_ids: list[str] | None = None, limit: int | None = None) -> list[GaiaTask]:
        return self.data.tasks(split, levels=self.levels, task_ids=task_ids, limit=limit)

    def task(self, task_id: str) -> GaiaTask:
        for split in self.data.splits():
            found = self.data.tasks(split, task_ids=None)
            for task in found:
                if task.id == task_id:
                    return task
        raise ConfigError(f"unknown GAIA task id {task_id!r}")

    @asynccontextmanager
    async def open_backend(self, task: GaiaTask, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        """The question's tools; with a sandbox, its folder (holding a copy of the attachment) is removed on exit."""
        tools = GaiaTools(task, self.web)
        if self.sandbox == "none":
            yield InProcessBackend(ToolkitEnvironment(tools, shared=True))  # read-only tools: forks share them
            return
        # Named with this run's pid and start time: a killed run's folder is swept (agentspec sandbox sweep).
        folder = await anyio.to_thread.run_sync(run_folder, f"gaia-{task.id}")
        try:
            await anyio.to_thread.run_sync(_copy_attachment, task, folder)
            options = dict(self.sandbox_options)
            if self.sandbox == "docker" and "image" not in options:
                try:
                    options["image"] = await anyio.to_thread.run_sync(dev_image)
                except SnapshotError as exc:
                    raise SnapshotError(f"{exc} (GAIA's Python tool runs in Docker by default: start an engine, "
                                        "or pass --backend overlay, copy or none)") from exc
            async with open_workspace(self.sandbox, source=folder, **options) as workspace:
                yield WithTools(workspace, tools, expose={PYTHON_TOOL})
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))

    def tools(self, task: GaiaTask, *, solo: bool) -> list[ToolSpec]:
        python = [spec for spec in WorkspaceTools().specs() if spec.name == PYTHON_TOOL] if self.sandbox != "none" else []
        return [*map(_closed, GaiaTools(task, self.web).specs()), *python, DONE_TOOL]

    def system_prompt(self, task: GaiaTask, *, solo: bool) -> str:
        attached = f"\n\nAttached file: {task.file_name}" if task.file_name else ""
        if attached and self.sandbox != "none":
            attached += f" (also in the working folder of `{PYTHON_TOOL}` as {Path(task.file_name).name})"
        return f"{INSTRUCTIONS}\n\n<question>\n{task.question}\n</question>{attached}"

    def gold_actions(self, task: GaiaTask) -> list[tuple[Requestor, ToolCall]]:
        return [("assistant", call) for call in task.gold_calls]

    def distractors(self) -> list[ToolCall]:
        """Every distinct gold call of the folder's questions but the answers, plus a read of the attachment."""
        gold = (call for split in self.data.splits() for task in self.data.tasks(split) for call in task.gold_calls)
        return distractors((call for call in gold if call.name != DONE), checks=[ToolCall(name="read_attachment")])

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        return [("url", r"https?://\S+|corpus://\S+", r"^url$")]

    async def evaluate(self, task: GaiaTask, steps: Sequence[Step], termination: TerminationReason, *, solo: bool,
                       live: SnapshotBackend, final: dict[str, Any] | None = None) -> GaiaScore:
        """GAIA's verdict on the ``done`` call's answer (no answer, or an episode that did not finish: wrong)."""
        answer = (final or {}).get("answer")
        answer = None if answer is None else str(answer)
        if task.answer is None:
            return GaiaScore(reward=0.0, correct=None, answer=answer, ground_truth=None, level=task.level,
                             termination=termination)
        correct = termination is TerminationReason.AGENT_STOP and answer is not None and question_scorer(answer, task.answer)
        return GaiaScore(reward=float(correct), correct=correct, answer=answer, ground_truth=task.answer,
                         level=task.level, termination=termination)

    def figures(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``accuracy`` and ``accuracy_by_level`` (keys "1".."3", levels present only) of one mode's episodes."""
        by_level: dict[str, list[float]] = {}
        for record in records:
            level = (record.get("evaluation") or {}).get("level")
            if level is not None:
                by_level.setdefault(str(level), []).append(record["reward"])
        rewards = [record["reward"] for record in records]
        return {"accuracy": round(sum(rewards) / len(rewards), 4) if rewards else None,
                "accuracy_by_level": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_level.items())}}

    # --- submissions and ``agentspec score`` ---------------------------------------------

    def submission(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A run's episodes as leaderboard submission lines (``task_id``, ``model_answer``); no answer: ``""``."""
        lines = []
        for record in records:
            answer = (record.get("evaluation") or {}).get("answer")
            lines.append({"task_id": record["task_id"], "model_answer": "" if answer is None else answer})
        return lines

    def write_outputs(self, out: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
        """The leaderboard's format (``agentspec.bench.protocol.OfficialOutputs``): ``submission-MODE.jsonl``
        per mode, of each task's first trial."""
        written = []
        for mode, episodes in records.items():
            lines = self.submission([r for r in episodes if r.get("trial", 0) == 0])
            path = out / f"submission-{mode}.jsonl"
            path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
            written.append(path)
        return written

    def score_answers(self, path: str | Path, *, split: str) -> dict[str, Any]:
        """A submission file (``task_id``, ``model_answer`` per line) scored against the split's answers.

        A task the file does not answer is wrong; a file that answers none of the split's tasks is a ConfigError
        naming it (the wrong split or data folder, most likely), not an accuracy of 0.
        """
        answers = read_answers(path)
        tasks = self.tasks(split)
        if not any(task.id in answers for task in tasks):
            first = next(iter(answers))
            raise ConfigError(
                f"{path}: none of its {len(answers)} task ids (first {first!r}) is a task of GAIA split {split!r} "
                f"in {self.data.root}; check --split and --data-dir"
            )
        return score(tasks, answers)


def _copy_attachment(task: GaiaTask, folder: Path) -> None:
    if task.file_path is not None and task.file_path.is_file():
        shutil.copyfile(task.file_path, folder / task.file_path.name)
