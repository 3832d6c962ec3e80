"""The miner's normaliser, which lives in :mod:`agentspec.normalize` (below mining and the learned speculator,
which both use it); re-exported here for the mining modules and their users."""

from __future__ import annotations

from agentspec.normalize import (
                                 GENERIC_PATTERNS,
                                 KEY_TYPE,
                                 Normalizer,
                                 Skeleton,
                                 ValuePattern,
                                 patterns_from_table,
                                 render,
)

__all__ = ["GENERIC_PATTERNS", "KEY_TYPE", "Normalizer", "Skeleton", "ValuePattern", "patterns_from_table", "render"]
