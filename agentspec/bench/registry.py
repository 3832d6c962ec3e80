"""Bench names -> the objects that implement them, imported only when asked for.

Library code never imports an environment; this table is the one place that
knows where each benchmark lives.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentspec.data import DataSpec
from agentspec.errors import ConfigError

BENCHES: dict[str, str] = {"tau2-telecom": "envs.tau2_telecom.bench:TelecomBench"}
DATA: dict[str, str] = {"tau2-telecom": "envs.tau2_telecom.dataset:TAU2_DATA"}


def _load(table: dict[str, str], name: str, what: str) -> Any:
    if name not in table:
        raise ConfigError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def bench_class(name: str) -> Any:
    """The bench class registered under ``name`` (e.g. ``tau2-telecom``)."""
    return _load(BENCHES, name, "bench")


def data_spec(name: str) -> DataSpec:
    """The data files the bench ``name`` needs."""
    return _load(DATA, name, "data set")
