"""The out-of-order sidecar: a small model predicts the whole call in the background, as a hint.

When a request with tools starts, :meth:`Sidecar.start` launches a job on a
background thread (the decoder's steps run in worker threads and must never
wait for it, so it is not an awaited task).  The job asks a small model (the
smallest local model by default, ``smollm2-135m``) for the function and for
every argument slot of every tool *at once*: one shared prompt (the tools and
the question), then one branch per slot (``Function:`` and ``get_weather
city =``...), all decoded in parallel as branches of one token tree (tree
attention over the shared prompt's cache: one forward per step for all
slots), each branch constrained by llguidance to its JSON schema (the tool
names for the function, the parameter's schema for a slot).  Branches of
tools other than the predicted one stop as soon as the function is known.

The predicted call is rendered as the grammar renders calls (``<tool_call>\\n
{"name": ..., "arguments": {...}}\\n</tool_call>``, canonical separators) and
put in the request's :class:`~agentspec.decoding.drafter.HintBox` twice: with
the required arguments only, and with every argument.  The hint drafter
(:mod:`agentspec.decoding.hint_drafter`) drafts from it at the next tree.  The
job's wall time is :attr:`SidecarJob.seconds` (the decoder reports it under
``seconds.sidecar``); since it shares the CPU with the target, its cost is
also inside every end-to-end time the benchmark measures.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.decoding.drafter import DraftRequest
from agentspec.engine.grammar import render_call
from agentspec.engine.greedy import GreedyChooser
from agentspec.engine.kv_cache import TargetSequence
from agentspec.engine.model import LocalModel, require
from agentspec.engine.token_tree import TokenTree

__all__ = ["Sidecar", "SidecarJob"]

_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


@dataclass
class _Branch:
    tool: str | None
    """None for the function branch."""
    slot: str | None
    chooser: GreedyChooser
    node: int = 0
    tokens: list[int] = field(default_factory=list)
    done: bool = False


class SidecarJob:
    """One request's background prediction; :meth:`cancel` stops it at its next step."""

    def __init__(self) -> None:
        self._cancel = threading.Event()
        self.finished = threading.Event()
        self.began = time.perf_counter()
        self.ended: float | None = None
        self.prediction: dict[str, Any] | None = None
        self.error: str | None = None
        self.steps = 0

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def seconds(self) -> float:
        """Wall time of the job so far (all of it once finished)."""
        return (self.ended if self.ended is not None else time.perf_counter()) - self.began

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """For tests and benchmarks only; the decoder never waits."""
        return self.finished.wait(timeout)


