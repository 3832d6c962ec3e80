"""Adapters that run agents written against other frameworks under agentspec's executor.

Each adapter lives in its own module and imports its framework there, so ``import agentspec.integrations`` costs
nothing and needs no optional extra: :mod:`agentspec.integrations.agents_sdk` needs ``agentspec[agents]``.
"""
