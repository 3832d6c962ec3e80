"""Verify a pre-executed chain of tool calls in one forward: ``POST /v1/agentspec/verify_chain`` (issue 29).

A macro's steps (call, real observation, call, ...) are a draft one level up
from tokens.  Step k is *accepted* when the model, deciding greedily at the
prompt P_k (the conversation plus the messages of steps 0..k-1, rendered by
the chat path's :func:`~agentspec.serve.prompt.render_prompt`), writes exactly
the call C_k (:func:`~agentspec.engine.grammar.render_call`, the text the
tool grammar makes).  The answer is the longest accepted prefix of steps and
the model's own first tokens after it.

How: the token paths S_k = P_k + C_k usually extend each other (S_k is a
prefix of P_{k+1}: the template writes the call back as the model wrote it),
so one causal forward over the last path computes every row the check needs;
where they do not, the paths become a :class:`~agentspec.engine.token_tree.TokenTree`
and one tree forward computes them.  Template and observation tokens are
forced; each call token must be :class:`~agentspec.engine.greedy.GreedyChooser`'s
choice under the tool grammar (the chat path's ``tool_choice: required``
grammar), exactly what plain greedy and the ToolSpec decoder pick.  Two
cases take another forward, as in the ToolSpec verifier:

* a near tie (top-2 allowed logits closer than ``NEAR_TIE``) is decided by a
  plain one-token pass, not by the long forward (rounding could flip it);
* the model writing the same text in other tokens (``"Par" "is"`` for the
  tokenizer's ``"Paris"``) is not a rejection: the rest of the call is
  re-tokenised after the model's token and checked in a new forward.

The answer: ``accepted`` steps of ``steps``; ``rejected_at`` (None when all
are accepted) names the first rejected step, the index of its first call
token the model does not write (``token``), and the call's text through that
token as the chain has it (``expected_text``) and as the model writes it
(``greedy_text``); ``next_text`` is the model's own start of its next turn:
``greedy_text`` at a rejection, else (when the last step carries messages)
the tool grammar's forced start plus the model's first free token.
``forwards`` counts model forwards (one for most chains), ``prompt_tokens``
the tokens reused (``cached_tokens``) plus those computed.

The conversation's prefix comes from the engine's prefix cache, and the
accepted path goes back into it, so the decision after the chain starts
from there.  :class:`ChainJob` is the engine's unit of work
(:class:`~agentspec.engine.scheduler.ForwardJob`); :func:`prepare_chain` turns a
request body into one (every mistake a 400 before any model work).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.engine.grammar import GrammarConstraint, render_call, tool_grammar
from agentspec.engine.greedy import NEAR_TIE, Choice, GreedyChooser
from agentspec.engine.kv_cache import Reuse, TargetSequence
from agentspec.engine.model import LocalModel
from agentspec.engine.scheduler import Engine
from agentspec.engine.sequence_job import SequenceJob
from agentspec.engine.token_tree import TokenTree
from agentspec.errors import ConfigError
from agentspec.serve.completions import check_prompt_size, check_tools
from agentspec.serve.prompt import render_prompt
from agentspec.serve.protocol import APIError, ChainRequest, ChatMessage, ChatRequest, parse_chain_request

__all__ = ["MAX_TREE_TOKENS", "ChainJob", "ChainVerdict", "StepPath", "prepare_chain"]

MAX_TREE_TOKENS = 4096
"""Tokens a tree forward may hold past the paths' common prefix (its mask is tokens x context): a chain whose
step prompts do not extend each other and need more is refused (413 ``chain_too_large``)."""


@dataclass
class StepPath:
    """One decision to check: the prompt's tokens, then the call's (the next turn's forced start, when final)."""

    prompt: list[int]
    call: list[int]
    text: bytes
    """The call's text (``b""`` for the final path)."""
    final: bool = False
    """The next turn after the last step: only the model's first free token is read, nothing is checked."""

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.call


@dataclass
class ChainVerdict:
    """What a verification found (the response body of ``verify_chain``, less the model-independent parts)."""

    steps: int
    accepted: int = 0
    rejected_at: dict[str, Any] | None = None
    next_text: str | None = None
    forwards: int = 0
    prompt_tokens: int = 0
    """Tokens the verification covered: ``cached_tokens`` reused, plus every token it computed."""
    cached_tokens: int = 0
    rechecks: int = 0
    """Near ties decided by a plain one-token pass, and re-tokenised call rests (each one more forward)."""
    near_ties: list[dict[str, Any]] = field(default_factory=list)

    def body(self, seconds: float) -> dict[str, Any]:
        return {"accepted": self.accepted, "steps": self.steps, "rejected_at": self.rejected_at,
                "next_text": self.next_text, "forwards": self.forwards, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "rechecks": self.rechecks, "verify_s": round(seconds, 4)}


def prepare_chain(body: bytes, engines: dict[str, Engine]) -> tuple[ChainRequest, Engine, ChainJob]:
    """Validate ``body`` and build its :class:`ChainJob` (blocking: run it in a worker thread)."""
    request = parse_chain_request(body)
    engine = engines.get(request.model)
    if engine is None:
        raise APIError(404, f"the model {request.model!r} does not exist; served: {', '.join(engines)}",
                       code="model_not_found", param="model")
    lm = engine.lm
    check_tools(request.tools, lm.ll_tokenizer)
    try:
        constraint = GrammarConstraint(tool_grammar(request.tools, ll_tokenizer=lm.ll_tokenizer), lm.ll_tokenizer,
                                       lm.vocab_size)
    except ConfigError as exc:
        raise APIError(400, str(exc), code="invalid_schema", param="tools") from None
    prompts = _prompts(request, engine)
    paths = [StepPath(prompt, *_call_tokens(lm, step.call.name, step.call.arguments))
             for prompt, step in zip(prompts, request.chain)]
    if request.chain[-1].messages:  # the next turn after an all-accepted chain: its forced start, then one choice
        forced = list(constraint.matcher.deep_copy().compute_ff_tokens())
        paths.append(StepPath(prompts[-1], forced, b"", final=True))
    for path in paths:
        if len(path.tokens) >= lm.context_length:
            raise APIError(400, f"this model's maximum context length is {lm.context_length} tokens; a chain step "
                           f"needs {len(path.tokens) + 1}", code="context_length_exceeded", param="chain")
    job = ChainJob(lm, paths, constraint.matcher, prefill_chunk=engine.prefill_chunk, near_tie=_near_tie(engine))
    if not job.linear and job.tree_tokens > MAX_TREE_TOKENS:
        raise APIError(413, f"the chain's step prompts do not extend each other and need {job.tree_tokens} tokens "
                       f"in one tree forward; at most {MAX_TREE_TOKENS}", code="chain_too_large", param="chain")
    return request, engine, job


def _near_tie(engine: Engine) -> float:
    """The engine's ToolSpec verifier's near-tie margin (``--decoder toolspec``), else the default one."""
    verifier = getattr(getattr(engine.decoder, "decoder", None), "verifier", None)
    return float(getattr(verifier, "near_tie", NEAR_TIE))


def _prompts(request: ChainRequest, engine: Engine) -> list[list[int]]:
    """The tokens of P_0..P_n (P_n only when the last step has messages), rendered as a chat request would be."""
    conversations: list[list[ChatMessage]] = [list(request.messages)]
    for step in request.chain:
        conversations.append([*conversations[-1], *step.messages])
    if not request.chain[-1].messages:
        conversations.pop()
    texts = []
    for messages in conversations:
        chat = ChatRequest(model=request.model, messages=messages, tools=request.tools)
        texts.append(render_prompt(engine.lm, chat))
    check_prompt_size(max(texts, key=len), engine)  # the longest first: nothing over the context is tokenised
    return [engine.lm.encode(text) for text in texts]


def _call_tokens(lm: LocalModel, name: str, arguments: dict[str, Any]) -> tuple[list[int], bytes]:
    text = render_call(name, arguments).encode()
    return list(lm.ll_tokenizer.tokenize_bytes(text)), text


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ChainJob(SequenceJob):
    """One chain verification on the engine's steps (:class:`~agentspec.engine.scheduler.ForwardJob`).

    ``paths`` are the decisions in order; ``matcher`` is a fresh llguidance
    matcher of the tool grammar (each decision gets a copy).  :meth:`run`
    returns the :class:`ChainVerdict`.
    """

    runs_model = True

    def __init__(self, lm: LocalModel, paths: list[StepPath], matcher: Any, *, prefill_chunk: int = 2048,
                 near_tie: float = NEAR_TIE) -> None:
        shared = min(_common(paths[0].tokens, path.tokens) for path in paths)
        # Everything the paths share but their last shared token is prefilled ahead (in chunks, like a prompt);
        # that token roots the verification forward.
        super().__init__(lm, paths[0].tokens[: max(min(shared, len(paths[0].prompt)) - 1, 0)],
                         prefill_chunk=prefill_chunk)
        self.paths = paths
        self.matcher = matcher
        self.near_tie = near_tie
        self.lookup_tokens = paths[0].tokens
        self.linear = all(_common(a.tokens, b.tokens) == len(a.tokens) for a, b in zip(paths, paths[1:]))
        trie = TokenTree(root=-1, budget=sum(len(p.tokens) for p in paths))
        for path in paths:
            trie.add_path(path.tokens, "chain")
        self.tree_tokens = trie.drafts - len(self.ahead)
        """Tokens the verification forwards hold past the prefilled prefix (all paths' distinct tokens)."""
        self.verdict = ChainVerdict(steps=sum(not path.final for path in paths))
        self.computed = 0
        """Tokens computed so far (prefill, forwards, plain passes)."""
        self.fork_forwards = 0

    # ------------------------------------------------------------ the engine's side

    @property
    def prefilled(self) -> bool:
        # Only whole chunks go ahead; a shorter rest rides in the verification forward.
        return self._remaining < self.chunk

    def start(self, reuse: Reuse) -> None:
        self.verdict.cached_tokens = self._open(reuse)

    def prefill(self) -> None:
        assert self.seq is not None
        chunk = self._next_chunk()
        self.seq.forward(chunk)
        self._covered.extend(chunk)
        self.computed += len(chunk)

    def run(self) -> ChainVerdict:
        """Check every decision in order until one differs (module docstring)."""
        assert self.seq is not None
        walk = _Walk(self, self.seq, self._covered, self.paths)
        walk.run()
        verdict = self.verdict
        verdict.accepted, verdict.rejected_at, verdict.next_text = walk.accepted, walk.rejected_at, walk.next_text
        verdict.forwards = self.seq.forwards + self.fork_forwards
        verdict.prompt_tokens = verdict.cached_tokens + self.computed
        return verdict


class _Walk:
    """Checks decisions in order over one key/value cache, a forward at a time (most chains need one).

    ``covered`` lists the tokens ``seq`` holds.  A near tie is decided by a
    plain pass on a *fork* of the cache (a new sequence over a prefix of its
    key/values: the forward's other rows stay valid), and so is the rest of a
    call the model writes in other tokens (a walk of its own on the fork);
    where the path is not a contiguous prefix of the cache (a later branch of
    a tree), the cache is cut back instead and the walk goes on in a new forward.
    """

    def __init__(self, job: ChainJob, seq: TargetSequence, covered: list[int], paths: list[StepPath],
                 resume: tuple[int, GreedyChooser] | None = None) -> None:
        self.job = job
        self.lm = job.lm
        self.seq = seq
        self.covered = covered
        self.paths = paths
        self.accepted = 0
        self.rejected_at: dict[str, Any] | None = None
        self.next_text: str | None = None
        self.finished = False
        self.step = 0
        self.pos = 0
        if resume is None:
            self.chooser = self._enter(0)
        else:  # the rest of a call whose earlier tokens (and grammar state) are decided already
            self.pos, self.chooser = resume

    def run(self) -> None:
        while not self.finished:
            self.round()

    def _enter(self, step: int) -> GreedyChooser:
        """Begin decision ``step``: a fresh grammar state; the final path's forced start is consumed unchecked."""
        self.step = step
        path = self.paths[step]
        chooser = GreedyChooser(self.lm.stop_token_ids, matcher=self.job.matcher.deep_copy(),
                                vocab_size=self.lm.vocab_size)
        if path.final:
            for token in path.call:
                chooser.commit(token)
            self.pos = len(path.tokens)
        else:
            self.pos = len(path.prompt)
        return chooser

    # ------------------------------------------------------------ one forward

    def round(self) -> None:
        """One forward over the paths that share the current one's root, then walk as far as it allows."""
        paths = self.paths
        current = paths[self.step].tokens
        base = min(_common(self.covered, current), self.pos - 1)
        self._crop(base)
        tree = TokenTree(root=current[base], budget=sum(len(p.tokens) for p in paths))
        nodes: dict[int, list[int]] = {}
        for index in range(self.step, len(paths)):
            tokens = paths[index].tokens
            if tokens[: base + 1] != current[: base + 1]:
                break  # this path and the ones after it need a forward of their own
            nodes[index] = [0, *_add(tree, tokens[base + 1:])]
        chain = all(parent == node - 1 for node, parent in enumerate(tree.parents))
        hidden = self.seq.forward_hidden(tree.tokens) if chain else self.seq.forward_nodes(tree, 0, base)
        self.job.computed += len(tree)
        index = self.step
        while index in nodes and not self.finished:
            outcome = self._walk(hidden, base, nodes[index])
            if outcome == "again":
                return
            index += 1
        if not self.finished:  # the next decision's path left the tree: keep the last one walked, go on
            last = index - 1
            self._keep(base, nodes[last], paths[last].tokens, len(paths[last].tokens))

    def _walk(self, hidden: Any, base: int, nodes: list[int]) -> str:
        """Check the current decision's tokens on ``hidden``: ``"next"`` decision, ``"again"`` (a new forward),
        or ``"done"`` (:attr:`finished`)."""
        path = self.paths[self.step]
        tokens = path.tokens
        end = len(tokens) + 1 if path.final else len(tokens)
        if self.pos - 1 < base:
            return "again"
        free = self._free(path, end)
        logits = dict(zip(free, self.seq.logits(hidden, [nodes[i - 1 - base] for i in free]))) if free else {}
        for i in range(self.pos, end):
            forced = self.chooser.matcher.compute_ff_tokens()
            if forced:  # the grammar allows one token here: plain decoding emits it without asking the model
                outcome = self._decide(Choice(forced[0], 0.0, math.inf, -1), i, None, base, nodes)
                if outcome != "ok":
                    return outcome
                continue
            row = logits[i] if i in logits else self.seq.logits(hidden, [nodes[i - 1 - base]])[0]
            choice = self.chooser.choose(row, self.job.near_tie)
            fork = None
            if choice.margin < self.job.near_tie:
                # Decide it in a plain pass (the ToolSpec verifier's recheck): the row's token alone after the
                # path before it, as plain greedy decoding computes it.
                if _contiguous(nodes, i - 1 - base):
                    fork = self._fork(i - 1)
                    choice = self._plain(fork, [], tokens[i - 1], i)
                else:
                    self._keep(base, nodes, tokens, i - 1)
                    choice = self._plain(self.seq, self.covered, tokens[i - 1], i)
                    outcome = self._decide(choice, i, None, base, nodes, cut=True)
                    return "again" if outcome == "ok" and not self.finished else outcome
            outcome = self._decide(choice, i, fork, base, nodes)
            if outcome != "ok":
                return outcome
        return self._accept(base, nodes)

    def _free(self, path: StepPath, end: int) -> list[int]:
        """The positions from :attr:`pos` whose token the model chooses (the grammar forces the others), as far
        as the chain's tokens follow the grammar: only their rows need logits (the output head is the costly
        part of a row: 151,936 x 896 for Qwen2.5-0.5B)."""
        matcher = self.chooser.matcher.deep_copy()
        tokens = path.tokens
        free = []
        for i in range(self.pos, end):
            if not matcher.compute_ff_tokens():
                free.append(i)
            if i >= len(tokens) or not matcher.consume_tokens([tokens[i]]) or matcher.is_stopped():
                break
        return free

    def _decide(self, choice: Choice, i: int, fork: TargetSequence | None, base: int, nodes: list[int],
                cut: bool = False) -> str:
        """Judge the model's token for position ``i``: ``"ok"`` (go on), ``"next"`` (this decision is accepted),
        ``"again"`` (a new forward) or ``"done"``.  ``fork`` holds the path through ``i - 1`` when a plain pass
        decided it; ``cut``: the cache itself was cut back to there."""
        path = self.paths[self.step]
        tokens = path.tokens
        if path.final:
            self.next_text = self._text([*path.call, choice.token])
            self._finish(base, nodes, tokens, len(tokens), cut)
            return "done"
        expected = tokens[i]
        if choice.token == expected:
            self.chooser.commit(expected)
            if cut:
                self.pos = i + 1
                if self.pos == len(tokens):
                    self._accept_cut()
            return "ok"
        written = i - len(path.prompt)
        done = b"".join(self.lm.token_bytes(t) for t in path.call[:written])
        rest = path.text[len(done):]
        mine = self.lm.token_bytes(choice.token)
        if not mine or not rest.startswith(mine) or self.chooser.is_stop(choice.token):
            greedy = self._text([*path.call[:written], choice.token])
            self.rejected_at = {"step": self.step, "token": written,
                                "expected_text": self._text(path.call[: written + 1]), "greedy_text": greedy}
            self.next_text = greedy
            self._finish(base, nodes, tokens, i, cut)
            return "done"
        # The same text in other tokens: not a different call.  Re-tokenise the rest after the model's token.
        self.chooser.commit(choice.token)
        self.job.verdict.rechecks += 1
        after = list(self.lm.ll_tokenizer.tokenize_bytes(rest[len(mine):])) if rest[len(mine):] else []
        resegmented = StepPath(path.prompt, [*path.call[:written], choice.token, *after], path.text)
        if fork is None and not cut and _contiguous(nodes, i - base):
            fork = self._fork(i)
        if fork is None:  # the cache is (or is cut back to) the path before ``i``: go on in a new forward
            if not cut:
                self._keep(base, nodes, tokens, i)
            self.paths[self.step] = resegmented
            self.pos = i + 1
            if self.pos == len(resegmented.tokens):
                self._accept_cut()
            return "again"
        return self._rest_on_fork(fork, resegmented, i, base, nodes)

    def _rest_on_fork(self, fork: TargetSequence, path: StepPath, i: int, base: int, nodes: list[int]) -> str:
        """Check the re-tokenised rest of the current call on ``fork`` (which holds the path before ``i``); this
        walk's forward stays valid for the decisions after it."""
        walk = _Walk(self.job, fork, path.tokens[:i], [path], resume=(i + 1, self.chooser))
        before = fork.forwards
        if walk.pos < len(path.tokens):
            walk.run()
        self.job.fork_forwards += fork.forwards - before
        if walk.rejected_at is not None:
            self.rejected_at = {**walk.rejected_at, "step": self.step}
            self.next_text = walk.next_text
            self._finish(base, nodes, self.paths[self.step].tokens, i, cut=False)
            return "done"
        return self._accept(base, nodes)

    def _accept(self, base: int, nodes: list[int]) -> str:
        """The current decision's call is the model's own: count it, move to the next decision (if any)."""
        self.accepted += 1
        if self.step + 1 == len(self.paths):
            tokens = self.paths[self.step].tokens
            self._finish(base, nodes, tokens, len(tokens), cut=False)
            return "done"
        self.chooser = self._enter(self.step + 1)
        return "next"

    def _accept_cut(self) -> None:
        """A decision completed after the cache was cut back (its last tokens are not all in it yet)."""
        self.accepted += 1
        if self.step + 1 == len(self.paths):
            self.finished = True
        else:
            self.chooser = self._enter(self.step + 1)

    def _finish(self, base: int, nodes: list[int], tokens: list[int], upto: int, cut: bool) -> None:
        if not cut:
            self._keep(base, nodes, tokens, upto)
        self.finished = True

    # ------------------------------------------------------------ passes and the cache

    def _fork(self, length: int) -> TargetSequence:
        """A new sequence over the first ``length`` cached tokens (this one's key/values are not written)."""
        return TargetSequence(self.lm, (length, self.seq.layers()))

    def _plain(self, seq: TargetSequence, covered: list[int], token: int, position: int) -> Choice:
        hidden = seq.forward_hidden([token])
        covered.append(token)
        if seq is not self.seq:
            self.job.fork_forwards += 1
        self.job.computed += 1
        self.job.verdict.rechecks += 1
        choice = self.chooser.choose(seq.logits(hidden, [0])[0], self.job.near_tie)
        if choice.margin < self.job.near_tie:
            self.job.verdict.near_ties.append({"step": self.step, "position": position, "token": choice.token,
                                               "runner_up": choice.runner_up, "margin": choice.margin})
        return choice

    def _crop(self, length: int) -> None:
        if length < self.seq.length:
            self.seq.keep(length, [])
        del self.covered[length:]

    def _keep(self, base: int, nodes: list[int], tokens: list[int], upto: int) -> None:
        """Keep the cache of ``tokens[:upto]`` (the path through ``nodes`` after the ``base`` cached tokens)."""
        self.seq.keep(base, nodes[: upto - base])
        self.covered[base:] = tokens[base:upto]

    def _text(self, tokens: Sequence[int]) -> str:
        return b"".join(self.lm.token_bytes(t) for t in tokens).decode("utf-8", "replace")


def _contiguous(nodes: list[int], count: int) -> bool:
    """Whether the path's first ``count`` nodes are the tree's first nodes (a prefix of the cache, in order)."""
    return nodes[:count] == list(range(count))


def _add(tree: TokenTree, tokens: Sequence[int]) -> list[int]:
    """Add ``tokens`` as a path under the root; their node indices (shared nodes reused)."""
    nodes, parent = [], 0
    for token in tokens:
        child = tree.add(parent, token, "chain")
        assert child is not None, "the tree's budget holds every path"
        nodes.append(child)
        parent = child
    return nodes
