"""Bench names -> the objects that implement them, imported only when asked for.

Library code never imports an environment; this table is the one place that
knows where each benchmark lives.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentspec.bench.protocol import Bench
from agentspec.data import DataSpec, data_report, resolve_data_dir, unverified_data
from agentspec.errors import ConfigError

BENCHES: dict[str, str] = {
    "tau2-telecom": "envs.tau2_telecom.bench:TelecomBench",
    "workspace-demo": "envs.workspace.bench:WorkspaceBench",
    "gaia": "envs.gaia.bench:GaiaBench",
    "appworld": "envs.appworld.bench:AppWorldBench",
    "mcp": "envs.mcp.bench:MCPBench",
}
TAU2_DOMAINS = frozenset({"tau2-telecom"})
"""Benches that are tau2 domains: :class:`~agentspec.bench.tau2.harness.Tau2Bench` wraps them."""
DATA: dict[str, str] = {"tau2-telecom": "envs.tau2_telecom.dataset:TAU2_DATA"}
SETUP: dict[str, str] = {"appworld": "envs.appworld.venv:setup_command"}
"""Benches whose engine needs setting up first (``agentspec bench setup NAME``): their setup functions."""
MACROS: dict[str, str] = {"tau2-telecom": "macros/tau2-telecom.json"}
"""Each bench's shipped macro library, relative to the repository root (``--mode smc`` loads it by default)."""

REPO_ROOT = Path(__file__).resolve().parents[2]


def _load(table: dict[str, str], name: str, what: str) -> Any:
    if name not in table:
        raise ConfigError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def open_bench(name: str, data_dir: str | Path | None = None, *, backend: str | None = None, max_steps: int = 200,
               max_errors: int = 10, options: Mapping[str, Any] | None = None) -> Bench[Any]:
    """The bench registered under ``name``, with its data from ``data_dir`` (or where the bench looks by default).

    ``backend`` picks the environment backend of a bench that offers several (``overlay``, ``copy``,
    ``docker``); ``max_steps`` and ``max_errors`` bound tau2's own episode loop; ``options`` are the bench's own
    settings (GAIA: ``levels``, ``search``).
    """
    cls = _load(BENCHES, name, "bench")
    if name in TAU2_DOMAINS:
        if backend is not None or options:
            raise ConfigError(f"{name} runs in-process and takes no bench options (--backend, --level, --search-backend)")
        from agentspec.bench.tau2.harness import Tau2Bench

        return Tau2Bench(cls.from_data_dir(data_dir), max_steps=max_steps, max_errors=max_errors)
    _check_options(name, cls, options or {})
    return cls.from_data_dir(data_dir, **({"backend": backend} if backend else {}), **dict(options or {}))


def bench_options_of(cls: Any) -> list[str]:
    """The options a bench class takes (``--bench-option KEY=VALUE``): the keywords its ``from_data_dir`` names, or,
    where it passes them on to the class, its constructor's."""
    def named(function: Any) -> list[str]:
        parameters = inspect.signature(function).parameters.values()
        return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY
                or (p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name not in ("self", "cls", "data_dir"))]

    own = [name for name in named(cls.from_data_dir) if name not in ("backend", "max_steps", "max_errors")]
    return own or [name for name in named(cls.__init__) if name not in ("backend", "max_steps", "max_errors")]


def _check_options(name: str, cls: Any, options: Mapping[str, Any]) -> None:
    """Refuse an option the bench does not take, naming the ones it does (it would otherwise be dropped unread)."""
    known = bench_options_of(cls)
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
        raise ConfigError(f"--bench-option {unknown[0]}: bench {name} has no such option; {takes}")


def data_spec(name: str) -> DataSpec:
    """The data files the bench ``name`` needs."""
    return _load(DATA, name, "data set")


def bench_data(name: str | None, data_dir: str | None = None, *, unverified: bool = False) -> dict[str, Any] | None:
    """:func:`~agentspec.data.data_report` of bench ``name``'s data (``data_verified``, each file's sha256), for a
    bench whose data agentspec verifies; None for any other.  ``unverified``: data that fails its hash check is
    reported, not refused (``--unverified-data``)."""
    if name is None or name not in DATA:
        return None
    data = data_spec(name)
    with unverified_data(unverified):
        return data_report(data, resolve_data_dir(data, data_dir))


def shipped_macros(name: str) -> Path:
    """The macro library shipped for bench ``name``; :class:`ConfigError` when there is none to be found.

    A source checkout (or an editable install) has it under ``macros/``; an
    installed wheel does not carry ``macros/``, so there ``--macros`` is needed.
    """
    if name not in MACROS:
        raise ConfigError(f"mode smc needs --macros FILE: bench {name!r} ships no macro library")
    path = REPO_ROOT / MACROS[name]
    if not path.is_file():
        raise ConfigError(f"mode smc needs --macros FILE: the shipped library {MACROS[name]} is not at {path}")
    return path


def setup_bench(name: str, args: Any) -> dict[str, Any]:
    """Set up what bench ``name`` runs on (AppWorld: its own venv); its JSON summary.  Idempotent."""
    if name not in SETUP and name in BENCHES:
        raise ConfigError(f"bench {name!r} needs no setup (benches with a setup: {', '.join(sorted(SETUP))})")
    return {"bench": name, **_load(SETUP, name, "bench setup")(args)}
