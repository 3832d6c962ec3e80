"""Token-level decoding: grammar, greedy choice, KV cache, ToolSpec tree decoding, and the server's seam.

The package stands on its own (it imports nothing from :mod:`agentspec.serve`).
What the server uses, it owns: :mod:`~agentspec.decoding.grammar` (tool
definitions, the tool-call grammar, a request's grammar state),
:mod:`~agentspec.decoding.greedy` (the one greedy chooser),
:mod:`~agentspec.decoding.kv_cache` (the one KV-cache construction: a
request's :class:`TargetSequence`), :mod:`~agentspec.decoding.generation`
(the :class:`Generator` protocol the server's engine drives, with its value
types) and :mod:`~agentspec.decoding.plain` (plain greedy or sampled
decoding, the default :class:`Generator`).

ToolSpec, lossless tree-speculative decoding of tool calls (DESIGN.md,
"Token-level ToolSpec decoder"), one module per idea:
:mod:`~agentspec.decoding.token_tree` (the draft tree, its 4D mask and
positions), :mod:`~agentspec.decoding.verifier` (one forward per tree,
greedy acceptance, KV of the accepted path only, near-tie accounting), the
drafters behind the one protocol of :mod:`~agentspec.decoding.drafter`
(:mod:`~agentspec.decoding.schema_drafter`,
:mod:`~agentspec.decoding.retrieval_drafter`,
:mod:`~agentspec.decoding.recycling_drafter`,
:mod:`~agentspec.decoding.hint_drafter`), the background
:mod:`~agentspec.decoding.sidecar`, :mod:`~agentspec.decoding.budget` (how big
a tree pays off), :mod:`~agentspec.decoding.stats` and the loop,
:mod:`~agentspec.decoding.decoder`.  :mod:`~agentspec.decoding.serving` makes
it a :class:`Generator` for ``agentspec serve --decoder toolspec``.  Needs the
``[hf]`` extra (torch, transformers, llguidance), imported lazily.
"""

from agentspec.decoding.budget import AcceptanceModel as AcceptanceModel
from agentspec.decoding.decoder import DecodeResult as DecodeResult
from agentspec.decoding.decoder import Generation as Generation
from agentspec.decoding.decoder import ToolSpecDecoder as ToolSpecDecoder
from agentspec.decoding.decoder import default_drafters as default_drafters
from agentspec.decoding.drafter import Drafter as Drafter
from agentspec.decoding.drafter import DraftRequest as DraftRequest
from agentspec.decoding.drafter import DraftState as DraftState
from agentspec.decoding.drafter import Hint as Hint
from agentspec.decoding.drafter import HintBox as HintBox
from agentspec.decoding.generation import Generator as Generator
from agentspec.decoding.generation import RequestContext as RequestContext
from agentspec.decoding.generation import SamplingParams as SamplingParams
from agentspec.decoding.generation import TokenOut as TokenOut
from agentspec.decoding.generation import TokenStream as TokenStream
from agentspec.decoding.grammar import GrammarConstraint as GrammarConstraint
from agentspec.decoding.grammar import ToolDef as ToolDef
from agentspec.decoding.grammar import tool_grammar as tool_grammar
from agentspec.decoding.greedy import GreedyChooser as GreedyChooser
from agentspec.decoding.hint_drafter import HintDrafter as HintDrafter
from agentspec.decoding.kv_cache import TargetSequence as TargetSequence
from agentspec.decoding.plain import PlainGenerator as PlainGenerator
from agentspec.decoding.recycling_drafter import RecyclingDrafter as RecyclingDrafter
from agentspec.decoding.retrieval_drafter import CallHistory as CallHistory
from agentspec.decoding.retrieval_drafter import RetrievalDrafter as RetrievalDrafter
from agentspec.decoding.schema_drafter import SchemaDrafter as SchemaDrafter
from agentspec.decoding.sidecar import Sidecar as Sidecar
from agentspec.decoding.stats import DraftStats as DraftStats
from agentspec.decoding.token_tree import TokenTree as TokenTree
from agentspec.decoding.verifier import NearTie as NearTie
from agentspec.decoding.verifier import Verifier as Verifier

__all__ = [
    "AcceptanceModel",
    "CallHistory",
    "DecodeResult",
    "DraftRequest",
    "DraftState",
    "DraftStats",
    "Drafter",
    "Generation",
    "Generator",
    "GrammarConstraint",
    "GreedyChooser",
    "Hint",
    "HintBox",
    "HintDrafter",
    "NearTie",
    "PlainGenerator",
    "RecyclingDrafter",
    "RequestContext",
    "RetrievalDrafter",
    "SamplingParams",
    "SchemaDrafter",
    "Sidecar",
    "TargetSequence",
    "TokenOut",
    "TokenStream",
    "TokenTree",
    "ToolDef",
    "ToolSpecDecoder",
    "Verifier",
    "default_drafters",
    "tool_grammar",
]
