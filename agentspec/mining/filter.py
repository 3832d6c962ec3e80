"""The reliability filter: keep a candidate when its Beta posterior is confidently above tau.

A candidate with ``k`` reproduced out of ``n`` labels has the posterior
Beta(k+1, n-k+1) on its reliability (uniform prior).  It is kept when
``n >= n_min`` and the lower ``delta``-quantile of that posterior,
:func:`~agentspec.macros.lower_bound` (exact, ``scipy.stats.beta.ppf``),
is at least ``tau``; the survivors are ranked by
``score = lcb * log1p(k) * length`` and the ``top`` best become macros::

    >>> config = FilterConfig()                    # delta 0.05, n_min 3, tau 0.5, top 200
    >>> round(lower_bound(19, 20, config.delta), 3)
    0.793

:func:`select` also returns the funnel: how many labels there were and how
many candidates survived each stage.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from agentspec.errors import ConfigError
from agentspec.macros import Macro, lower_bound
from agentspec.mining.candidates import Candidate
from agentspec.mining.labelling import Label


@dataclass(frozen=True, slots=True)
class FilterConfig:
    """The filter's parameters (the SMC defaults)."""

    delta: float = 0.05
    n_min: int = 3
    tau: float = 0.5
    top: int = 200

    def __post_init__(self) -> None:
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"delta must be in (0, 1), got {self.delta}")
        if self.n_min < 1 or self.top < 1:
            raise ConfigError("n_min and top must be >= 1")
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}")

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def macro_score(lcb: float, k: int, length: int) -> float:
    """Rank of a kept macro: confident, often reproduced and long macros first."""
    return lcb * math.log1p(k) * length


def macro_id(key: str) -> str:
    """A stable id from the skeleton, so re-mining keeps ids (and online statistics) attached."""
    return "m-" + hashlib.sha256(key.encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class Funnel:
    """How many labels, and candidates left after each stage of the filter."""

    labels: int
    candidates: int
    support_ge_n_min: int
    lcb_ge_tau: int
    kept: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def select(candidates: Sequence[Candidate], labels: dict[str, Label], config: FilterConfig) -> tuple[list[Macro], Funnel]:
    """Filter and rank labelled candidates into macros (best first)."""
    enough = []
    for candidate in candidates:
        label = labels.get(candidate.key, Label())
        if label.n >= config.n_min:
            enough.append((candidate, label, lower_bound(label.k, label.n, config.delta)))
    reliable = [(c, label, lcb) for c, label, lcb in enough if lcb >= config.tau]
    ranked = sorted(
        reliable, key=lambda item: (-macro_score(item[2], item[1].k, item[0].length), item[0].key)
    )[: config.top]
    macros = [
        Macro(
            id=macro_id(candidate.key),
            steps=list(candidate.steps),
            slots=dict(candidate.slots),
            n=label.n,
            k=label.k,
            lcb=lcb,
            score=macro_score(lcb, label.k, candidate.length),
            support=candidate.support,
            flow=candidate.flow,
        )
        for candidate, label, lcb in ranked
    ]
    funnel = Funnel(
        labels=sum(label.n for label in labels.values()),
        candidates=len(candidates),
        support_ge_n_min=len(enough),
        lcb_ge_tau=len(reliable),
        kept=len(macros),
    )
    return macros, funnel
