"""Who decides the next call: the authority (official) and the speculator (fast guesses).

Both see the same thing: the task's committed history of (call, observation) pairs, which for the speculator
continues with its own not-yet-confirmed drafts.  A :class:`~agentspec.runtime.policies.protocol.Decision` is a call,
or ``None`` for "done".

The parts, by kind of policy: what every policy is and sees (:mod:`~agentspec.runtime.policies.protocol`); scripted
ones for studying the runtime (:mod:`~agentspec.runtime.policies.scripted`: ``OracleAuthority`` replays gold calls,
``NoisyOracleSpeculator`` predicts the true next call with probability P); and ``LLMPolicy``, a model behind the
OpenAI-compatible client, usable in either role (:mod:`~agentspec.runtime.policies.llm`).
"""
