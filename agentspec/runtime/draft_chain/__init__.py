"""The draft chain and the speculation worker that keeps it ``depth`` deep.

The speculator proposes the calls after the committed history, q1..qD, and each runs in its own fork of the live
state (a draft's fork continues the previous draft's).  With ``spec_width`` K > 1 each position's next K-1 ranked
guesses (``Decision.alternatives``) run too, each in its own fork of the same parent state.  The chain is reset
(model requests and tool work cancelled for real, forks discarded, waste counted) whenever live state moves past
it; the worker then restarts from the new state.  External effects are never drafted past.

The chain commits nothing: :class:`~agentspec.runtime.executor.ExecutionLoop` decides which drafts commit and
tells the chain (:meth:`~agentspec.runtime.draft_chain.drafts.DraftChain.advance`).  Its gates let the loop's wait
policies pause the worker: ``live_gate`` while a live call runs, ``turn`` while a draft-first authority decides,
``hold`` while the governor times a decision without speculation.

The parts, one job each: what the chain needs of the loop (:mod:`~agentspec.runtime.draft_chain.host`), the
chain's drafts and what the loop asks of them (:mod:`~agentspec.runtime.draft_chain.drafts`), the worker that
keeps it deep (:mod:`~agentspec.runtime.draft_chain.worker`), the gates that pause the worker
(:mod:`~agentspec.runtime.draft_chain.gates`) and the alternatives run beside a draft
(:mod:`~agentspec.runtime.draft_chain.alternatives`).
"""
