"""The public namespace stays small and explicit."""

import agentspec


def test_all_is_sorted_and_complete():
    assert agentspec.__all__ == sorted(agentspec.__all__)
    for name in agentspec.__all__:
        assert hasattr(agentspec, name), name
    public = {n for n in dir(agentspec) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(agentspec.__all__) | {"Self"}
