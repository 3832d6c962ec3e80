"""Bench names -> the classes that implement them, found through the ``agentspec.benches`` entry point group.

A bench registers itself the way a pytest plugin does: its distribution's metadata names the class, e.g. in
``pyproject.toml``::

    [project.entry-points."agentspec.benches"]
    my-bench = "my_package.bench:MyBench"

The library never names a bench's package: the names come from the installed distributions' metadata and a
class is imported only when its bench is asked for.  What a class offers besides ``from_data_dir`` (pinned data,
a setup step, a shipped macro library, being a tau2 domain) is read from the class itself, with the protocols of
:mod:`agentspec.bench.protocol`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from agentspec.bench.protocol import Bench, PinnedData, SetUp, ShippedMacros
from agentspec.data import DataSpec, data_report, resolve_data_dir, unverified_data
from agentspec.errors import ConfigError

GROUP = "agentspec.benches"
"""The entry point group benches register under."""


def registered() -> dict[str, EntryPoint]:
    """Every registered bench by name (sorted), read from the installed distributions' metadata.

    One name registered twice for the same class (an editable install seen twice on ``sys.path``) counts once;
    for two different classes it is a :class:`ConfigError` naming both.
    """
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=GROUP):
        seen = found.setdefault(point.name, point)
        if seen.value != point.value:
            raise ConfigError(f"bench {point.name!r} is registered twice, as {seen.value} and as {point.value}: "
                              "uninstall one of the distributions that register it")
    return dict(sorted(found.items()))


def bench_names() -> list[str]:
    """The registered benches' names (no bench is imported)."""
    return list(registered())


def bench_class(name: str) -> Any:
    """The class registered as bench ``name``, imported now; :class:`ConfigError` for an unknown name (the known
    ones listed) or a class that cannot be imported."""
    points = registered()
    if name not in points:
        known = ", ".join(points) or "none (is agentspec installed? `pip install -e .` registers the shipped ones)"
        raise ConfigError(f"unknown bench {name!r}; known: {known}")
    try:
        return points[name].load()
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"bench {name!r} is registered as {points[name].value}, which cannot be loaded: "
                          f"{type(exc).__name__}: {exc}") from exc


def names_with(feature: type) -> list[str]:
    """The registered benches whose class has ``feature`` (:class:`PinnedData`, :class:`SetUp`...); imports them."""
    return [name for name in registered() if isinstance(bench_class(name), feature)]


def open_bench(name: str, data_dir: str | Path | None = None, *, backend: str | None = None, max_steps: int = 200,
               max_errors: int = 10, options: Mapping[str, Any] | None = None) -> Bench[Any]:
    """The bench registered under ``name``, with its data from ``data_dir`` (or where the bench looks by default).

    ``backend`` picks the environment backend of a bench that offers several (``overlay``, ``copy``,
    ``docker``); ``max_steps`` and ``max_errors`` bound tau2's own episode loop; ``options`` are the bench's own
    settings (GAIA: ``levels``, ``search``).
    """
    cls = bench_class(name)
    from agentspec.bench.tau2.harness import Tau2Bench, Tau2Domain

    if isinstance(cls, Tau2Domain):  # the class has every method of a tau2 domain: the tau2 harness runs it
        if backend is not None or options:
            raise ConfigError(f"{name} runs in-process and takes no bench options (--backend, --level, --search-backend)")
        domain: Any = cls
        return Tau2Bench(domain.from_data_dir(data_dir), max_steps=max_steps, max_errors=max_errors)
    _check_options(name, cls, options or {})
    opened: Bench[Any] = cls.from_data_dir(data_dir, **({"backend": backend} if backend else {}), **dict(options or {}))
    return opened


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
    """The data files the bench ``name`` needs; :class:`ConfigError` for a bench whose data agentspec does not pin."""
    cls = bench_class(name)
    if not isinstance(cls, PinnedData):
        raise ConfigError(f"bench {name!r} has no data agentspec fetches (benches with pinned data: "
                          f"{', '.join(names_with(PinnedData)) or 'none'})")
    return cls.data


def bench_data(name: str | None, data_dir: str | None = None, *, unverified: bool = False) -> dict[str, Any] | None:
    """:func:`~agentspec.data.data_report` of bench ``name``'s data (``data_verified``, each file's sha256), for a
    bench whose data agentspec verifies; None for any other.  ``unverified``: data that fails its hash check is
    reported, not refused (``--unverified-data``)."""
    if name is None or not isinstance(cls := bench_class(name), PinnedData):
        return None
    with unverified_data(unverified):
        return data_report(cls.data, resolve_data_dir(cls.data, data_dir))


def shipped_macros(name: str) -> Path:
    """The macro library shipped for bench ``name``; :class:`ConfigError` when there is none to be found.

    A source checkout (or an editable install) has it under ``macros/``; an
    installed wheel does not carry ``macros/``, so there ``--macros`` is needed.
    """
    cls = bench_class(name)
    if not isinstance(cls, ShippedMacros):
        raise ConfigError(f"mode smc needs --macros FILE: bench {name!r} ships no macro library")
    path = Path(cls.shipped_macros)
    if not path.is_file():
        raise ConfigError(f"mode smc needs --macros FILE: the shipped library {path.name} is not at {path}")
    return path


def setup_bench(name: str, *, venv: str | None = None) -> dict[str, Any]:
    """Set up what bench ``name`` runs on (AppWorld: its own venv); its JSON summary.  Idempotent."""
    cls = bench_class(name)
    if not isinstance(cls, SetUp):
        raise ConfigError(f"bench {name!r} needs no setup (benches with a setup: {', '.join(names_with(SetUp))})")
    return {"bench": name, **cls.setup(venv=venv)}