class Sidecar:
    """Predicts calls with a small model in the background (module docstring)."""

    def __init__(self, lm: LocalModel, *, max_value_tokens: int = 24, max_steps: int = 40) -> None:
        self.lm = lm
        self.max_value_tokens = max_value_tokens
        self.max_steps = max_steps
        self._grammars: dict[str, str] = {}

    def start(self, request: DraftRequest, *, messages: Sequence[dict[str, Any]] | None = None) -> SidecarJob:
        """Start predicting ``request``'s call; the rendered prediction lands in ``request.hints``."""
        job = SidecarJob()
        question = request.question or (_question(messages) if messages else "")
        thread = threading.Thread(target=self._run, args=(job, request, question), name="agentspec-sidecar",
                                  daemon=True)
        thread.start()
        return job

    def predict(self, tools: Sequence[dict[str, Any]], question: str, job: SidecarJob | None = None) -> dict[str, Any]:
        """The predicted ``{"name", "arguments"}`` (blocking; the job is what runs it in the background)."""
        job = job or SidecarJob()
        lm = self.lm
        by_name = {tool["name"]: tool.get("parameters") or {} for tool in tools}
        prompt = lm.encode(self._prompt(tools, question))
        seq = TargetSequence(lm)
        seq.prefill(prompt[:-1])
        prefix = seq.length
        tree = TokenTree(root=prompt[-1], budget=1 << 30)
        branches: list[_Branch] = []
        if len(by_name) > 1:
            branches.append(self._branch(tree, None, None, "\nFunction: ", {"enum": sorted(by_name)}))
        for name, schema in by_name.items():
            # A slot compiles as a schema of its own: its local refs ("#/$defs/C") need the definitions at its root.
            shared = {k: schema[k] for k in ("$defs", "definitions") if isinstance(schema.get(k), dict)}
            for slot, slot_schema in (schema.get("properties") or {}).items():
                branches.append(self._branch(tree, name, slot, f"\n{name}({slot}=", {**shared, **slot_schema}))
        chosen = next(iter(by_name)) if len(by_name) == 1 else None
        start = 0
        while not job.cancelled and job.steps < self.max_steps:
            active = [b for b in branches if not b.done and (chosen is None or b.tool in (None, chosen))]
            if not active:
                break
            hidden = seq.forward_nodes(tree, start, prefix)
            job.steps += 1
            grown = len(tree)
            logits = seq.logits(hidden, [branch.node - start for branch in active])
            for branch, row in zip(active, logits):
                self._step(tree, branch, row)
                if branch.tool is None and branch.done:
                    chosen = _loads(_text(lm, branch.tokens)) if _loads(_text(lm, branch.tokens)) in by_name else None
            start = grown
            if len(tree) == grown:
                break
        if chosen is None:
            return {}
        arguments = {}
        for branch in branches:
            if branch.tool == chosen and branch.done:
                value = _loads(_text(lm, branch.tokens))
                if value is not _MISSING:
                    arguments[branch.slot] = value
        return {"name": chosen, "arguments": arguments}

    def _run(self, job: SidecarJob, request: DraftRequest, question: str) -> None:
        try:
            prediction = self.predict(request.tools, question or request.prompt_text[-2000:], job)
            if prediction and not job.cancelled:
                job.prediction = prediction
                schema = next((t.get("parameters") or {} for t in request.tools if t["name"] == prediction["name"]),
                              {})
                required = set(schema.get("required") or [])
                props = list(schema.get("properties") or {})
                ordered = {k: prediction["arguments"][k] for k in props if k in prediction["arguments"]}
                minimal = {k: v for k, v in ordered.items() if k in required}
                request.hints.put(render_call(prediction["name"], minimal), source="hint.sidecar")
                if ordered != minimal:
                    request.hints.put(render_call(prediction["name"], ordered), source="hint.sidecar")
        except Exception as exc:  # a failed sidecar must never break the request it serves
            job.error = f"{type(exc).__name__}: {exc}"
        finally:
            job.ended = time.perf_counter()
            job.finished.set()

    def _prompt(self, tools: Sequence[dict[str, Any]], question: str) -> str:
        lines = ["Functions:"]
        for tool in tools:
            params = tool.get("parameters") or {}
            args = ", ".join(
                f"{k}: {v.get('type', 'any')}" + (f" ({v['description']})" if v.get("description") else "")
                for k, v in (params.get("properties") or {}).items()
            )
            lines.append(f"- {tool['name']}({args}): {tool.get('description', '')}")
        lines.append(f"\nRequest: {question}\nFill in the call's function and argument values as JSON.")
        messages = [{"role": "user", "content": "\n".join(lines)}]
        template = self.lm.tokenizer.chat_template
        if template:
            return str(self.lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        return messages[0]["content"] + "\n"

    def _branch(self, tree: TokenTree, tool: str | None, slot: str | None, cue: str, schema: dict[str, Any]) -> _Branch:
        llguidance = require("llguidance")
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            # The value ends where a call's argument ends (a comma or the closing parenthesis), which even a
            # small model writes naturally; a bare JSON number would otherwise never end.
            value = json.dumps({**schema, "x-guidance": _JSON})
            grammar = llguidance.LLMatcher.grammar_from_lark(f'start: value end\nvalue: %json {value}\nend: "," | ")" | "\\n"')
            self._grammars[key] = grammar
        matcher = llguidance.LLMatcher(self.lm.ll_tokenizer, grammar)
        chooser = GreedyChooser(self.lm.stop_token_ids, matcher=matcher, vocab_size=self.lm.vocab_size)
        branch = _Branch(tool, slot, chooser, done=matcher.is_error())
        node = 0
        for token in self.lm.encode(cue):
            child = tree.add(node, token, "sidecar")  # cues share their common prefix nodes
            assert child is not None  # the sidecar's tree has no budget limit
            node = child
        branch.node = node
        return branch

    def _step(self, tree: TokenTree, branch: _Branch, logits: Any) -> None:
        choice = branch.chooser.choose(logits, 0.0)
        if branch.chooser.is_stop(choice.token) or len(branch.tokens) >= self.max_value_tokens:
            branch.done = True
            return
        tokens = [choice.token]
        done = branch.chooser.commit(choice.token)
        matcher = branch.chooser.matcher
        forced = [] if done else list(matcher.compute_ff_tokens())
        if forced and matcher.consume_tokens(forced):
            tokens += forced
            done = bool(matcher.is_stopped())
        for token in tokens:
            node = tree.add(branch.node, token, "sidecar")
            assert node is not None
            branch.node = node
        branch.tokens += tokens
        branch.done = done


_MISSING = object()


def _loads(text: str) -> Any:
    text = text[:-1] if text[-1:] in (",", ")", "\n") else text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _MISSING


def _text(lm: LocalModel, tokens: Sequence[int]) -> str:
    return b"".join(lm.token_bytes(t) for t in tokens).decode("utf-8", "replace")


def _question(messages: Sequence[dict[str, Any]]) -> str:
    """The last user message's text (what the call should answer)."""
    for message in reversed(list(messages)):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""
