"""The ToolSpec generation loop: draft a tree, verify it in one forward, commit, repeat.

:class:`ToolSpecDecoder` holds what lasts across requests (the target model,
the drafters in priority order, the tree budget, the history of earlier
calls, the sidecar).  :meth:`ToolSpecDecoder.start` opens one request as a
:class:`Generation`, stepped like the server engine's generations:
``prefill()`` until ``prefilled``, then ``decode()`` until it returns a
finish reason.  :meth:`ToolSpecDecoder.generate` runs one to the end::

    decoder = ToolSpecDecoder(lm, default_drafters(), history=CallHistory())
    result = decoder.generate(prompt_ids, max_tokens=128, grammar=grammar, tools=tools)
    result.tokens        # identical to plain greedy decoding's
    result.stats.as_dict()["tokens_per_forward"]

With no drafters the loop is plain greedy decoding (one forward per token),
the baseline every test and benchmark compares against.

Hints (module :mod:`agentspec.decoding.hint_drafter`): every request has a
:class:`~agentspec.decoding.drafter.HintBox`; ``generate(..., hints=[text])``
or ``Generation.hints.put(text, source="spork")`` from any thread adds a
predicted completion at any time, and the next tree built after that takes
it as branches.  Nothing ever waits for a hint.  A hint that has matched the
output from its start is a :class:`~agentspec.decoding.drafter.Unit`: it
takes the tree budget before any other draft, the pruner bets on it whole,
and every forward teaches the decoder how often such bets of its source are
right (``<source>.whole`` in :attr:`ToolSpecDecoder.acceptance`), so a right
guess given with the request costs two forwards (the prompt's, then one tree).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.decoding.budget import DEFAULT_COST, AcceptanceModel, ForwardCost, prune, unit_nodes
from agentspec.decoding.drafter import Drafter, DraftRequest, DraftState, HintBox, Unit
from agentspec.decoding.stats import DraftStats
from agentspec.decoding.verifier import NearTie, Verdict, Verifier
from agentspec.engine.greedy import NEAR_TIE, Choice, GreedyChooser
from agentspec.engine.kv_cache import Reuse, TargetSequence
from agentspec.engine.model import LocalModel, require
from agentspec.engine.token_tree import DEFAULT_BUDGET, TokenTree

__all__ = ["DecodeResult", "Generation", "ToolSpecDecoder", "default_drafters"]

_RECYCLE_TOP = 8
_log = logging.getLogger(__name__)


@dataclass
class DecodeResult:
    """A finished generation."""

    tokens: list[int]
    text: str
    finish: str | None
    stats: DraftStats
    seconds: float
    choices: list[Choice] = field(default_factory=list)


def default_drafters(history: Any = None) -> list[Drafter]:
    """The ToolSpec drafters in priority order: schema, hints, retrieval (``history`` + prompt), recycling."""
    from agentspec.decoding.hint_drafter import HintDrafter
    from agentspec.decoding.recycling_drafter import RecyclingDrafter
    from agentspec.decoding.retrieval_drafter import RetrievalDrafter
    from agentspec.decoding.schema_drafter import SchemaDrafter

    return [SchemaDrafter(), HintDrafter(), RetrievalDrafter(history), RecyclingDrafter()]


class ToolSpecDecoder:
    """Lossless tree-speculative greedy decoding for one target model (module docstring).

    ``drafters`` are asked in order; each gets the tree budget the earlier ones
    left.  ``cost`` (a :class:`~agentspec.decoding.budget.ForwardCost`: forward
    time by tree size; None sends every drafted node) lets
    :func:`~agentspec.decoding.budget.prune` keep only the nodes that pay for
    themselves, by the acceptance rates learnt so far (:attr:`acceptance`).  ``history`` (a :class:`~agentspec.decoding.retrieval_drafter.CallHistory`)
    learns every finished output's calls; ``sidecar`` (a
    :class:`~agentspec.decoding.sidecar.Sidecar`) starts predicting each request's
    call in the background when the request starts.
    """

    def __init__(
        self, lm: LocalModel, drafters: Sequence[Drafter] = (), *, budget: int = DEFAULT_BUDGET,
        near_tie: float = NEAR_TIE, recheck: bool = True, history: Any = None, sidecar: Any = None,
        prefill_chunk: int = 256, cost: ForwardCost | None = DEFAULT_COST,
    ) -> None:
        self.lm = lm
        self.drafters = list(drafters)
        self.budget = budget
        self.verifier = Verifier(near_tie=near_tie, recheck=recheck)
        self.history = history
        self.sidecar = sidecar
        self.prefill_chunk = prefill_chunk
        self.cost = cost
        self.acceptance = AcceptanceModel()

    def start(
        self, prompt: Sequence[int], *, max_tokens: int, grammar: str | None = None, matcher: Any = None,
        tools: Sequence[dict[str, Any]] = (), hints: Sequence[str] = (), hint_box: HintBox | None = None,
        ignore_eos: bool = False, top_logprobs: int = 0, reuse: Reuse = (0, []), messages: Any = None,
        prefill_chunk: int | None = None,
    ) -> Generation:
        """Open one request.  ``grammar`` (llguidance) or an existing ``matcher`` constrains the output.

        ``reuse`` = (cached tokens, per-layer key/values) starts from a prefix
        cache entry; ``messages`` (chat messages) give the sidecar the question;
        ``hint_box`` is the request's box when hints may arrive before it starts.
        """
        if matcher is None and grammar is not None:
            matcher = require("llguidance").LLMatcher(self.lm.ll_tokenizer, grammar)
            if matcher.is_error():
                raise ValueError(f"cannot build the grammar: {matcher.get_error()}")
        box = hint_box if hint_box is not None else HintBox()
        for text in hints:
            box.put(text, source="hint.client")
        request = DraftRequest(self.lm, tuple(prompt), tuple(tools), grammar, box, question=_question(messages))
        generation = Generation(self, request, matcher, max_tokens, ignore_eos, top_logprobs, reuse,
                                prefill_chunk or self.prefill_chunk)
        if self.sidecar is not None and tools:
            generation.sidecar_job = self.sidecar.start(request, messages=messages)
        return generation

    def generate(self, prompt: Sequence[int], *, max_tokens: int, **options: Any) -> DecodeResult:
        """Run one request to the end (blocking)."""
        began = time.perf_counter()
        generation = self.start(prompt, max_tokens=max_tokens, **options)
        while not generation.prefilled:
            generation.prefill()
        finish = None
        while finish is None:
            _, finish = generation.decode()
        generation.close()
        return DecodeResult(
            tokens=list(generation.state.output), text=generation.state.text, finish=finish,
            stats=generation.stats, seconds=time.perf_counter() - began, choices=generation.choices,
        )


class Generation:
    """One request's state between steps (not thread-safe: the caller steps it from one thread at a time)."""

    def __init__(
        self, decoder: ToolSpecDecoder, request: DraftRequest, matcher: Any, max_tokens: int, ignore_eos: bool,
        top_logprobs: int, reuse: Reuse, prefill_chunk: int,
    ) -> None:
        self.decoder = decoder
        self.request = request
        lm = decoder.lm
        self.seq = TargetSequence(lm, reuse)
        self.cached = self.seq.length
        self.pending = list(request.prompt[self.cached :])
        if not self.pending:
            raise ValueError("at least one prompt token must be left to compute")
        self.chooser = GreedyChooser(lm.stop_token_ids, matcher=matcher, vocab_size=lm.vocab_size,
                                     ignore_eos=ignore_eos, top_logprobs=top_logprobs)
        self.state = DraftState(request, [], matcher)
        self.max_tokens = max_tokens
        self.stats = DraftStats(requests=1)
        self.choices: list[Choice] = []
        self.sidecar_job: Any = None
        self._prefill_logits: Any = None
        self._plain_next = False
        self._finished = False
        self._closed = False
        self.prefill_chunk = prefill_chunk

    @property
    def hints(self) -> HintBox:
        """Put hints here from any thread (module docstring)."""
        return self.request.hints

    @property
    def covered(self) -> list[int]:
        """The tokens whose key/values the cache holds (prompt and output, all but the pending token)."""
        return [*self.request.prompt, *self.state.output][: self.seq.length]

    @property
    def prefilled(self) -> bool:
        return not self.pending

    def layers(self) -> list[tuple[Any, Any]]:
        return self.seq.layers()

    def prefill(self) -> None:
        """Compute the next chunk of the prompt."""
        began = time.perf_counter()
        chunk, self.pending = self.pending[: self.prefill_chunk], self.pending[self.prefill_chunk :]
        self._prefill_logits = self.seq.prefill(chunk)
        self.stats.time("prefill", time.perf_counter() - began)

    def decode(self) -> tuple[list[Choice], str | None]:
        """Commit the next token(s); return them and, when generation ends, why ("stop" or "length")."""
        if self._finished:
            return [], "stop"
        if self._prefill_logits is not None:
            return self._first()
        output = self.state.output
        began = time.perf_counter()
        tree = TokenTree(root=output[-1], budget=self.decoder.budget)
        units: list[Unit] = []
        if self._plain_next:
            self._plain_next = False
        else:
            tree, units = self._draft(output[-1])
            if self.decoder.cost is not None:
                tree = prune(tree, self.decoder.acceptance, self.decoder.cost, units)
        drafted = time.perf_counter()
        self.stats.time("draft", drafted - began)
        verdict = self.decoder.verifier.verify(
            self.seq, tree, self.chooser, position=len(output), max_new=self.max_tokens - len(output),
            on_logits=self._recycle if self.decoder.drafters else None,
        )
        self.stats.time("verify", time.perf_counter() - drafted)
        for source, accepted in verdict.tested:
            self.decoder.acceptance.observe(source, accepted)
        self._judge_units(tree, units, verdict)
        self.stats.forward(len(verdict.tokens), tree.drafts)
        self._count(tree, verdict.sources, verdict.near_ties)
        if verdict.recheck:
            self.stats.rechecks += 1
            self._plain_next = True
        output.extend(verdict.tokens)
        self.choices.extend(verdict.choices)
        if verdict.finish is not None:
            self._finished = True
        return verdict.choices, verdict.finish

    def _first(self) -> tuple[list[Choice], str | None]:
        """The first token comes from the prompt's last logits, exactly as in plain greedy decoding."""
        logits, self._prefill_logits = self._prefill_logits, None
        near = self.decoder.verifier.near_tie
        choice = self.chooser.choose(logits, near)
        if choice.margin < near:
            self.stats.near_ties.append(_tie(NearTie(0, choice.token, choice.runner_up, choice.margin, True)))
        if self.chooser.is_stop(choice.token):
            self.stats.forward(0)
            self._finished = True
            return [], "stop"
        self.stats.forward(1)
        self.stats.observe("bonus", 0, 1)
        done = self.chooser.commit(choice.token)
        self.state.output.append(choice.token)
        self.choices.append(choice)
        finish = "stop" if done else "length" if self.max_tokens <= 1 else None
        self._finished = finish is not None
        return [choice], finish

    def _draft(self, root: int) -> tuple[TokenTree, list[Unit]]:
        """The drafters' proposals merged in their order into one tree of at most the decoder's budget, the
        units the drafters declared taking it first; and those units."""
        budget = self.decoder.budget
        # Every drafter may propose a full tree (a hint drafted whole must not be cut to the room the schema
        # drafter left); the merge is trimmed to the budget afterwards.
        tree = TokenTree(root=root, budget=budget * max(1, len(self.decoder.drafters)))
        self.state.units.clear()
        self._merge(tree, budget)
        units = list(self.state.units)
        if tree.drafts > budget:
            first = dict.fromkeys(node for unit in units for node in unit_nodes(tree, unit.tokens))
            rest = [node for node in range(1, len(tree)) if node not in first]
            # Units hang from the root and the rest is in insertion order (parents first): every prefix keeps
            # each kept node's parent.
            tree = tree.subtree([0, *first, *rest][: budget + 1])
        tree.budget = budget
        return tree, units

    def _merge(self, tree: TokenTree, budget: int) -> None:
        matcher = self.state.matcher
        vocab = self.decoder.lm.vocab_size
        for drafter in self.decoder.drafters:
            if tree.drafts >= budget:
                break
            began = time.perf_counter()
            try:
                proposal = drafter.propose(self.state, budget)
            except Exception as exc:  # drafts are only proposals: a failing drafter costs speed, never the answer
                if not self.stats.drafter_errors[drafter.name]:
                    _log.warning("drafter %s failed (%s: %s); decoding goes on without it",
                                 drafter.name, type(exc).__name__, exc)
                self.stats.drafter_errors[drafter.name] += 1
                continue
            for leaf in proposal.leaves():
                if leaf == 0:
                    continue
                nodes = proposal.path(leaf)[1:]
                path = [proposal.tokens[n] for n in nodes]
                bad = next((i for i, token in enumerate(path) if not 0 <= token < vocab), None)
                if bad is not None:
                    path = path[:bad]  # ids the model has no embedding for would fail the whole forward
                if matcher is not None:
                    # A draft the grammar rejects can never be accepted: keep only its legal prefix.
                    path = path[: matcher.validate_tokens(path)]
                # Each node keeps its own source (a forced chain under a choice stays "schema"): the pruner
                # judges every node by its source's acceptance rate.
                parent = 0
                for node, token in zip(nodes, path):
                    child = tree.add(parent, token, proposal.sources[node])
                    if child is None:
                        break
                    parent = child
            self.stats.time(f"draft.{drafter.name}", time.perf_counter() - began)

    def _judge_units(self, tree: TokenTree, units: list[Unit], verdict: Verdict) -> None:
        """Teach the acceptance model whether each unit the forward checked was right as far as it was sent."""
        for unit in units:
            chain = [tree.tokens[node] for node in unit_nodes(tree, unit.tokens)]
            if not chain:
                continue
            matched = next((i for i, (a, b) in enumerate(zip(chain, verdict.tokens)) if a != b),
                           min(len(chain), len(verdict.tokens)))
            if matched < len(chain) and matched == len(verdict.tokens) and verdict.finish != "stop":
                continue  # the walk stopped before judging the rest (a near tie, the token limit): no evidence
            self.decoder.acceptance.observe(unit.source, matched == len(chain))

    def _recycle(self, token: int, logits: Any) -> None:
        torch = self.seq.torch
        self.state.successors[token] = torch.topk(logits, _RECYCLE_TOP).indices.tolist()

    def _count(self, tree: TokenTree, sources: list[str], ties: list[NearTie]) -> None:
        for source in set(tree.sources[1:]):
            self.stats.observe(source, tree.sources[1:].count(source), 0)
        for source in sources:
            self.stats.observe(source, 0, 1)
        self.stats.near_ties.extend(_tie(tie) for tie in ties)

    def close(self) -> None:
        """End the request (once): remember its calls for retrieval, stop its sidecar."""
        if self._closed:
            return
        self._closed = True
        if self.sidecar_job is not None:
            self.sidecar_job.cancel()
            self.stats.time("sidecar", self.sidecar_job.seconds)
        history = self.decoder.history
        if history is not None and self.state.output:
            history.add_output(self.state.text)


def _question(messages: Any) -> str:
    """The last user message's text, or "" (messages as OpenAI-style dicts)."""
    for message in reversed(list(messages or [])):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content if isinstance(content, str) else ""
    return ""


def _tie(tie: NearTie) -> dict[str, Any]:
    return {"position": tie.position, "token": tie.token, "runner_up": tie.runner_up,
            "margin": tie.margin, "plain_pass": tie.plain}
