"""The local inference engine: a model's weights on the CPU, its KV cache, token generation, batching and priority.

What runs a local model, bottom up, one module per job:

- the model and its layers: :mod:`~agentspec.engine.model` (:func:`load_model`, a :class:`LocalModel` loaded once
  per process), :mod:`~agentspec.engine.packed_linear` (linear layers packed once for oneDNN) and
  :mod:`~agentspec.engine.grouped_attention` (GQA attention over a masked tree without copying the cache);
- the KV cache: :mod:`~agentspec.engine.kv_cache` (one request's :class:`TargetSequence`, causal and tree forwards
  over a :class:`~agentspec.engine.token_tree.TokenTree`) and :mod:`~agentspec.engine.sequence_job` (the cache
  side of the engine's forward jobs);
- generation: :mod:`~agentspec.engine.generation` (the :class:`Generator` protocol a decoder implements, with
  :class:`SamplingParams` in and :class:`TokenOut` out), :mod:`~agentspec.engine.grammar` (tool definitions, the
  tool-call grammar, a request's :class:`GrammarConstraint`), :mod:`~agentspec.engine.greedy` (the one greedy
  chooser) and :mod:`~agentspec.engine.plain` (plain greedy or sampled decoding, the default :class:`Generator`);
- scheduling: :mod:`~agentspec.engine.scheduler` (the :class:`Engine`: concurrent requests stepped together,
  prefix KV reuse), :mod:`~agentspec.engine.batched_forward` (the rows of several requests in one forward) and
  :mod:`~agentspec.engine.priority` (a background request gives way to the foreground).

ToolSpec decoding (:mod:`agentspec.decoding`) plugs in as a :class:`Generator`; the HTTP server
(:mod:`agentspec.serve`) drives an :class:`Engine` per model.  Nothing here imports either.  Needs the ``[hf]``
extra (torch, transformers, llguidance), imported lazily; so are the names below::

    from agentspec.engine import Engine, SamplingParams, load_model
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "Engine": "agentspec.engine.scheduler",
    "Generator": "agentspec.engine.generation",
    "GrammarConstraint": "agentspec.engine.grammar",
    "GreedyChooser": "agentspec.engine.greedy",
    "LocalModel": "agentspec.engine.model",
    "ModelSource": "agentspec.engine.model",
    "PlainGenerator": "agentspec.engine.plain",
    "PrefixCache": "agentspec.engine.scheduler",
    "PriorityGate": "agentspec.engine.priority",
    "SamplingParams": "agentspec.engine.generation",
    "TargetSequence": "agentspec.engine.kv_cache",
    "TokenOut": "agentspec.engine.generation",
    "TokenStream": "agentspec.engine.generation",
    "TokenTree": "agentspec.engine.token_tree",
    "ToolDef": "agentspec.engine.grammar",
    "load_model": "agentspec.engine.model",
    "tool_grammar": "agentspec.engine.grammar",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'agentspec.engine' has no attribute {name!r}")
    return getattr(import_module(_LAZY[name]), name)
