"""The governor: speculation never makes an agent slower.

A speculator that shares the authority's machine (a model on the same cores) slows the authority's decisions while
it runs; a speculator that rarely guesses right saves little.  The governor measures both during a run, per
speculator, and pauses one whose cost exceeds its saving:

* **cost**: how much longer the authority's decisions take while the speculator runs.  Each decision is observed
  with the share of its time each speculator had a request in flight (:meth:`Governor.speculating`); the decisions
  no speculator overlapped are the baseline.  Decisions differ in length by where they fall in a task (a first call
  prefills the ticket, a last "done" is short), so each is compared with the baseline of its own *stratum* (how
  many steps the task had committed, the last stratum pooling the rest).  A speculator's slowdown is the mean, over
  the decisions it overlapped, of (duration - its stratum's baseline mean), per unit of overlap, and its cost that
  slowdown times the overlap it had in all, plus any time the authority waited for its guess (:meth:`observe_wait`,
  draft-first).
* **saving**: tool time its committed drafts hid (:meth:`observe_saving`) and authority decisions its drafts made
  unnecessary (:meth:`observe_skipped`, valued at the baseline's mean decision time).

A verdict needs evidence (``min_overlapped`` decisions the speculator overlapped and ``min_clean`` baseline ones)
and a margin: the speculator is paused only when the lower confidence bound of its cost (``z`` standard errors
below the estimate) exceeds its saving.  While a stratum the speculator overlapped has too small a baseline, the
governor asks the executor to hold speculation for one decision of that stratum in ``hold_every``
(:meth:`Governor.hold`), which is how it gets one.  A paused speculator may be re-probed after
``reprobe_after`` decisions (its overlap evidence starts again).

Verified macro commits (lossless SMC) have a cost of their own, on every clock: the authority's verification of a
fired chain is on the critical path, and a chain it rejects saved nothing.  The governor keeps that account too
(:meth:`observe_verification`): the seconds verifications took against the decisions their accepted steps spared
(each valued at the mean decision observed), and once ``min_verifications`` have been made and they cost more than
they saved, it pauses macro commits for the mode (:meth:`verifying`); SA goes on.  Its report names it
:data:`~agentspec.runtime.governor.evidence.VERIFICATION`.

One governor serves a whole mode (every task, also concurrent ones): the evidence accumulates across tasks.  It
only observes and decides; the executor (:class:`~agentspec.runtime.executor.ExecutionLoop`) tells it what
happened, and :class:`~agentspec.runtime.governor.panel.SpeculatorPanel` asks only the speculators it lets run.

The methods named here are :class:`~agentspec.runtime.governor.rule.Governor`'s.  The parts: what the governor
knows and how sure a verdict must be (:mod:`~agentspec.runtime.governor.evidence`), the rule that reads it
(:mod:`~agentspec.runtime.governor.rule`), and the panel of speculators it governs
(:mod:`~agentspec.runtime.governor.panel`).
"""
