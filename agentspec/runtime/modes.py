"""Execution modes, parsed once: ``sequential``, ``sa``, ``smc``, each with or without SPORK probes.

    >>> parse_modes("sequential,smc+spork")
    [Mode(base='sequential', spork=False), Mode(base='smc', spork=True)]
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from agentspec.errors import ConfigError

BaseMode = Literal["sequential", "sa", "smc"]
BASE_MODES: tuple[BaseMode, ...] = ("sequential", "sa", "smc")
NOISY = "noisy-oracle:"
"""Prefix of ``--speculator-model noisy-oracle:P`` (run and mine): a simulated speculator that predicts the
oracle's next call with probability P, see :func:`noisy_oracle_p`."""


class Mode(BaseModel):
    """One execution mode: ``sequential``, ``sa`` or ``smc``, with or without SPORK probes."""

    model_config = ConfigDict(frozen=True)

    base: BaseMode = "sequential"
    spork: bool = False

    @classmethod
    def parse(cls, text: str) -> Mode:
        """``"smc+spork"`` -> smc with SPORK; ``"spork"`` -> sequential with SPORK."""
        parts = [p.strip() for p in text.split("+") if p.strip()]
        rest = [p for p in parts if p != "spork"]
        if not parts or len(rest) > 1 or (rest and rest[0] not in BASE_MODES):
            raise ConfigError(f"unknown mode {text!r}; choose sequential, sa, smc, spork, or X+spork")
        return cls(base=rest[0] if rest else "sequential", spork="spork" in parts)

    @property
    def name(self) -> str:
        """The mode as written on the command line and in results (``smc+spork``, ``spork``)."""
        if self.spork:
            return "spork" if self.base == "sequential" else f"{self.base}+spork"
        return self.base

    @property
    def speculates(self) -> bool:
        return self.base != "sequential"


def parse_modes(text: str) -> list[Mode]:
    """A comma list of modes (``sequential,sa,smc``)."""
    modes = [Mode.parse(m) for m in text.split(",") if m.strip()]
    if not modes:
        raise ConfigError(f"unknown mode {text!r}; choose sequential, sa, smc, spork or X+spork")
    return modes


def noisy_oracle_p(spec: str | None) -> float | None:
    """P of a ``--speculator-model noisy-oracle:P`` value, or None when ``spec`` names no noisy oracle.

    Read by the handlers of ``run`` and ``mine`` (not at parse time: ``spec`` may as well be a model endpoint).

        >>> noisy_oracle_p("noisy-oracle:0.8"), noisy_oracle_p("http://127.0.0.1:8000/v1")
        (0.8, None)
    """
    if spec == NOISY.rstrip(":"):
        raise ConfigError(f"--speculator-model {spec} needs its P, the chance each guess is the oracle's own call: "
                          f"{NOISY}P, e.g. {NOISY}0.8")
    if not spec or not spec.startswith(NOISY):
        return None
    try:
        p = float(spec[len(NOISY):])
    except ValueError as exc:
        raise ConfigError(f"--speculator-model {spec}: P must be a number in [0, 1]") from exc
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"--speculator-model {spec}: P must be in [0, 1]")
    return p
