"""The public namespace stays small and explicit."""

import pytest

import agentspec


def test_all_is_sorted_and_complete():
    assert agentspec.__all__ == sorted(agentspec.__all__)
    for name in agentspec.__all__:
        assert hasattr(agentspec, name), name
    public = {n for n in dir(agentspec) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(agentspec.__all__) | {"Self"}


def test_the_lazy_table_exports_exactly_all():
    # ``_EXPORTS`` is what ``from agentspec import X`` resolves at run time: a name there but not in ``__all__``
    # would be public API by accident, one in ``__all__`` only would fail on first use.
    assert set(agentspec._EXPORTS) == set(agentspec.__all__)


def test_an_unknown_name_is_still_an_import_error():
    # The lazy ``__getattr__`` answers only the public names; anything else fails as a plain module would.
    assert not hasattr(agentspec, "NoSuchName")
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName' from 'agentspec'"):
        from agentspec import NoSuchName  # noqa: F401
