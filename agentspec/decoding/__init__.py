"""ToolSpec decoding: lossless tree-speculative decoding of tool calls, its drafters and its verifier.

ToolSpec (DESIGN.md, "Token-level ToolSpec decoder") stands on the local
engine (:mod:`agentspec.engine`: the model, its KV cache, the tool grammar,
the greedy choice and the generation protocol) and imports nothing from the
server (:mod:`agentspec.serve`).  One module per idea: the draft tree is the
engine's :class:`~agentspec.engine.token_tree.TokenTree` (its 4D mask and
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
it a :class:`~agentspec.engine.generation.Generator` for ``agentspec serve
--decoder toolspec``, with its per-request :class:`RequestContext`.  Needs the
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
from agentspec.decoding.hint_drafter import HintDrafter as HintDrafter
from agentspec.decoding.recycling_drafter import RecyclingDrafter as RecyclingDrafter
from agentspec.decoding.retrieval_drafter import CallHistory as CallHistory
from agentspec.decoding.retrieval_drafter import RetrievalDrafter as RetrievalDrafter
from agentspec.decoding.schema_drafter import SchemaDrafter as SchemaDrafter
from agentspec.decoding.serving import RequestContext as RequestContext
from agentspec.decoding.sidecar import Sidecar as Sidecar
from agentspec.decoding.stats import DraftStats as DraftStats
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
    "Hint",
    "HintBox",
    "HintDrafter",
    "NearTie",
    "RecyclingDrafter",
    "RequestContext",
    "RetrievalDrafter",
    "SchemaDrafter",
    "Sidecar",
    "ToolSpecDecoder",
    "Verifier",
    "default_drafters",
]
